// dsv4kv inspect: decodes a saved cache (safetensors or .npy) token by token. The decoding is
// conformance/support/inspect.* so tests and fuzzers exercise the same code.
#include <fmt/core.h>

#include "commands.hpp"

namespace dsv4kv::tools {

int run_inspect(const std::string& file, const conformance::InspectOptions& options) {
  try {
    const auto result = conformance::inspect_image(conformance::load_cache_file(file, options.tensor), options);
    fmt::print("{}", conformance::format_inspection(result, options));
    // Flagged bytes are findings, not failures of the tool: exit 0 unless the input was unreadable.
    return 0;
  } catch (const conformance::InspectError& e) {
    fmt::print(stderr, "dsv4kv inspect: {}\n", e.what());
    return 2;
  }
}

}  // namespace dsv4kv::tools
