// The bad-input catalogue (spec "Failure model"): for every operation of the table, every way an
// argument can be wrong, and what must happen. The rows live with their operation
// (support/ops/<op>_properties.hpp, bad_inputs::OpRows<Args>); the machinery that builds, mutates,
// runs and checks a row is support/bad_inputs.{hpp,cpp}. This file registers the rows with
// GoogleTest, for the reference and for CUDA (byte-identical to the reference), and tests the
// table and the machinery themselves; it names no operation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bad_inputs.hpp"

namespace dsv4kv::conformance::bad_inputs {
namespace {

std::string row_test_name(const ::testing::TestParamInfo<size_t>& info) { return row_name(rows()[info.param]); }

class BadInputsReference : public ::testing::TestWithParam<size_t> {};

TEST_P(BadInputsReference, Row) {
  auto be = make_reference_backend();
  run_row(rows()[GetParam()], *be);
}

INSTANTIATE_TEST_SUITE_P(Table, BadInputsReference, ::testing::Range<size_t>(0, rows().size()), row_test_name);

class BadInputsCuda : public ::testing::TestWithParam<size_t> {};

TEST_P(BadInputsCuda, RowMatchesReferenceBytes) {
  std::string why;
  auto cuda = make_cuda_backend(&why);
  if (!cuda) GTEST_SKIP() << "no CUDA device: " << why;
  const Row& r = rows()[GetParam()];
  CasePtr on_gpu = run_row(r, *cuda);
  auto ref = make_reference_backend();
  CasePtr on_cpu = build(r.op);
  r.mutate(*on_cpu);
  on_cpu->fit();
  try {
    run(*ref, *on_cpu);
  } catch (const Error&) {}
  for (size_t i = 0; i < on_gpu->slots.size(); ++i)
    EXPECT_EQ(on_gpu->slots[i].buf->bytes, on_cpu->slots[i].buf->bytes)
        << on_gpu->slots[i].name << ": CUDA and reference bytes differ";
  EXPECT_EQ(on_gpu->count.bytes, on_cpu->count.bytes) << "error_count: CUDA and reference differ";
}

INSTANTIATE_TEST_SUITE_P(Table, BadInputsCuda, ::testing::Range<size_t>(0, rows().size()), row_test_name);

TEST(BadInputsTable, HasAtLeastTenRowsPerOperationAndSixtyInAll) {
  size_t per_op[kNumOps] = {};
  for (const Row& r : rows()) ++per_op[r.op];
  for (Op o = 0; o < kNumOps; ++o) {
    EXPECT_GE(per_op[o], 10u) << op_name(o);
    std::printf("%-40s %zu rows\n", op_name(o).c_str(), per_op[o]);
  }
  EXPECT_GE(rows().size(), 60u);
}

TEST(BadInputsTable, RowNamesAreUnique) {
  std::vector<std::string> names;
  for (const Row& r : rows()) names.push_back(row_name(r));
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
}

TEST(BadInputsCounter, AccumulatesAcrossCalls) {
  // error_count is incremented, never reset: for every operation, two calls of its first counted
  // row leave twice the row's count on top of the start value.
  for (Op op = 0; op < kNumOps; ++op) {
    const auto it = std::find_if(rows().begin(), rows().end(), [&](const Row& r) {
      return r.op == op && r.error.empty() && r.count > 0 && r.count < 1000;
    });
    ASSERT_NE(it, rows().end()) << op_name(op) << " has no counted row";
    SCOPED_TRACE(row_name(*it));
    auto be = make_reference_backend();
    CasePtr c = build(op);
    it->mutate(*c);
    c->fit();
    ASSERT_TRUE(c->count_errors);
    const int32_t start = 40;
    std::memcpy(c->count.data(), &start, sizeof start);
    run(*be, *c);
    run(*be, *c);
    EXPECT_EQ(c->counted(), start + 2 * it->count);
  }
}

TEST(BadInputsHarness, CanaryCheckSeesStrayWrites) {
  // The checker itself must be able to fail, for every operation's base case: a byte in a margin,
  // in an input, or in an output outside the documented region (a cache's block tail, a row no
  // request selects) is reported; a byte inside the documented region is not.
  for (Op op = 0; op < kNumOps; ++op) {
    SCOPED_TRACE(op_name(op));
    CasePtr c = build(op);
    const auto before = snapshot(*c);
    const Allowed allowed = allowed_region(*c);
    bool saw_allowed = false, saw_input = false;
    for (size_t i = 0; i < c->slots.size(); ++i) {
      Case::Slot& s = c->slots[i];
      uint8_t* body = s.buf->data();
      if (i == 0) {  // leading and trailing margins
        for (size_t at_byte : {size_t{0}, s.buf->bytes.size() - 1}) {
          s.buf->bytes[at_byte] ^= 1;
          EXPECT_FALSE(untouched_outside(*c, before, &allowed)) << s.name << " margin byte " << at_byte;
          s.buf->bytes[at_byte] ^= 1;
        }
      }
      const auto in = std::find(allowed[i].begin(), allowed[i].end(), true);
      const auto out = std::find(allowed[i].begin(), allowed[i].end(), false);
      if (in != allowed[i].end()) {  // inside the documented region: allowed
        saw_allowed = true;
        body[in - allowed[i].begin()] ^= 1;
        EXPECT_TRUE(untouched_outside(*c, before, &allowed)) << s.name << " byte " << (in - allowed[i].begin());
        body[in - allowed[i].begin()] ^= 1;
      }
      if (out != allowed[i].end()) {  // an input, or an output byte outside the region
        saw_input = saw_input || !s.output;
        body[out - allowed[i].begin()] ^= 1;
        EXPECT_FALSE(untouched_outside(*c, before, &allowed)) << s.name << " byte " << (out - allowed[i].begin());
        body[out - allowed[i].begin()] ^= 1;
      }
      if (s.output && s.buf->body() > 0) {  // the last byte of an output body: its tail or padding
        const size_t last = s.buf->body() - 1;
        body[last] ^= 1;
        EXPECT_EQ(bool(untouched_outside(*c, before, &allowed)), bool(allowed[i][last])) << s.name << " last byte";
        body[last] ^= 1;
      }
    }
    EXPECT_TRUE(saw_allowed) << "no byte may be written?";
    EXPECT_TRUE(saw_input) << "no input byte checked";
    EXPECT_TRUE(untouched_outside(*c, before, &allowed)) << "every flip was undone";
  }
}

}  // namespace
}  // namespace dsv4kv::conformance::bad_inputs
