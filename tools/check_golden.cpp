// dsv4kv check-golden: replays golden files (Triton outputs measured on an H200) through the
// reference and, when a GPU is usable, through CUDA. One line per case; non-zero exit on any
// mismatch or error.
#include <fmt/core.h>

#include <memory>

#include "backend.hpp"
#include "commands.hpp"
#include "golden.hpp"

namespace dsv4kv::tools {

int run_check_golden(const std::vector<std::string>& files) {
  std::vector<std::unique_ptr<conformance::Backend>> backends;
  backends.push_back(conformance::make_reference_backend());
  std::string why;
  if (auto cuda = conformance::make_cuda_backend(&why)) backends.push_back(std::move(cuda));
  else fmt::print("cuda: not run ({})\n", why);

  int passed = 0, failed = 0;
  for (const auto& backend : backends) {
    for (const std::string& file : files) {
      for (const auto& r : conformance::run_golden_file(file, *backend)) {
        const std::string name = r.case_name.empty() ? std::string("(file)") : r.case_name;
        fmt::print("{}  {:<9}  {}  {}  {}{}{}\n", r.passed ? "PASS" : "FAIL", backend->name(), r.file, name, r.op,
                   r.message.empty() ? "" : "  ", r.message);
        (r.passed ? passed : failed) += 1;
      }
    }
  }
  fmt::print("{} passed, {} failed ({} backend{})\n", passed, failed, backends.size(),
             backends.size() == 1 ? "" : "s");
  return failed == 0 && passed > 0 ? 0 : 1;
}

}  // namespace dsv4kv::tools
