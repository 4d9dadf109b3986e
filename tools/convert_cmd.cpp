// dsv4kv convert: re-encodes a saved cache (safetensors or .npy) from one record to another
// (spec/records.md, "Converting a cache") and writes it as a [num_blocks, block_stride] uint8
// tensor at the destination record's vLLM block stride. The output appears whole or not at all: it
// is written to a temporary file beside OUT and renamed over it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend.hpp"
#include "commands.hpp"
#include "convert.hpp"
#include "inspect.hpp"
#include "output.hpp"

namespace dsv4kv::tools {
namespace {

namespace S = dsv4kv::spec;
using conformance::printable;

constexpr int kUsage = 2;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// The file's header for a [rows, cols] uint8 tensor: .npy version 1.0, or a safetensors header
/// naming `tensor`, with the records and the block size in its metadata.
std::string file_header(bool npy, int64_t rows, int64_t cols, const std::string& tensor, S::Record from, S::Record to,
                        int64_t block_size) {
  if (npy) {
    std::string dict = "{'descr': '|u1', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
    // magic (6) + version (2) + length (2) + dict + padding + '\n': a multiple of 64 bytes.
    const size_t unpadded = 10 + dict.size() + 1;
    dict.append((64 - unpadded % 64) % 64, ' ');
    dict.push_back('\n');
    std::string h("\x93NUMPY\x01\x00", 8);
    h.push_back(static_cast<char>(dict.size() & 0xff));
    h.push_back(static_cast<char>(dict.size() >> 8));
    return h + dict;
  }
  nlohmann::json j;
  j["__metadata__"] = {{"record", S::record_name(to)},
                       {"block_size", std::to_string(block_size)},
                       {"converted_from", S::record_name(from)}};
  j[tensor] = {{"dtype", "U8"}, {"shape", {rows, cols}}, {"data_offsets", {0, rows * cols}}};
  std::string json = j.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string h(8, '\0');
  for (int i = 0; i < 8; ++i) h[i] = static_cast<char>((uint64_t{json.size()} >> (8 * i)) & 0xff);
  return h + json;
}

bool write_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

/// Writes `header` + `body` to a temporary file beside `path`, then renames it to `path`.
void write_atomically(const std::string& path, const std::string& header, const std::vector<uint8_t>& body) {
  std::string tmp = path + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0)
    throw std::runtime_error(printable(path) + ": cannot create a temporary file beside it: " + std::strerror(errno));
  const bool ok = write_all(fd, reinterpret_cast<const uint8_t*>(header.data()), header.size()) &&
                  write_all(fd, body.data(), body.size()) && ::fsync(fd) == 0;
  const int err = errno;
  if (::close(fd) != 0 || !ok) {
    ::unlink(tmp.c_str());
    throw std::runtime_error(printable(path) + ": write failed: " + std::strerror(ok ? errno : err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(printable(path) + ": cannot rename the temporary file to it: " + std::strerror(e));
  }
}

}  // namespace

int run_convert(const ConvertOptionsCli& cli) {
  auto usage = [](const std::string& what) {
    error_line("dsv4kv convert: ", what);
    return kUsage;
  };
  S::Record to{}, from{};
  if (!S::record_from_name(cli.to, to)) return usage("--to: no record named '" + printable(cli.to) + "'");
  if (!cli.from.empty() && !S::record_from_name(cli.from, from))
    return usage("--from: no record named '" + printable(cli.from) + "'");

  // OUT: a new file, or (with --force) a regular file to replace; never a device, FIFO or directory,
  // and never the input itself.
  if (cli.output.find('\0') != std::string::npos) return usage("OUT holds a NUL byte");
  struct stat out_st {};
  const bool out_exists = ::lstat(cli.output.c_str(), &out_st) == 0;
  if (out_exists && !S_ISREG(out_st.st_mode))
    return usage("OUT " + printable(cli.output) + " exists and is not a regular file");
  if (out_exists && !cli.force) return usage("OUT " + printable(cli.output) + " exists (--force replaces it)");
  struct stat in_st {};
  if (out_exists && ::stat(cli.input.c_str(), &in_st) == 0 && in_st.st_dev == out_st.st_dev &&
      in_st.st_ino == out_st.st_ino)
    return usage("OUT is the input file");
  const bool npy = ends_with(cli.output, ".npy");
  if (!npy && !ends_with(cli.output, ".safetensors")) return usage("OUT must end in .npy or .safetensors");

  const conformance::CacheImage image = conformance::load_cache_file(cli.input, cli.tensor);
  if (cli.from.empty()) from = conformance::record_of_shape(image.shape).value_or(S::Record::kFp8DsMla);
  int64_t block_size = cli.block_size;
  if (block_size == 0) {
    const auto b = conformance::infer_block_size(image.shape, from);
    if (!b)  // a fact of the file, as for inspect: status 1
      throw std::runtime_error("the shape of " + printable(cli.input) + " implies no block size for " +
                               S::record_name(from) + ": give --block-size");
    block_size = *b;
  }
  // Bounds block_size by the file's own bytes before any stride is computed from it.
  if (!S::checked_mul(block_size, S::record_layout(from).token_bytes()).within(1, image.block_stride))
    throw std::runtime_error("block_size " + std::to_string(block_size) + " of " + S::record_name(from) +
                             " tokens does not fit a block of " + std::to_string(image.block_stride) + " bytes in " +
                             printable(cli.input));
  if (cli.fnuz && from != S::Record::kFp8DsMla && to != S::Record::kFp8DsMla)
    return usage("--fnuz applies to the fp8_ds_mla record only, and neither side is one");

  const S::RecordLayout out_layout = S::record_layout(to);
  const int64_t max_bytes = static_cast<int64_t>(conformance::kDefaultMaxCacheFileBytes);
  if (!S::checked_mul(block_size, out_layout.token_bytes()).within(1, max_bytes))
    throw Error(conformance::kConvertName, "a block of " + std::to_string(block_size) + " " + S::record_name(to) +
                                               " tokens would exceed " + std::to_string(max_bytes) + " bytes");
  const int64_t out_stride = out_layout.vllm_block_stride(block_size);
  const S::Checked out_bytes = S::checked_mul(image.num_blocks, out_stride);
  if (!out_bytes.within(0, max_bytes))
    throw Error(conformance::kConvertName, "the output would exceed " + std::to_string(max_bytes) + " bytes");

  std::unique_ptr<conformance::Backend> backend;
  std::string why;
  if (cli.backend != "reference") backend = conformance::make_cuda_backend(&why);
  if (!backend && cli.backend == "cuda") {
    error_line("dsv4kv convert: ", "--backend cuda, but the CUDA backend is unusable: " + why);
    return kUsage;
  }
  if (!backend) backend = conformance::make_reference_backend();

  std::vector<uint8_t> out(static_cast<size_t>(out_bytes.value), 0);
  // The source is read only (sparse gather's k_cache is an input); the views are not const.
  TensorView src =
      TensorView::mat(const_cast<uint8_t*>(image.bytes.data()), DType::kU8, image.num_blocks, image.block_stride);
  TensorView dst = TensorView::mat(out.data(), DType::kU8, image.num_blocks, out_stride);
  conformance::ConvertOptions o;
  o.from = from;
  o.to = to;
  o.block_size = block_size;
  o.format = cli.fnuz ? S::Fp8Format::kE4M3Fnuz : S::Fp8Format::kE4M3Fn;
  o.chunk_tokens = cli.chunk_tokens;
  const conformance::ConvertReport rep = conformance::convert_k_cache(*backend, src, dst, o);

  const std::string tensor = cli.tensor.empty() ? std::string("k_cache") : cli.tensor;
  write_atomically(cli.output, file_header(npy, image.num_blocks, out_stride, tensor, from, to, block_size), out);
  outf("{}: {} blocks x {} tokens, {} -> {} ({} -> {} bytes a block), backend {}\n", one_line(cli.output),
       image.num_blocks, block_size, S::record_name(from), S::record_name(to), image.block_stride, out_stride,
       backend->name());
  if (rep.reports > 0)
    outf("warning: {} reports (NaN scale bytes or non-finite decoded values; dsv4kv inspect {} shows where)\n",
         rep.reports, one_line(cli.input));
  return 0;
}

}  // namespace dsv4kv::tools
