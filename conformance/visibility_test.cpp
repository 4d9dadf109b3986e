// spec::image_visibility against the golden files: every case that passes image visibility
// records its image spans (metadata caseNNN.spans, inclusive positions per request), and the
// left/right arrays the rule computes from them must equal the arrays the case passed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "dsv4kv/spec.hpp"
#include "golden.hpp"
#include "safetensors.hpp"

namespace {

namespace S = dsv4kv::spec;
using dsv4kv::conformance::SafetensorsFile;

TEST(ImageVisibility, WorkedExample) {  // spec/operations.md, "Image visibility"
  // An image over positions [4, 12] with max_image_tokens 6.
  EXPECT_EQ(S::image_visibility(4, 4, 12, 6).left, 0);
  EXPECT_EQ(S::image_visibility(4, 4, 12, 6).right, 6);
  EXPECT_EQ(S::image_visibility(12, 4, 12, 6).left, 5);
  EXPECT_EQ(S::image_visibility(12, 4, 12, 6).right, 0);
  EXPECT_EQ(S::image_visibility(3, 4, 12, 6).left, 0);
  EXPECT_EQ(S::image_visibility(13, 4, 12, 6).right, 0);
}

/// The tokens compared, by how a file lays its visibility arrays out.
struct Compared {
  int64_t rows = 0;     ///< one row per token of query_start_loc (rebased by its first element)
  int64_t prefill = 0;  ///< prefill_* arrays: prefill rows after the decode rows, global token indices
};

/// Checks one golden file (any operation whose cases record image spans); adds the tokens compared.
void check_file(const std::string& path, Compared& compared) {
  const SafetensorsFile f = SafetensorsFile::load(path);
  for (const std::string& k : f.case_names()) {
    const std::string spans_text = f.meta(k + ".spans");
    if (spans_text.empty() || f.param(k + ".param.has_image") == 0) continue;
    const bool prefill = !f.has(k + ".left_visible");
    const auto spans = nlohmann::json::parse(spans_text);
    const int64_t max_img = f.param(k + ".param.max_image_tokens");
    const auto qsl = f.i32(k + ".query_start_loc");
    const auto seq = f.i32(k + ".seq_lens");
    const auto left = f.i32(k + (prefill ? ".prefill_left_visible" : ".left_visible"));
    const auto right = f.i32(k + (prefill ? ".prefill_right_visible" : ".right_visible"));
    auto check = [&](int64_t b, int64_t t, int64_t qs, int64_t qe) {
      const int64_t pos = seq[b] - (qe - qs) + (t - qs);
      S::Visibility v{0, 0};
      for (const auto& span : spans.at(b)) {
        const S::Visibility w = S::image_visibility(pos, span.at(0).get<int64_t>(), span.at(1).get<int64_t>(), max_img);
        if (w.left != 0 || w.right != 0) v = w;
      }
      EXPECT_EQ(v.left, left.at(t)) << path << " " << k << " token " << t << " pos " << pos;
      EXPECT_EQ(v.right, right.at(t)) << path << " " << k << " token " << t << " pos " << pos;
      ++(prefill ? compared.prefill : compared.rows);
    };
    if (!prefill) {  // query_start_loc is rebased by its first element
      for (size_t b = 0; b + 1 < qsl.size(); ++b)
        for (int64_t t = qsl[b] - qsl[0]; t < qsl[b + 1] - qsl[0]; ++t)
          check(b, t, qsl[b] - qsl[0], qsl[b + 1] - qsl[0]);
    } else {  // prefill rows after the decode rows; global token indices
      const auto t2r = f.i32(k + ".token_to_req");
      for (size_t t = static_cast<size_t>(f.param(k + ".param.num_decode_tokens")); t < t2r.size(); ++t)
        check(t2r[t], static_cast<int64_t>(t), qsl[t2r[t]], qsl[t2r[t] + 1]);
    }
  }
}

TEST(ImageVisibility, ReproducesGoldenArraysFromSpans) {
  Compared compared;
  for (const std::string& path : dsv4kv::conformance::golden_files()) check_file(path, compared);
  EXPECT_GT(compared.rows, 0);  // both layouts are exercised
  EXPECT_GT(compared.prefill, 0);
  EXPECT_GT(compared.rows + compared.prefill, 1000);  // 1,178 tokens with image visibility in the public set
}

}  // namespace
