/// \file tester_generators.hpp
/// \brief RapidCheck generators of random valid and invalid cases for every tester.
///
/// Structural parameters (block size, token counts, strides, widths) are drawn
/// by RapidCheck, so failing cases shrink towards small shapes; bulk contents
/// come from the tester's `seed`, also drawn here. Generators cover block sizes
/// 1, 2, 7, 16, 61, 64, 128, token counts below, at and above tile and block
/// multiples, padded rows, padded strides (e.g. 37,378 bytes) and, for invalid
/// cases, INT_MIN, -2, capacity and INT_MAX in every device-side index.
/// Sizes are capped so one property runs in about a second on the reference.
#pragma once

#include <algorithm>
#include <iterator>
#include <optional>
#include <vector>

#include <rapidcheck.h>

#include "testers.hpp"

namespace dsv4kv::conformance {

/// Whether a generated case may hold out-of-range device-side values.
enum class Validity { kValid, kInvalid };

/// One of the block sizes every generator covers.
inline rc::Gen<int64_t> gen_block_size() {
  return rc::gen::elementOf(std::vector<int64_t>(std::begin(kTestBlockSizes), std::end(kTestBlockSizes)));
}

/// A count in [0, limit]: small values, values next to multiples of `a` and `b`
/// (e.g. the 64-value tile and the block size), or any value.
inline rc::Gen<int64_t> gen_count(int64_t a, int64_t b, int64_t limit) {
  std::vector<int64_t> v = {0, 1, 2, 3};
  for (int64_t m : {a, b})
    for (int64_t k : {1, 2})
      for (int64_t d : {-1, 0, 1})
        if (k * m + d >= 0 && k * m + d <= limit) v.push_back(k * m + d);
  return rc::gen::oneOf(rc::gen::elementOf(v), rc::gen::inRange<int64_t>(0, limit + 1));
}

/// A block stride for block size `bs`: vLLM's, the minimum, or padded by an even
/// number of bytes that is not a multiple of 16 (37,378 for block size 64).
inline rc::Gen<int64_t> gen_stride(int64_t bs) {
  const int64_t need = spec::block_data_bytes(bs);
  return rc::gen::elementOf(std::vector<int64_t>{0, need, need + 2, need + 34, need + 576});
}

inline rc::Gen<uint64_t> gen_seed() { return rc::gen::arbitrary<uint64_t>(); }

/// Share of corrupted values in an invalid case.
inline double draw_invalid_fraction(Validity v) {
  return v == Validity::kValid ? 0.0 : *rc::gen::elementOf(std::vector<double>{0.05, 0.2, 0.5});
}

/// A random quantize case. Valid cases have unique slots (plus -1 padding).
/// \param nonfinite may the NoPE values hold NaN/inf  \param fnuz force the format (nullopt = random)
inline rc::Gen<QuantizeTester> gen_quantize(Validity v, bool nonfinite, std::optional<bool> fnuz = std::nullopt) {
  return rc::gen::exec([=] {
    const int64_t bs = *gen_block_size();
    const int64_t tokens = *gen_count(spec::kTileSize, bs, 200);
    const int64_t min_blocks = (tokens + bs - 1) / bs;
    QuantizeTester t;
    t.tokens(tokens)
        .block_size(bs)
        .extra_k_rows(*rc::gen::inRange<int64_t>(0, 3))
        .k_row_pad(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 8, 64}))
        .num_blocks(*rc::gen::inRange<int64_t>(std::max<int64_t>(min_blocks, 1), min_blocks + 3))
        .stride(*gen_stride(bs))
        .tight_cache_rows(*rc::gen::arbitrary<bool>())
        .fnuz(fnuz ? *fnuz : *rc::gen::arbitrary<bool>())
        .nonfinite(nonfinite && *rc::gen::arbitrary<bool>())
        .pad_fraction(*rc::gen::elementOf(std::vector<double>{0.0, 0.1, 0.5}))
        .invalid_fraction(draw_invalid_fraction(v))
        .count_errors(v == Validity::kValid || *rc::gen::arbitrary<bool>())
        .seed(*gen_seed());
    return t;
  });
}

/// A random gather case over a cache of random bytes.
inline rc::Gen<GatherTester> gen_gather(Validity v) {
  return rc::gen::exec([=] {
    const int64_t bs = *gen_block_size();
    const int64_t cols = *rc::gen::elementOf(std::vector<int64_t>{0, 1, 1, 2, 3, 4});
    const int64_t coverage = std::min<int64_t>(cols * bs, 300);
    const int64_t out_rows = *gen_count(spec::kTileSize, bs, coverage + 2);
    GatherTester t;
    t.requests(*rc::gen::inRange<int64_t>(v == Validity::kValid ? 1 : 0, 5))
        .extra_out_batch(*rc::gen::inRange<int64_t>(0, 2))
        .out_rows(out_rows)
        .out_pad(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 8}), *rc::gen::elementOf(std::vector<int64_t>{0, 0, 64}))
        .offset(*rc::gen::oneOf(rc::gen::just<int64_t>(0), rc::gen::inRange<int64_t>(0, out_rows + 1)))
        .block_size(bs)
        .num_blocks(*rc::gen::inRange<int64_t>(1, 9))
        .stride(*gen_stride(bs))
        .fnuz(*rc::gen::arbitrary<bool>())
        .with_gather_lens(*rc::gen::arbitrary<bool>())
        .table(cols, *rc::gen::inRange<int64_t>(0, 2), *rc::gen::elementOf(std::vector<int64_t>{0, 0, 3}))
        .invalid_fraction(draw_invalid_fraction(v))
        .count_errors(v == Validity::kValid || *rc::gen::arbitrary<bool>())
        .seed(*gen_seed());
    return t;
  });
}

