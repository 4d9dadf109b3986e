// Reading untrusted files: regular files only, a size cap, one mapping or one buffer.
#include "file_input.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace dsv4kv::conformance {

namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

/// Closes the descriptor on every path out of open().
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string printable(std::string_view s, size_t max_chars) {
  std::string out;
  out.reserve(std::min(s.size(), max_chars) + 8);
  for (size_t i = 0; i < s.size(); ++i) {
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

std::shared_ptr<const FileBytes> FileBytes::adopt(std::vector<uint8_t> bytes) {
  std::shared_ptr<FileBytes> f(new FileBytes());
  f->owned_ = std::move(bytes);
  f->data_ = f->owned_.data();
  f->size_ = f->owned_.size();
  return f;
}

std::shared_ptr<const FileBytes> FileBytes::open(const std::string& path, uint64_t max_bytes) {
  const std::string where = printable(path, 4096);
  // O_NONBLOCK: opening a FIFO with no writer must not wait for one (it is refused below).
  Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)};
  if (fd.fd < 0) throw FileError(where + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) throw FileError(where + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw FileError(where + ": not a regular file (" + kind_of(st.st_mode) + "); only regular files are read");
  const auto size = static_cast<uint64_t>(st.st_size);
  if (st.st_size < 0 || size > max_bytes)
    throw FileError(where + ": file is " + std::to_string(st.st_size) + " bytes, over the limit of " +
                    std::to_string(max_bytes) + " bytes");

  std::shared_ptr<FileBytes> f(new FileBytes());
  if (size == 0) return f;
  void* m = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (m != MAP_FAILED) {
    f->map_ = m;
    f->data_ = static_cast<const uint8_t*>(m);
    f->size_ = static_cast<size_t>(size);
    return f;
  }
  // A file system without mmap: one read into one buffer, exactly the size fstat gave.
  f->owned_.resize(static_cast<size_t>(size));
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::pread(fd.fd, f->owned_.data() + got, static_cast<size_t>(size) - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw FileError(where + ": read error: " + std::strerror(errno));
    if (n == 0) throw FileError(where + ": file shrank while being read");
    got += static_cast<size_t>(n);
  }
  f->data_ = f->owned_.data();
  f->size_ = f->owned_.size();
  return f;
}

void FileBytes::release(size_t offset, size_t length) const {
  if (map_ == nullptr || offset >= size_) return;
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t begin = offset / page * page;
  const size_t end = std::min(size_, offset + std::min(length, size_ - offset));
  if (end <= begin) return;
  // Read-only private pages never written: dropping them only costs a re-read from the page cache.
  ::madvise(static_cast<uint8_t*>(map_) + begin, end - begin, MADV_DONTNEED);
}

FileBytes::~FileBytes() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

}  // namespace dsv4kv::conformance
