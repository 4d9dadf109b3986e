// Golden vectors (Triton on an H200) through both backends, byte for byte.
//
// One parameterized test per golden file in golden_dir() (the environment
// variable DSV4KV_GOLDEN_DIR overrides the source-tree path, so the binary can
// be carried to a GPU machine). Every case must reproduce the golden bytes on
// the reference; on CUDA every case runs twice and must also be bit-identical
// run to run.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <regex>
#include <type_traits>
#include <string>
#include <vector>

#include "backend.hpp"
#include "golden.hpp"
#include "safetensors.hpp"

namespace dsv4kv::conformance {
namespace {

// Registration must not throw: a missing directory shows up as a failure of
// GoldenSet.FilesExist instead of a crash while listing tests.
std::vector<std::string> files_or_empty() {
  try {
    return golden_files();
  } catch (const std::exception&) { return {}; }
}

std::string file_label(const testing::TestParamInfo<std::string>& info) {
  std::string s = std::filesystem::path(info.param).stem().string();
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

int64_t declared_cases(const std::string& path) {
  return std::stoll(SafetensorsFile::load(path).meta("num_cases", "0"));
}

/// Reports every failed case; returns how many failed.
int report_failures(const std::vector<GoldenCaseResult>& results, const char* backend) {
  int failed = 0;
  for (const auto& r : results) {
    if (r.passed) continue;
    ++failed;
    ADD_FAILURE() << "[" << backend << "] " << std::filesystem::path(r.file).filename().string() << " "
                  << (r.case_name.empty() ? "(file)" : r.case_name) << " (" << r.op << "): " << r.message;
  }
  return failed;
}

class GoldenFile : public testing::TestWithParam<std::string> {};

TEST_P(GoldenFile, Reference) {
  const std::string& path = GetParam();
  const int64_t n = declared_cases(path);
  ASSERT_GT(n, 0) << path << " declares no cases";
  auto backend = make_reference_backend();
  const auto results = run_golden_file(path, *backend);
  EXPECT_EQ(static_cast<int64_t>(results.size()), n) << "one result per declared case";
  const int failed = report_failures(results, "reference");
  EXPECT_EQ(failed, 0) << failed << " of " << results.size() << " cases failed";
}

TEST_P(GoldenFile, Cuda) {
  std::string why;
  auto backend = make_cuda_backend(&why);
  if (!backend) GTEST_SKIP() << "no CUDA device: " << why;
  const std::string& path = GetParam();
  const int64_t n = declared_cases(path);
  ASSERT_GT(n, 0) << path << " declares no cases";

  std::vector<GoldenCaseOutputs> first, second;
  const auto r1 = run_golden_file_capture(path, *backend, &first);
  const auto r2 = run_golden_file_capture(path, *backend, &second);
  EXPECT_EQ(static_cast<int64_t>(r1.size()), n);
  const int failed = report_failures(r1, "cuda run 1") + report_failures(r2, "cuda run 2");
  EXPECT_EQ(failed, 0);

  // Run to run: every output byte and the error count identical.
  std::map<std::string, const GoldenCaseOutputs*> by_case;
  for (const auto& o : second) by_case[o.case_name] = &o;
  for (const auto& a : first) {
    const auto it = by_case.find(a.case_name);
    if (it == by_case.end()) {
      ADD_FAILURE() << a.case_name << ": ran to completion once but not twice";
      continue;
    }
    const GoldenCaseOutputs& b = *it->second;
    EXPECT_EQ(a.error_count, b.error_count) << a.case_name << ": error_count differs run to run";
    ASSERT_EQ(a.tensors.size(), b.tensors.size()) << a.case_name;
    for (size_t i = 0; i < a.tensors.size(); ++i) {
      const auto& x = a.tensors[i].second;
      const auto& y = b.tensors[i].second;
      ASSERT_EQ(x.size(), y.size()) << a.case_name << " " << a.tensors[i].first;
      for (size_t j = 0; j < x.size(); ++j) {
        if (x[j] != y[j]) {
          ADD_FAILURE() << a.case_name << " " << a.tensors[i].first << ": byte " << j << " differs run to run ("
                        << int(x[j]) << " vs " << int(y[j]) << ")";
          break;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenFile, testing::ValuesIn(files_or_empty()), file_label);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenFile);

TEST(GoldenSet, FilesExistAndFirstPublicSetHas60Cases) {
  const auto files = golden_files();  // throws (test fails) when the directory is missing
  ASSERT_FALSE(files.empty()) << "no .safetensors in " << golden_dir();
  int64_t public_cases = 0;
  int public_files = 0;
  for (const auto& f : files) {
    const auto st = SafetensorsFile::load(f);
    const int64_t n = std::stoll(st.meta("num_cases", "0"));
    EXPECT_GT(n, 0) << f;
    EXPECT_EQ(static_cast<int64_t>(st.case_names().size()), n) << f << ": case tensors vs num_cases";
    // The first set (written by tools/oracle/golden.py); files measured later have generators of
    // their own and are counted by their own num_cases.
    if (st.meta("set") == "public" && st.meta("generator") == "tools/oracle/golden.py") {
      public_cases += n;
      ++public_files;
    }
  }
  if (public_files == 0) GTEST_SKIP() << "no public golden files of the first set in " << golden_dir();
  EXPECT_EQ(public_cases, 60) << "the first public golden set has 60 cases";
  EXPECT_EQ(public_files, 11);
}

// ---------------------------------------------------------------------------
// The harness itself must be able to fail: a backend that writes nothing has
// to be caught on every file (index outputs hold the sentinel, caches and
// gather outputs hold the init pattern), with a message of the documented form.
// ---------------------------------------------------------------------------
class NoOpBackend final : public Backend {
 public:
  const char* name() const override { return "no-op"; }
#define DSV4KV_NOOP(op, Args, stem) \
  void op(const Args&) override {}
  DSV4KV_OPS(DSV4KV_NOOP)
#undef DSV4KV_NOOP
};

/// Flips the low bit of the first byte of the first non-empty output (Role::kOut or kInOut) of
/// `a`, or, when every output is empty, adds one to the error count.
template <class Args>
void corrupt_one_output(const Args& a) {
  bool done = false;
  Args::fields(a, [&](const char*, Role role, const auto& m) {
    if constexpr (std::is_same_v<std::decay_t<decltype(m)>, TensorView>)
      if (!done && (role == Role::kOut || role == Role::kInOut) && m.present() && m.numel() > 0) {
        static_cast<uint8_t*>(m.data)[0] ^= 1;
        done = true;
      }
  });
  if (!done && a.error_count != nullptr) ++*a.error_count;
}

/// Runs the reference, then corrupts one output byte (or the count) of every call.
class OffByOneBackend final : public Backend {
 public:
  OffByOneBackend() : ref_(make_reference_backend()) {}
  const char* name() const override { return "off-by-one"; }
#define DSV4KV_OFF_BY_ONE(op, Args, stem) \
  void op(const Args& a) override {       \
    ref_->op(a);                          \
    corrupt_one_output(a);                \
  }
  DSV4KV_OPS(DSV4KV_OFF_BY_ONE)
#undef DSV4KV_OFF_BY_ONE

 private:
  std::unique_ptr<Backend> ref_;
};

TEST(GoldenHarness, NoOpBackendFailsEveryFileWithMismatchMessages) {
  NoOpBackend noop;
  const std::regex form(R"(^case\d{3} [A-Za-z_]+\[\d+\]( \(.*\))?: expected .+, got .+$)");
  for (const auto& f : golden_files()) {
    const auto results = run_golden_file(f, noop);
    int failed = 0;
    for (const auto& r : results) {
      if (r.passed) continue;
      ++failed;
      EXPECT_TRUE(std::regex_match(r.message, form)) << f << ": " << r.message;
    }
    EXPECT_GT(failed, 0) << f << ": a backend that writes nothing passed every case";
  }
}

TEST(GoldenHarness, OneWrongByteOrCountIsCaught) {
  OffByOneBackend bad;
  for (const auto& f : golden_files()) {
    const auto results = run_golden_file(f, bad);
    for (const auto& r : results) EXPECT_FALSE(r.passed) << f << " " << r.case_name << ": a corrupted output passed";
  }
}

/// Every operation of the table has golden cases measured from its upstream kernel, replayed on
/// both backends (GoldenFile.*): a table entry without them fails here.
TEST(GoldenSet, EveryOperationHasGoldenCases) {
  std::map<std::string, int64_t> cases;
  for (const auto& f : files_or_empty()) {
    const auto st = SafetensorsFile::load(f);
    cases[st.meta("op")] += std::stoll(st.meta("num_cases", "0"));
  }
  for_each_op([&](auto t) {
    const std::string name = decltype(t)::type::kName;
    EXPECT_GT(cases[name], 0) << "no golden case of " << name << " in " << golden_dir();
  });
}

/// Every case of every field-layout file (conformance/golden/README.md, "The field layout")
/// must fail once one byte of an expected output (`*_after`) or the expected count
/// (`param.error_count`) is changed: the replay compares what the file says, byte for byte.
TEST(GoldenHarness, FieldLayoutCorruptedExpectationIsCaught) {
  namespace fs = std::filesystem;
  auto reference = make_reference_backend();
  const fs::path dir = fs::temp_directory_path() / ("dsv4kv_golden_" + std::to_string(std::random_device{}()));
  fs::create_directories(dir);
  int files = 0;
  for (const auto& f : golden_files()) {
    const auto st = SafetensorsFile::load(f);
    if (st.meta("layout") != "fields") continue;
    ++files;
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint64_t header = 0;
    ASSERT_GE(bytes.size(), 8u);
    std::memcpy(&header, bytes.data(), 8);  // little-endian hosts
    for (const std::string& name : st.tensor_names()) {
      const bool after = name.ends_with("_after"), count = name.ends_with(".param.error_count");
      const TensorInfo& info = st.info(name);
      if ((!after && !count) || info.end == info.begin) continue;
      // The middle byte of an expected storage; the lowest byte of the expected count.
      const uint64_t at = 8 + header + (after ? (info.begin + info.end) / 2 : info.begin);
      std::vector<char> bad = bytes;
      bad[at] = static_cast<char>(bad[at] ^ 0x01);
      const fs::path tmp = dir / fs::path(f).filename();
      std::ofstream(tmp, std::ios::binary).write(bad.data(), static_cast<std::streamsize>(bad.size()));
      const std::string case_name = name.substr(0, name.find('.'));
      for (const auto& r : run_golden_file(tmp.string(), *reference)) {
        if (r.case_name == case_name)
          EXPECT_FALSE(r.passed) << f << ": " << name << " changed, yet " << case_name << " passed";
        else
          EXPECT_TRUE(r.passed) << f << " " << r.case_name << ": " << r.message;
      }
    }
  }
  fs::remove_all(dir);
  if (files == 0) GTEST_SKIP() << "no field-layout golden file in " << golden_dir();
}

}  // namespace
}  // namespace dsv4kv::conformance
