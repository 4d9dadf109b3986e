// Scalar reference of build_flashinfer_mixed_sparse_indices
// (spec "build_flashinfer_mixed_sparse_indices").
//
// Row t < D is a decode token, row D + p a prefill token. Each row has
// ST = swa_width + image_width SWA columns, then P4 = round_up(max(topk, dct), 4)
// compressed columns. Steps of the spec:
//   Decode row t:
//     1. SWA column c: remap_block_span(decode_swa[t, c] for c < swa_width, else -1);
//     2. compressed column c: v = decode_compressed[t, c] for c < dct, else -1; local indices
//        are translated through the compressed block table row token_to_req[t]
//        (lookup_slot), then remap_block_span();
//     3. length ST + (0 without compressed indices; the count of non-negative compressed
//        outputs of a valid token for local indices, 0 for an invalid one; decode_lens[t]
//        when given; else dct).
//     With vllm_v4 and swa_width > window (DSpark rows): dspark_row() of the row's non-negative
//     SWA entries and the draft tokens after t places them in [0, causal) and
//     [window, window + spill); the compressed columns of step 2 follow at window + spill; the
//     length counts window + spill SWA columns.
//   Prefill row t:
//     4. prefill_token() places the token in its request (a malformed one: all -1, length 0,
//        one report);
//     5. visible_window() of its position (visibility values only with image columns), with
//        vllm_v41 starting no earlier than replay_start[req] (a negative one reported, read as 0);
//        SWA column c < n = end - start: remap(lookup_slot(start + c, SWA table row)), else -1;
//     6. compressed column c: l = prefill_topk[t - D, c] for c < min(its width, topk_len),
//        else -1; remap(lookup_slot(l, compressed table row));
//     7. length ST + topk_len.
#include <algorithm>

#include "dsv4kv/reference.hpp"
#include "views.hpp"

