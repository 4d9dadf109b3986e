/// \file golden.hpp
/// \brief Runs the golden vectors (Triton on an H200) through a Backend, byte for byte.
///
/// A golden file holds the inputs and outputs of one vLLM operation for
/// several cases (format: conformance/golden/README.md). For each case the
/// runner rebuilds the exact inputs (including the init pattern of written
/// buffers and the strided views the oracle passed), pre-fills index outputs
/// with a sentinel that is not -1 (so an unwritten column is caught), runs the
/// operation and compares every output byte with the golden bytes. Files of the
/// field layout (`__metadata__` `layout` = `fields`, the layout of every operation
/// without one of its own) name tensors after the operation's fields and start
/// every output as the init pattern; one replay, written against Args::fields,
/// reads them for any operation of the table.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend.hpp"

namespace dsv4kv::conformance {

/// Outcome of one golden case.
struct GoldenCaseResult {
  std::string file;       ///< path of the golden file
  std::string op;         ///< metadata `op` (the vLLM function name)
  std::string case_name;  ///< "case003"; empty for a file-level failure
  bool passed = false;
  /// Empty when passed; else the first mismatch, e.g.
  /// `case003 k_cache_after[1234]: expected 0x7e, got 0x7f`, or the error text.
  std::string message;
};

/// Size cap of a golden file. The runner copies every tensor a case uses and
/// allocates outputs of the same size, so the cap bounds its memory (the
/// public files are under 2 MB).
inline constexpr uint64_t kMaxGoldenFileBytes = uint64_t{64} << 20;

/// Runs every case of the golden file at `path` through `backend`.
/// A file that cannot be read, is malformed or names an unknown op yields one
/// failed result with an empty case_name and the reason; a case whose inputs
/// are malformed or whose backend call throws fails with the error text.
/// \param path    a golden .safetensors file
/// \param backend the implementation under test
std::vector<GoldenCaseResult> run_golden_file(const std::string& path, Backend& backend);

/// What one case produced: every compared output, as bytes, plus the error count.
struct GoldenCaseOutputs {
  std::string case_name;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> tensors;  ///< (golden tensor name, bytes produced)
  int32_t error_count = 0;
};

/// run_golden_file, also handing back what each case produced (for
/// run-to-run determinism checks); `outputs` may be nullptr.
/// \param path    a golden .safetensors file
/// \param backend the implementation under test
/// \param outputs receives one entry per case that ran to completion
std::vector<GoldenCaseResult> run_golden_file_capture(const std::string& path, Backend& backend,
                                                      std::vector<GoldenCaseOutputs>* outputs);

/// The golden directory: the environment variable DSV4KV_GOLDEN_DIR when set
/// and non-empty (test binaries are carried to machines where the source tree
/// is elsewhere), else the compile definition DSV4KV_GOLDEN_DIR.
std::string golden_dir();

/// Every `*.safetensors` file in golden_dir(), sorted by path.
/// \throws std::runtime_error when the directory does not exist
std::vector<std::string> golden_files();

/// The init pattern of written buffers: `(i * 131 + 17 + salt) mod 251` for byte `i`.
inline uint8_t golden_init_byte(uint64_t i, uint64_t salt) {
  return static_cast<uint8_t>((i * 131u + 17u + salt) % 251u);
}

}  // namespace dsv4kv::conformance
