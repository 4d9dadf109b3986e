// dsv4kv check-golden: replays golden files (Triton outputs measured on an H200) through the
// reference and, when a GPU is usable, through CUDA. One line per case; non-zero exit on any
// mismatch or error.
#include <memory>

#include "backend.hpp"
#include "commands.hpp"
#include "golden.hpp"
#include "output.hpp"

namespace dsv4kv::tools {

int run_check_golden(const std::vector<std::string>& files) {
  std::vector<std::unique_ptr<conformance::Backend>> backends;
  backends.push_back(conformance::make_reference_backend());
  std::string why;
  if (auto cuda = conformance::make_cuda_backend(&why))
    backends.push_back(std::move(cuda));
  else
    outf("cuda: not run ({})\n", one_line(why));

  int passed = 0, failed = 0;
  for (const auto& backend : backends) {
    for (const std::string& file : files) {
      for (const auto& r : conformance::run_golden_file(file, *backend)) {
        const std::string name = r.case_name.empty() ? std::string("(file)") : r.case_name;
        // Names and messages may quote bytes of a hostile file: one_line keeps one line per case.
        outf("{}  {:<9}  {}  {}  {}{}{}\n", r.passed ? "PASS" : "FAIL", backend->name(), one_line(r.file), name,
             one_line(r.op, 100), r.message.empty() ? "" : "  ", one_line(r.message));
        (r.passed ? passed : failed) += 1;
      }
    }
  }
  // After a closed stdout the cases still run: the exit status reports all of them.
  outf("{} passed, {} failed ({} backend{})\n", passed, failed, backends.size(), backends.size() == 1 ? "" : "s");
  return failed == 0 && passed > 0 ? 0 : 1;
}

}  // namespace dsv4kv::tools
