// The subcommands of the dsv4kv program; each returns the process exit status.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "inspect.hpp"

namespace dsv4kv::tools {

/// Options of `dsv4kv demo`.
struct DemoOptions {
  std::string backend = "auto";    ///< reference | cuda | auto
  int64_t tokens = 200;            ///< tokens in the synthetic batch
  int64_t block_size = 64;         ///< cache block size
  uint64_t seed = 1;               ///< seed of every random choice
  std::string semantics = "seed";  ///< the index operations' profile: seed | vllm_v4 | vllm_v41
};

/// Builds a synthetic batch, runs every operation of the table, draws one cache block and checks results.
int run_demo(const DemoOptions& options);

/// Runs golden files through the reference and, when available, CUDA; one line per case.
int run_check_golden(const std::vector<std::string>& files);

/// `dsv4kv inspect ARGS...`: conformance::run_inspect_command on stdout/stderr (the report is
/// streamed and stops quietly when stdout closes). Exit status: conformance::InspectStatus.
int run_inspect(const std::vector<std::string>& args);

}  // namespace dsv4kv::tools
