// See output.hpp.
#include "output.hpp"

#include <cerrno>
#include <cstdio>

#include "file_input.hpp"

namespace dsv4kv::tools {

namespace {
int g_write_errno = 0;  // errno of the first failed write to stdout; 0 while all succeeded
}

bool out(std::string_view s) {
  if (g_write_errno != 0) return false;
  if (s.empty()) return true;
  errno = 0;
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size()) {
    g_write_errno = errno != 0 ? errno : EIO;
    return false;
  }
  return true;
}

int finish_output() {
  errno = 0;
  if (std::fflush(stdout) != 0 && g_write_errno == 0) g_write_errno = errno != 0 ? errno : EIO;
  return g_write_errno;
}

std::string one_line(std::string_view s, size_t max_chars) { return conformance::printable(s, max_chars); }

void error_line(std::string_view prefix, std::string_view message) {
  const std::string line = std::string(prefix) + one_line(message) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace dsv4kv::tools
