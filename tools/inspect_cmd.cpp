// dsv4kv inspect: decodes a saved cache (safetensors or .npy) token by token. Flags, output and
// exit statuses (conformance::InspectStatus) are harness/inspect.*'s run_inspect_command, which
// Python's `python -m dsv4kv inspect` runs too, so the two print the same lines and return the same
// status. A failed write to stdout is main's to report (finish: kInspectFailed, 1).
#include <cstdio>

#include "commands.hpp"
#include "output.hpp"

namespace dsv4kv::tools {

int run_inspect(const std::vector<std::string>& args) {
  return conformance::run_inspect_command(
      args, [](std::string_view s) { return out(s); },
      [](std::string_view line) { std::fwrite(line.data(), 1, line.size(), stderr); });
}

}  // namespace dsv4kv::tools