/// A random compute_global_topk_indices_and_lens case.
inline rc::Gen<GlobalTopkTester> gen_global_topk(Validity v) {
  return rc::gen::exec([=] {
    const int64_t bs = *gen_block_size();
    const int64_t topk = *rc::gen::elementOf(std::vector<int64_t>{0, 1, 7, 64, 128, 130, 512});
    int64_t tokens = *gen_count(spec::kTileSize, bs, 130);
    if (tokens * topk > 20000) tokens = 20000 / topk;
    GlobalTopkTester t;
    t.tokens(tokens)
        .topk(topk)
        .row_pads(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 5}), *rc::gen::elementOf(std::vector<int64_t>{0, 0, 3}))
        .requests(*rc::gen::inRange<int64_t>(v == Validity::kValid ? 1 : 0, 5))
        .block_size(bs)
        .table(*rc::gen::inRange<int64_t>(0, 6), *rc::gen::elementOf(std::vector<int64_t>{0, 0, 2}))
        .sentinel_fraction(*rc::gen::elementOf(std::vector<double>{0.0, 0.2, 0.9}))
        .invalid_fraction(draw_invalid_fraction(v))
        .count_errors(v == Validity::kValid || *rc::gen::arbitrary<bool>())
        .seed(*gen_seed());
    return t;
  });
}

/// A random combine_topk_swa_indices case. `visibility`: nullopt = random.
inline rc::Gen<CombineTester> gen_combine(Validity v, std::optional<bool> visibility = std::nullopt) {
  return rc::gen::exec([=] {
    const int64_t img = *rc::gen::elementOf(std::vector<int64_t>{0, 0, 1, 6, 16, 200});
    CombineTester t;
    t.requests(*rc::gen::inRange<int64_t>(v == Validity::kValid ? 1 : 0, 5))
        .max_query(*rc::gen::inRange<int64_t>(1, 41))
        .max_context(*rc::gen::inRange<int64_t>(0, 81))
        .extra_tokens(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 1, 3}))
        .base(*rc::gen::elementOf(std::vector<int32_t>{0, 0, 7, -5}))
        .window(*rc::gen::elementOf(std::vector<int64_t>{1, 2, 7, 16, 64, 128}))
        .compress_ratio(*rc::gen::elementOf(std::vector<int64_t>{1, 4, 128}))
        .topk(*rc::gen::elementOf(std::vector<int64_t>{0, 1, 7, 64, 128, 512}))
        .topk_pad(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 3}))
        .max_image_tokens(img)
        .visibility(visibility ? *visibility : *rc::gen::arbitrary<bool>())
        .topk_range(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 4096}))
        .m_extra(*rc::gen::elementOf(std::vector<int64_t>{0, 5}))
        .invalid_fraction(draw_invalid_fraction(v))
        .count_errors(v == Validity::kValid || *rc::gen::arbitrary<bool>())
        .seed(*gen_seed());
    return t;
  });
}

/// A random build_flashinfer_mixed_sparse_indices case. `visibility`: nullopt = random.
inline rc::Gen<MixedSparseTester> gen_mixed(Validity v, std::optional<bool> visibility = std::nullopt) {
  return rc::gen::exec([=] {
    const int64_t topk = *rc::gen::elementOf(std::vector<int64_t>{0, 1, 7, 64, 130, 512});
    const int64_t sbs = *gen_block_size(), cbs = *gen_block_size();
    const auto span = [](int64_t bs) {
      return *rc::gen::elementOf(std::vector<int64_t>{0, 0, bs, 2 * bs, bs + 3});
    };
    MixedSparseTester t;
    t.decode_requests(*rc::gen::inRange<int64_t>(0, 5))
        .prefill_requests(*rc::gen::inRange<int64_t>(0, 4))
        .max_query(*rc::gen::inRange<int64_t>(1, 21))
        .max_context(*rc::gen::inRange<int64_t>(0, 61))
        .window(*rc::gen::elementOf(std::vector<int64_t>{1, 2, 7, 16, 64, 128}))
        .swa_width_pad(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 3}))
        .compress_ratio(*rc::gen::elementOf(std::vector<int64_t>{1, 4, 128}))
        .topk(topk)
        .prefill_cols(*rc::gen::elementOf(std::vector<int64_t>{topk, topk, topk + 5, std::max<int64_t>(topk - 3, 0), 0}))
        .decode_topk(*rc::gen::elementOf(std::vector<int64_t>{-1, -1, 0, 1, 5, topk, topk + 3}))
        .decode_lens(*rc::gen::arbitrary<bool>())
        .local(*rc::gen::arbitrary<bool>())
        .block_sizes(sbs, cbs)
        .spans(span(sbs), span(cbs))
        .separate_compressed_table(*rc::gen::arbitrary<bool>())
        .max_image_tokens(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 1, 6, 16, 200}))
        .visibility(visibility ? *visibility : *rc::gen::arbitrary<bool>())
        .invalid_fraction(draw_invalid_fraction(v))
        .count_errors(v == Validity::kValid || *rc::gen::arbitrary<bool>())
        .seed(*gen_seed());
    return t;
  });
}

}  // namespace dsv4kv::conformance