namespace dsv4kv::reference {

void build_flashinfer_mixed_sparse_indices(const MixedSparseArgs& args) {
  validate(args);
  const auto decode_swa = detail::mat_view<const int32_t>(args.decode_swa_indices);  // [D, swa_width]
  const bool has_decode_comp = args.decode_compressed_indices.present();
  const auto decode_comp = has_decode_comp ? detail::mat_view<const int32_t>(args.decode_compressed_indices)
                                           : detail::MatView<const int32_t>(nullptr, 0, 0, Eigen::OuterStride<>(0));
  const bool has_decode_lens = args.decode_compressed_topk_lens.present();
  const auto decode_lens = has_decode_lens ? detail::vec_view<const int32_t>(args.decode_compressed_topk_lens)
                                           : detail::absent_vec<const int32_t>();        // [>= D]
  const auto prefill_topk = detail::mat_view<const int32_t>(args.prefill_topk_indices);  // [P, cols]
  const auto seq_lens = detail::vec_view<const int32_t>(args.seq_lens);                  // [R]
  const auto qsl = detail::vec_view<const int32_t>(args.query_start_loc);                // [R + 1]
  const auto token_to_req = detail::vec_view<const int32_t>(args.token_to_req);          // [>= D + P]
  const auto swa_table = detail::mat_view<const int32_t>(args.swa_block_table);          // [R, *]
  // spec: the compressed cache shares the SWA block table unless it has its own.
  const auto comp_table = args.compressed_block_table.present()
                              ? detail::mat_view<const int32_t>(args.compressed_block_table)
                              : swa_table;  // [R, *]
  const bool are_local = args.decode_compressed_indices_are_local;
  // decode_is_valid_token is validated (and read) only for local, non-empty compressed indices.
  const bool has_valid = are_local && args.decode_compressed_indices.present() &&
                         args.decode_compressed_indices.shape[1] > 0 && args.decode_is_valid_token.present();
  const auto decode_valid = has_valid ? detail::vec_view<const uint8_t>(args.decode_is_valid_token)
                                      : detail::absent_vec<const uint8_t>();  // [>= D] bool bytes
  // spec: image columns (and visibility reads) only when the arrays are passed and max_image_tokens > 0.
  const bool has_image = spec::visibility_in_effect(args.prefill_left_visible.present(), args.max_image_tokens);
  const auto left_visible = has_image ? detail::vec_view<const int32_t>(args.prefill_left_visible)
                                      : detail::absent_vec<const int32_t>();  // [>= D + P]
  const auto right_visible = has_image ? detail::vec_view<const int32_t>(args.prefill_right_visible)
                                       : detail::absent_vec<const int32_t>();  // [>= D + P]
  auto out = detail::mat_view<int32_t>(args.sparse_indices);                   // [D + P, ST + P4]
  auto lens = detail::vec_view<int32_t>(args.sparse_topk_lens);                // [D + P]

  const int64_t D = decode_swa.rows();
  const int64_t P = prefill_topk.rows();
  const int64_t swa_width = decode_swa.cols();
  const int64_t image_width = has_image ? args.max_image_tokens : 0;
  const int64_t swa_total = swa_width + image_width;  // ST
  const int64_t dct = has_decode_comp ? decode_comp.cols() : 0;
  const int64_t comp_cols = out.cols() - swa_total;  // P4 = round_up(max(topk, dct), 4) (validate)
  const int64_t sbs = args.swa_block_size;
  const int64_t cbs = args.compressed_block_size;
  const int64_t sspan = args.swa_block_span.value_or(sbs);
  const int64_t cspan = args.compressed_block_span.value_or(cbs);
  const int64_t R = seq_lens.size();
  const bool dspark = spec::dspark_decode_rows(args.semantics) && swa_width > args.window_size;
  const bool bounded = spec::bounded_replay(args.semantics);
  const auto replay_start =
      bounded ? detail::vec_view<const int32_t>(args.replay_start) : detail::absent_vec<const int32_t>();  // [>= R]
  int64_t errors = 0;

  for (int64_t t = 0; t < D; ++t) {
    spec::Faults faults;
    // spec: build_flashinfer_mixed_sparse_indices, step 1 (-1 across the image columns); DSpark rows
    // place their entries by dspark_row() and move the compressed region to window + spill.
    int64_t swa_cols = swa_total;  // the SWA columns before the compressed region, and in the length
    if (!dspark) {
      for (int64_t c = 0; c < swa_total; ++c)
        out(t, c) = spec::remap_block_span(c < swa_width ? int64_t{decode_swa(t, c)} : -1, sbs, sspan, faults);
    } else {
      int64_t entries = 0;
      for (int64_t c = 0; c < swa_width; ++c) entries += decode_swa(t, c) >= 0 ? 1 : 0;
      const int64_t future = spec::decode_future_tokens(qsl.data(), R, token_to_req(t), t);
      const spec::DsparkRow dr = spec::dspark_row(entries, future, args.window_size, swa_width);
      swa_cols = args.window_size + dr.spill;
      for (int64_t c = 0; c < swa_cols; ++c) {
        const int64_t src = spec::dspark_swa_source(dr, args.window_size, c);
        out(t, c) = spec::remap_block_span(src >= 0 ? int64_t{decode_swa(t, src)} : -1, sbs, sspan, faults);
      }
      for (int64_t c = swa_cols + comp_cols; c < out.cols(); ++c) out(t, c) = spec::kNoIndex;
    }

    // spec: build_flashinfer_mixed_sparse_indices, step 2. A request outside the compressed
    // table gives an empty row: each local index looked up through it is -1 and reported.
    const bool translate = are_local && dct > 0;
    const detail::TableRow row =
        translate ? detail::table_row(comp_table, token_to_req(t)) : detail::TableRow{nullptr, 0};
    int32_t count = 0;
    for (int64_t c = 0; c < comp_cols; ++c) {
      int64_t v = c < dct ? int64_t{decode_comp(t, c)} : -1;
      if (translate && v >= 0) v = spec::lookup_slot(v, row.data, row.cols, cbs, faults);
      const int32_t o = spec::remap_block_span(v, cbs, cspan, faults);
      out(t, swa_cols + c) = o;
      if (o >= 0) ++count;
    }

    // spec: build_flashinfer_mixed_sparse_indices, step 3.
    lens(t) = spec::mixed_decode_length(  // a length past INT32_MAX: clamped, counted
        swa_cols, dct, are_local, count, [&] { return decode_valid(t) != 0; }, has_decode_lens,
        [&] { return int64_t{decode_lens(t)}; }, faults);
    errors += faults.n;
  }

  for (int64_t t = D; t < D + P; ++t) {
    // spec: build_flashinfer_mixed_sparse_indices, step 4 (query_start_loc holds global token
    // indices here: no rebasing).
    const spec::PrefillToken p = spec::prefill_token(qsl.data(), seq_lens.data(), R, token_to_req(t), t);
    if (!p.ok) {
      out.row(t).setConstant(spec::kNoIndex);
      lens(t) = 0;
      ++errors;
      continue;
    }
    spec::Faults faults;

    // spec: build_flashinfer_mixed_sparse_indices, step 5. Visibility widens the window only
    // when the row has image columns to hold it.
    const int64_t left = image_width > 0 ? spec::visibility(left_visible(t), faults) : 0;
    const int64_t right = image_width > 0 ? spec::visibility(right_visible(t), faults) : 0;
    spec::Window w = spec::visible_window(p.pos, args.window_size, left, right);
    if (bounded) w.start = std::max(w.start, spec::replay_start_of(replay_start(p.req), faults));
    const int64_t n = std::max<int64_t>(w.end - w.start, 0);
    const detail::TableRow swa_row = detail::table_row(swa_table, p.req);
    for (int64_t c = 0; c < swa_total; ++c) {
      out(t, c) = c < n
                      ? spec::remap_block_span(spec::lookup_slot(w.start + c, swa_row.data, swa_row.cols, sbs, faults),
                                               sbs, sspan, faults)
                      : spec::kNoIndex;
    }

    // spec: build_flashinfer_mixed_sparse_indices, step 6.
    const int64_t topk_len =
        spec::topk_len_of(p.pos, args.compress_ratio, args.topk, spec::allows_compress_ratio_zero(args.semantics));
    const int64_t readable = std::min<int64_t>(prefill_topk.cols(), topk_len);
    const detail::TableRow comp_row = detail::table_row(comp_table, p.req);
    for (int64_t c = 0; c < comp_cols; ++c) {
      const int64_t l = c < readable ? int64_t{prefill_topk(t - D, c)} : -1;
      out(t, swa_total + c) =
          spec::remap_block_span(spec::lookup_slot(l, comp_row.data, comp_row.cols, cbs, faults), cbs, cspan, faults);
    }

    // spec: build_flashinfer_mixed_sparse_indices, step 7 (the whole SWA region counts).
    lens(t) = static_cast<int32_t>(swa_total + topk_len);
    errors += faults.n;
  }
  detail::add_errors(args.error_count, errors);
}

}  // namespace dsv4kv::reference
