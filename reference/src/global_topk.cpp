// Scalar reference of compute_global_topk_indices_and_lens
// (spec "compute_global_topk_indices_and_lens").
//
// Steps of the spec, per token t < T = topk_indices.size(0):
//   1. r = token_to_req[t]; a request outside the block table's rows gives an all -1 row,
//      length 0, and one report;
//   2. out[t, c] = lookup_slot(topk[t, c], block_table row r) for every column c (a negative local
//      index stays -1 without a report); the seed keeps every entry in its column, the vllm_v4 and
//      vllm_v41 profiles pack the translated entries to the left, in column order, and fill the
//      rest of the row with -1, and give an invalid token (is_valid_token false) an all -1 row
//      without looking anything up;
//   3. lens[t] = is_valid_token[t] ? #{c : out[t, c] >= 0} : 0.
#include "dsv4kv/reference.hpp"
#include "views.hpp"

namespace dsv4kv::reference {

void compute_global_topk_indices_and_lens(const GlobalTopkArgs& args) {
  validate(args);
  const auto topk = detail::mat_view<const int32_t>(args.topk_indices);          // [T, K]
  const auto token_to_req = detail::vec_view<const int32_t>(args.token_to_req);  // [>= T]
  const auto block_table = detail::mat_view<const int32_t>(args.block_table);    // [R, max_blocks]
  const auto is_valid = detail::vec_view<const uint8_t>(args.is_valid_token);    // [>= T] bool bytes
  auto out = detail::mat_view<int32_t>(args.global_topk_indices);                // [T, K]
  auto lens = detail::vec_view<int32_t>(args.topk_lens);                         // [T]
  const int64_t B = args.block_size;
  const bool pack = spec::packs_global_topk(args.semantics);
  int64_t errors = 0;  // 64-bit: per-row Faults are summed here so a huge batch cannot overflow them

  for (Eigen::Index t = 0; t < topk.rows(); ++t) {
    // spec: compute_global_topk_indices_and_lens, step 1.
    const int64_t r = token_to_req(t);
    if (r < 0 || r >= block_table.rows()) {
      // topk may be 0 wide, and an empty view may have a null data pointer: row() would offset it.
      if (out.cols() > 0) out.row(t).setConstant(spec::kNoIndex);
      lens(t) = 0;
      ++errors;
      continue;
    }
    if (pack && is_valid(t) == 0) {
      if (out.cols() > 0) out.row(t).setConstant(spec::kNoIndex);
      lens(t) = 0;
      continue;
    }
    const detail::TableRow row = detail::table_row(block_table, r);

    // spec: compute_global_topk_indices_and_lens, step 2.
    spec::Faults faults;
    int32_t count = 0;
    for (Eigen::Index c = 0; c < topk.cols(); ++c) {
      const int32_t v = spec::lookup_slot(topk(t, c), row.data, row.cols, B, faults);
      if (!pack)
        out(t, c) = v;
      else if (v >= 0)
        out(t, count) = v;  // count <= c: the column was read already
      if (v >= 0) ++count;
    }
    if (pack)
      for (Eigen::Index c = count; c < topk.cols(); ++c) out(t, c) = spec::kNoIndex;
    errors += faults.n;

    // spec: compute_global_topk_indices_and_lens, step 3.
    lens(t) = is_valid(t) != 0 ? count : 0;
  }
  detail::add_errors(args.error_count, errors);
}

}  // namespace dsv4kv::reference
