"""GPU tests: torch CUDA tensors through every function, byte-identical to the CPU path (golden
cases and larger random inputs, error counts included), PyTorch's current stream and explicit
streams, CUDA-graph capture and replay of every operation, CuPy arrays.

Skipped with the reason shown when torch, a CUDA device or the CUDA backend is missing. Set
DSV4KV_REQUIRE_CUDA=1 to turn those skips into failures (where a GPU must be used).
"""

import ml_dtypes
import numpy as np
import pytest

import dsv4kv
from _support import (RUNNERS, TorchXP, all_cases, assert_same, bits, check_against_golden, cuda_skip_reason,
                      have_golden, make_xp, problem_arrays, random_problem, require_cuda, run_all, run_ops)
from op_cases import OPS

L = dsv4kv.layout
BF16 = ml_dtypes.bfloat16


REASON = cuda_skip_reason()
if REASON and require_cuda():
    raise RuntimeError(f"DSV4KV_REQUIRE_CUDA=1 but: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"GPU tests: {REASON}")

CASES = all_cases() if have_golden() else []


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_golden_case_on_cuda_matches_golden_and_cpu(case):
    gpu = RUNNERS[case.file](TorchXP("cuda"), case)
    check_against_golden(gpu, case)
    cpu = RUNNERS[case.file](make_xp("numpy"), case)
    for name in cpu:
        if name == "error_count":
            assert gpu[name] == cpu[name], f"{case}: error_count GPU {gpu[name]} != CPU {cpu[name]}"
        else:
            np.testing.assert_array_equal(bits(gpu[name]), bits(cpu[name]), err_msg=f"{case}: {name}")


@pytest.mark.parametrize("seed,block_size", [(1, 64), (2, 128), (3, 16), (4, 64)])
def test_random_inputs_byte_identical_to_cpu(seed, block_size):
    pr = random_problem(seed, block_size)
    cpu = run_all(make_xp("numpy"), pr)
    assert cpu["ec"].sum() > 0  # the bad values were seen (and counted) on the CPU
    gpu = run_all(TorchXP("cuda"), pr)
    assert_same(cpu, gpu, f"seed {seed}")


def test_outputs_are_torch_tensors_on_the_input_device():
    import torch

    pr = random_problem(5)
    xp = TorchXP("cuda")
    g, lens = dsv4kv.compute_global_topk_indices_and_lens(
        xp.from_np(pr["topk_idx"][:, :8]), xp.from_np(pr["t2r"]), xp.from_np(pr["block_table"]), 64,
        xp.from_np(pr["valid"]))
    assert isinstance(g, torch.Tensor) and g.is_cuda and g.dtype == torch.int32 and lens.shape == (g.shape[0],)


def test_side_stream_and_explicit_stream():
    import torch

    pr = random_problem(6)
    want = run_all(make_xp("numpy"), pr)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # PyTorch's current stream is picked up
        got = run_all(TorchXP("cuda"), pr)
    assert_same(want, got, "current side stream")
    other = torch.cuda.Stream()
    got = run_all(TorchXP("cuda"), pr, stream=other)  # explicit torch stream
    assert_same(want, got, "explicit torch stream")
    got = run_all(TorchXP("cuda"), pr, stream=other.cuda_stream)  # explicit int handle
    assert_same(want, got, "explicit int stream")


def test_mixed_devices_are_rejected():
    import torch

    k = torch.zeros(2, L.kHeadDim, dtype=torch.bfloat16, device="cuda")
    cache = torch.zeros(1, L.vllm_block_stride(64), dtype=torch.uint8)
    with pytest.raises(ValueError, match="all arrays must be on one device: k is on cuda:0, k_cache is on cpu"):
        dsv4kv.quantize_and_insert_k_cache(k, cache, torch.zeros(2, dtype=torch.int64, device="cuda"))


def test_contract_errors_on_cuda_match_cpu_messages():
    import torch

    k = torch.zeros(2, 448, dtype=torch.bfloat16, device="cuda")
    cache = torch.zeros(1, L.vllm_block_stride(64), dtype=torch.uint8, device="cuda")
    with pytest.raises(ValueError, match="^quantize_and_insert_k_cache: k must have 512 columns, got 448$"):
        dsv4kv.quantize_and_insert_k_cache(k, cache, torch.zeros(2, dtype=torch.int64, device="cuda"))


def test_cuda_graph_capture_and_replay_of_every_op():
    import torch

    pr = random_problem(7)
    xp = TorchXP("cuda")
    # Static inputs and output buffers, written before capture and refilled before each replay.
    static = {name: xp.from_np(v) for name, v in problem_arrays(pr).items()}
    ec = torch.zeros(len(OPS), dtype=torch.int32, device="cuda")

    def body():
        return run_ops(static, pr, ec)

    # Warm up on a side stream (as torch.cuda.graphs recommends), then capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        body()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        results = body()

    for seed in (8, 9):
        fresh = random_problem(seed)
        for name, v in problem_arrays(fresh).items():
            static[name].copy_(xp.from_np(v))
        ec.zero_()
        graph.replay()
        torch.cuda.synchronize()
        want = run_all(make_xp("numpy"), fresh)
        got = {name: bits(xp.to_np(v)) for name, v in {**results, "ec": ec}.items()}
        assert_same(want, got, f"graph replay, seed {seed}")


def test_cupy_arrays():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    pr = random_problem(10)
    want_g, want_l = dsv4kv.compute_global_topk_indices_and_lens(pr["topk_idx"][:, :9], pr["t2r"], pr["block_table"],
                                                                 64, pr["valid"])
    g, lens = dsv4kv.compute_global_topk_indices_and_lens(
        cupy.asarray(pr["topk_idx"][:, :9]), cupy.asarray(pr["t2r"]), cupy.asarray(pr["block_table"]), 64,
        cupy.asarray(pr["valid"]))
    assert isinstance(g, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(g), want_g)
    np.testing.assert_array_equal(cupy.asnumpy(lens), want_l)
    cache = cupy.asarray(pr["cache"])
    k = cupy.asarray(pr["k"].view(np.uint16))  # CuPy has no bfloat16: not accepted as k
    with pytest.raises(TypeError, match="k must be bfloat16, got uint16"):
        dsv4kv.quantize_and_insert_k_cache(k, cache, cupy.asarray(pr["slots"]))
