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

/// Options of `dsv4kv convert`.
struct ConvertOptionsCli {
  std::string input;             ///< a cache saved as .safetensors or .npy
  std::string output;            ///< the converted cache: .npy or .safetensors
  std::string to;                ///< the destination record's name
  std::string from;              ///< the source record's name; empty = implied by the shape, else fp8_ds_mla
  int64_t block_size = 0;        ///< tokens per block; 0 = implied by the shape
  std::string tensor;            ///< the safetensors tensor to read (and the name written); empty = the only one
  bool fnuz = false;             ///< the fp8_ds_mla side holds e4m3fnuz codes
  std::string backend = "auto";  ///< reference | cuda | auto
  bool force = false;            ///< replace an existing regular OUT
  int64_t chunk_tokens = 65536;  ///< tokens decoded per step
};

/// Re-encodes a saved cache from one record to another and writes it whole (or not at all).
int run_convert(const ConvertOptionsCli& options);

/// `dsv4kv inspect ARGS...`: conformance::run_inspect_command on stdout/stderr (the report is
/// streamed and stops quietly when stdout closes). Exit status: conformance::InspectStatus.
int run_inspect(const std::vector<std::string>& args);

}  // namespace dsv4kv::tools
