// Standard output of the dsv4kv program. SIGPIPE is ignored (main), so a reader that goes away
// (`dsv4kv inspect big.npy | head`) shows up here as a failed write: output stops quietly and the
// command finishes with its ordinary exit status, instead of the process dying of a signal.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>

namespace dsv4kv::tools {

/// Writes `s` to stdout. Returns false once stdout can no longer be written (the reader closed
/// the pipe, the disk is full): every later call is a no-op returning false.
bool out(std::string_view s);

/// fmt-formatted out().
template <class... Args>
bool outf(fmt::format_string<Args...> format, Args&&... args) {
  return out(fmt::format(format, std::forward<Args>(args)...));
}

/// Flushes stdout. Returns the errno of the first failed write, 0 when every write succeeded.
int finish_output();

/// `s` as one line of bounded length: control and non-ASCII bytes become \xNN (messages may
/// quote names taken from a file).
std::string one_line(std::string_view s, size_t max_chars = 2000);

/// Writes `prefix` + one_line(`message`) + newline to stderr.
void error_line(std::string_view prefix, std::string_view message);

}  // namespace dsv4kv::tools
