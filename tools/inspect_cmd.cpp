// dsv4kv inspect: decodes a saved cache (safetensors or .npy) token by token. The decoding is
// conformance/support/inspect.* so tests and fuzzers exercise the same code.
#include "commands.hpp"
#include "output.hpp"

namespace dsv4kv::tools {

int run_inspect(const std::string& file, const conformance::InspectOptions& options, uint64_t max_file_bytes) {
  try {
    // The file is mapped, not copied; the report is streamed block by block.
    const auto image = conformance::load_cache_file(file, options.tensor, max_file_bytes);
    conformance::write_inspection(image, options, [](std::string_view s) { return out(s); });
    // Flagged bytes are findings, not failures of the tool: exit 0 unless the input was unusable.
    return 0;
  } catch (const conformance::InspectError& e) {
    error_line("dsv4kv inspect: ", e.what());
    return 1;
  }
}

}  // namespace dsv4kv::tools
