/// \file file_input.hpp
/// \brief Reading a file that came from outside the build: regular files only,
/// a size cap, one copy in memory (or a read-only mapping), printable messages.
///
/// The safetensors reader, the `.npy` reader and the golden runner all start
/// here. A path that names a device, a FIFO, a socket or a directory is
/// refused before a byte is read (reading /dev/zero would never end, opening a
/// FIFO would block), and so is a file above the caller's size cap. The bytes
/// are mapped read-only (MAP_PRIVATE) when the file system allows it, else read
/// once into one buffer; readers hand out views into them, never copies.
///
/// Limit: a mapped file that another process truncates while it is being read
/// raises SIGBUS on the next access to the lost pages (as with any mmap
/// reader); the files these tools read are not expected to change under them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4kv::conformance {

/// A file that cannot be read: missing, not a regular file, over the size cap,
/// or an I/O error. The message starts with the path.
class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// \brief The read-only bytes of one whole file (or of a buffer handed over).
///
/// Shared (std::shared_ptr) by every object that keeps views into it, so a
/// view stays valid as long as any of them lives.
class FileBytes {
 public:
  /// Opens `path` (without blocking and without following it into a device),
  /// checks that it is a regular file of at most `max_bytes` bytes, and maps
  /// or reads it.
  /// \param path      the file to read
  /// \param max_bytes size cap; a larger file is refused
  /// \throws FileError naming the path and the reason
  static std::shared_ptr<const FileBytes> open(const std::string& path, uint64_t max_bytes);

  /// Takes ownership of bytes already in memory (no further copy).
  static std::shared_ptr<const FileBytes> adopt(std::vector<uint8_t> bytes);

  /// The bytes.
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  /// Number of bytes.
  size_t size() const { return size_; }

  /// Tells the kernel that bytes [offset, offset + length) will not be read
  /// again soon, so a mapping's pages there leave the resident set (a long
  /// sequential scan then keeps a small RSS). A no-op for a buffer in memory.
  void release(size_t offset, size_t length) const;

  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  ~FileBytes();

 private:
  FileBytes() = default;
  std::vector<uint8_t> owned_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;  ///< the mapping, when the bytes are mapped
};

/// `s` as one printable line for an error message: bytes outside printable
/// ASCII become `\xNN`, and text past `max_chars` is cut with "...". Names and
/// strings taken from a file go through this before they reach a message, so
/// a message is always one line of bounded length.
std::string printable(std::string_view s, size_t max_chars = 80);

}  // namespace dsv4kv::conformance
