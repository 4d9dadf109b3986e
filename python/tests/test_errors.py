"""Argument errors: ValueError / TypeError carrying the C++ contract messages, for NumPy and
torch CPU inputs."""

import ml_dtypes
import numpy as np
import pytest

import dsv4kv
from _support import frameworks_available, make_xp
from op_cases import OPS, adopt

L = dsv4kv.layout
BF16 = ml_dtypes.bfloat16


def quant_args(xp, rows=2, cols=None, cache_stride=None, slots=None):
    cols = L.kHeadDim if cols is None else cols
    stride = L.vllm_block_stride(64) if cache_stride is None else cache_stride
    k = xp.from_np(np.ones((rows, cols), BF16))
    cache = xp.from_np(np.zeros((2, stride), np.uint8))
    slots = xp.from_np(np.arange(rows, dtype=np.int64) if slots is None else slots)
    return k, cache, slots


@pytest.fixture(params=["numpy", "torch-cpu"])
def xp(request):
    if request.param not in frameworks_available():
        pytest.skip("torch is not installed")
    return make_xp(request.param)


def raises(exc, message):
    """pytest.raises matching the whole message literally."""
    import re

    return pytest.raises(exc, match="^" + re.escape(message) + "$")


def test_wrong_width_is_value_error(xp):
    k, cache, slots = quant_args(xp, cols=L.kNopeDim)
    with raises(ValueError, "quantize_and_insert_k_cache: k must have 512 columns, got 448"):
        dsv4kv.quantize_and_insert_k_cache(k, cache, slots)


def test_unsupported_dtype_is_type_error(xp):
    k = xp.from_np(np.ones((2, L.kHeadDim), np.float32))
    _, cache, slots = quant_args(xp)
    with raises(TypeError, "quantize_and_insert_k_cache: k must be bfloat16, got float32"):
        dsv4kv.quantize_and_insert_k_cache(k, cache, slots)


def test_supported_but_wrong_dtype_is_type_error(xp):
    k, cache, _ = quant_args(xp)
    with raises(TypeError, "quantize_and_insert_k_cache: slot_mapping must be int64, got int32"):
        dsv4kv.quantize_and_insert_k_cache(k, cache, xp.from_np(np.arange(2, dtype=np.int32)))


def test_is_ue8m0_false_is_rejected(xp):
    k, cache, slots = quant_args(xp)
    with raises(ValueError, "quantize_and_insert_k_cache: is_ue8m0 must be true: only UE8M0 (power-of-two) "
                            "scales are supported"):
        dsv4kv.quantize_and_insert_k_cache(k, cache, slots, 64, False)


def test_odd_block_stride_is_rejected(xp):
    stride = L.block_data_bytes(64) + 1
    k, cache, slots = quant_args(xp, cache_stride=stride)
    with raises(ValueError, "quantize_and_insert_k_cache: k_cache block stride must be even (bf16 RoPE values "
                            f"are 2-byte aligned), got {stride}"):
        dsv4kv.quantize_and_insert_k_cache(k, cache, slots)


def test_odd_cache_address_is_rejected(xp):
    # A view that starts at an odd byte of its buffer: the stride is even, the base is not.
    import re

    stride = L.vllm_block_stride(64)
    k, _, slots = quant_args(xp)
    buf = xp.from_np(np.zeros(2 * stride + 1, np.uint8))
    cache = xp.strided(buf[1:], (2, stride), (stride, 1))
    with pytest.raises(ValueError, match="^" + re.escape(
            "quantize_and_insert_k_cache: k_cache must be aligned to 2 bytes (bf16 RoPE values are 2-byte "
            "aligned), got address 0x") + "[0-9a-f]+$"):
        dsv4kv.quantize_and_insert_k_cache(k, cache, slots)


