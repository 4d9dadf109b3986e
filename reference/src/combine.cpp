// Scalar reference of combine_topk_swa_indices (spec "combine_topk_swa_indices").
//
// Steps of the spec:
//   1. every request b < R = seq_lens.size(0) gets its geometry from combine_request();
//      each malformed request is reported once;
//   2. token t < T belongs to request find_request(query_start_loc rebased by its first
//      element); a token outside every request, or in a malformed one, gets an all -1 row and
//      length 0 (no further report);
//   3. left/right visibility (0 unless visibility_in_effect(): arrays passed and
//      max_image_tokens > 0; negative values reported) and combine_row() give the row's top-k and
//      SWA lengths;
//   4. columns [0, topk_len): combine_topk_entry() (with vllm_v41, top-k values >= N are -1 too);
//      columns [topk_len, topk_len + swa_len):
//      combine_swa_entry(); every other column -1; length topk_len + swa_len.
#include <vector>

#include "dsv4kv/reference.hpp"
#include "views.hpp"

namespace dsv4kv::reference {

void combine_topk_swa_indices(const CombineArgs& args) {
  validate(args);
  const auto topk = detail::mat_view<const int32_t>(args.topk_indices);        // [T, topk_width]
  const auto qsl = detail::vec_view<const int32_t>(args.query_start_loc);      // [R + 1]
  const auto seq_lens = detail::vec_view<const int32_t>(args.seq_lens);        // [R]
  const auto gather_lens = detail::vec_view<const int32_t>(args.gather_lens);  // [>= R]
  // spec: visibility widens the window only when the row reserves image columns.
  const bool has_visibility = spec::visibility_in_effect(args.left_visible.present(), args.max_image_tokens);
  const auto left_visible = has_visibility ? detail::vec_view<const int32_t>(args.left_visible)
                                           : detail::absent_vec<const int32_t>();  // [>= T]
  const auto right_visible = has_visibility ? detail::vec_view<const int32_t>(args.right_visible)
                                            : detail::absent_vec<const int32_t>();  // [>= T]
  auto out = detail::mat_view<int32_t>(args.combined_indices);  // [T, round_up(topk + W + IMG, 128)]
  auto lens = detail::vec_view<int32_t>(args.combined_lens);    // [T]
  const int64_t R = seq_lens.size();
  const int64_t base = qsl(0);
  int64_t errors = 0;

  // spec: combine_topk_swa_indices, step 1. The per-element rules take raw pointers; the 1-D
  // views have unit stride whenever they hold more than one element (validate).
  std::vector<spec::CombineRequest> requests(static_cast<size_t>(R));
  for (int64_t b = 0; b < R; ++b) {
    requests[b] = spec::combine_request(qsl.data(), seq_lens.data(), gather_lens.data(), b);
    if (!requests[b].ok) ++errors;
  }

  for (Eigen::Index t = 0; t < out.rows(); ++t) {
    // spec: combine_topk_swa_indices, step 2.
    const int64_t b = spec::find_request(qsl.data(), R, base, t);
    if (b < 0 || !requests[b].ok) {
      out.row(t).setConstant(spec::kNoIndex);
      lens(t) = 0;
      continue;
    }
    const spec::CombineRequest& req = requests[b];

    // spec: combine_topk_swa_indices, step 3.
    spec::Faults faults;
    const int64_t left = has_visibility ? spec::visibility(left_visible(t), faults) : 0;
    const int64_t right = has_visibility ? spec::visibility(right_visible(t), faults) : 0;
    const spec::CombineRow row =
        spec::combine_row(req, t, args.window_size, args.compress_ratio, args.topk, args.max_image_tokens, left, right,
                          spec::allows_compress_ratio_zero(args.semantics));

    // spec: combine_topk_swa_indices, step 4.
    out.row(t).setConstant(spec::kNoIndex);
    for (int64_t j = 0; j < row.topk_len; ++j)
      out(t, j) = spec::combine_topk_entry(topk(t, j), args.M, args.N, b, args.semantics, faults);
    for (int64_t j = 0; j < row.swa_len; ++j)
      out(t, row.topk_len + j) = spec::combine_swa_entry(req, row, j, args.M, args.N, b, faults);
    lens(t) = static_cast<int32_t>(row.topk_len + row.swa_len);
    errors += faults.n;
  }
  detail::add_errors(args.error_count, errors);
}

}  // namespace dsv4kv::reference