def test_more_slots_than_rows(xp):
    k, cache, _ = quant_args(xp)
    with raises(ValueError, "quantize_and_insert_k_cache: slot_mapping must not have more entries (3) than k "
                            "has rows (2)"):
        dsv4kv.quantize_and_insert_k_cache(k, cache, xp.from_np(np.arange(3, dtype=np.int64)))


def test_dequantize_offset_range(xp):
    out = xp.from_np(np.zeros((1, 4, L.kHeadDim), BF16))
    cache = xp.from_np(np.zeros((1, L.vllm_block_stride(64)), np.uint8))
    i32 = lambda v: xp.from_np(np.array(v, np.int32))  # noqa: E731
    with raises(ValueError, "dequantize_and_gather_k_cache: offset must be in [0, out.shape[1] = 4], got 5"):
        dsv4kv.dequantize_and_gather_k_cache(out, cache, i32([2]), None, i32([[0]]), 64, 5)


def test_global_topk_bool_rule(xp):
    i32 = lambda v: xp.from_np(np.array(v, np.int32))  # noqa: E731
    with raises(TypeError, "compute_global_topk_indices_and_lens: is_valid_token must be bool, got uint8"):
        dsv4kv.compute_global_topk_indices_and_lens(i32([[0, 1]]), i32([0]), i32([[0]]), 64,
                                                    xp.from_np(np.ones(1, np.uint8)))


def test_mixed_requires_valid_token_mask_for_local_indices(xp):
    i32 = lambda v: xp.from_np(np.array(v, np.int32))  # noqa: E731
    with raises(ValueError, "build_flashinfer_mixed_sparse_indices: decode_is_valid_token is required when "
                            "decode_compressed_indices_are_local is true"):
        dsv4kv.build_flashinfer_mixed_sparse_indices(
            i32(np.zeros((1, 8))), i32(np.zeros((1, 4))), None, i32(np.zeros((0, 4))), i32([0, 1]), i32([5]),
            i32([0]), i32([[0]]), 64, None, 64, 8, 4, 4, decode_compressed_indices_are_local=True)


def test_error_count_rules(xp):
    k, cache, slots = quant_args(xp)
    with raises(TypeError, "quantize_and_insert_k_cache: error_count must be int32, got int64"):
        dsv4kv.quantize_and_insert_k_cache(k, cache, slots, error_count=xp.from_np(np.zeros(1, np.int64)))
    with raises(ValueError, "quantize_and_insert_k_cache: error_count must have exactly one element, got 2"):
        dsv4kv.quantize_and_insert_k_cache(k, cache, slots, error_count=xp.from_np(np.zeros(2, np.int32)))


def test_not_an_array_is_type_error():
    with pytest.raises(TypeError, match="^quantize_and_insert_k_cache: k must be an array supporting DLPack"):
        dsv4kv.quantize_and_insert_k_cache([[0.0] * 512], np.zeros((1, 37440), np.uint8), np.zeros(1, np.int64))


def test_read_only_output_is_rejected():
    k, cache, slots = quant_args(make_xp("numpy"))
    cache.setflags(write=False)
    with raises(ValueError, "quantize_and_insert_k_cache: k_cache must be writable, got a read-only array"):
        dsv4kv.quantize_and_insert_k_cache(k, cache, slots)


def test_read_only_inputs_are_fine():
    k, cache, slots = quant_args(make_xp("numpy"))
    k.setflags(write=False)
    slots.setflags(write=False)
    dsv4kv.quantize_and_insert_k_cache(k, cache, slots)
    assert cache.any()


def test_bad_scalar_types():
    k, cache, slots = quant_args(make_xp("numpy"))
    with pytest.raises(TypeError, match="block_size must be an integer, got float"):
        dsv4kv.quantize_and_insert_k_cache(k, cache, slots, 64.0)
    with pytest.raises(TypeError, match="stream must be"):
        dsv4kv.quantize_and_insert_k_cache(k, cache, slots, stream="default")


def test_out_must_be_a_pair():
    i32 = lambda v: np.array(v, np.int32)  # noqa: E731
    with pytest.raises(TypeError, match="out must be a pair"):
        dsv4kv.compute_global_topk_indices_and_lens(i32([[0]]), i32([0]), i32([[0]]), 64, np.ones(1, bool),
                                                    out=np.zeros((1, 1), np.int32))


def test_cuda_arrays_without_cuda_backend():
    if dsv4kv.HAS_CUDA:
        pytest.skip("this build has the CUDA backend")

    class FakeCuda:
        """A DLPack producer that claims CUDA memory (never dereferenced: the call fails first)."""

        def __init__(self, a):
            self.a = a

        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, **kw):
            raise BufferError("no CUDA here")

    k, cache, slots = quant_args(make_xp("numpy"))
    with pytest.raises(TypeError):  # not importable: reported as not an array
        dsv4kv.quantize_and_insert_k_cache(FakeCuda(k), cache, slots)


def valid_calls(xp):
    """For each operation: a call with valid arguments, as (function, argument dict); the required
    array arguments are the dict entries listed in REQUIRED (both from the op_cases modules)."""
    return {m.NAME: m.valid_call(xp) for m in OPS}


REQUIRED = {m.NAME: m.REQUIRED for m in OPS}


@pytest.mark.parametrize("op", sorted(REQUIRED))
def test_none_for_a_required_array_is_the_contract_message(xp, op):
    fn, args = valid_calls(xp)[op]
    fn(**args)  # the baseline call is valid: each error below comes from the one None
    for name in REQUIRED[op]:
        with raises(ValueError, f"{op}: {name} is required"):
            fn(**{**args, name: None})


def test_none_for_a_required_output_is_the_contract_message(xp):
    fn, args = valid_calls(xp)["compute_global_topk_indices_and_lens"]
    g, lens = fn(**args)
    with raises(ValueError, "compute_global_topk_indices_and_lens: topk_lens is required"):
        fn(**args, out=(g, None))


def test_misaligned_error_count_is_rejected():
    # A NumPy int32 view one byte into a buffer: DLPack exports it as is; the counter must not be
    # handed to the backend (a misaligned atomicAdd on CUDA).
    k, cache, slots = quant_args(make_xp("numpy"), slots=np.array([0, 10**6], np.int64))  # slot 10**6: counted
    buf = np.zeros(16, np.uint8)
    counter = buf[1:5].view(np.int32)
    before = cache.copy()
    with pytest.raises(ValueError, match=r"^quantize_and_insert_k_cache: error_count must be aligned to 4 bytes "):
        dsv4kv.quantize_and_insert_k_cache(k, cache, slots, error_count=counter)
    assert not buf.any() and np.array_equal(cache, before)
    aligned = buf[4:8].view(np.int32)
    dsv4kv.quantize_and_insert_k_cache(k, cache, slots, error_count=aligned)
    assert aligned[0] == 1


# Each operation's own contract-error tests (op_cases/<op>.py), run here with the xp fixture above.
adopt(globals(), "ERROR_TESTS")



def test_semantics_names_are_the_spec_profiles():
    assert dsv4kv.SEMANTICS == ("seed", "vllm_v4", "vllm_v41")


@pytest.mark.parametrize("value", [-1, 2**31, 2**62])
def test_layout_rules_refuse_out_of_range_arguments(value):
    """The exported layout rules take int32 sizes: outside [0, 2^31) is an error, never a wrapped product."""
    L = dsv4kv.layout
    with pytest.raises(ValueError, match=r"vllm_block_stride: block_size must be in \[0, 2\^31\)"):
        L.vllm_block_stride(value)
    with pytest.raises(ValueError, match=r"scale_offset: pos must be in \[0, 2\^31\)"):
        L.scale_offset(64, value, 0)
    big = 2**31 - 1
    assert L.vllm_block_stride(big) == -(-big * L.kTokenBytes // L.kVllmBlockRounding) * L.kVllmBlockRounding
