// libFuzzer target: the .npy reader behind `dsv4kv inspect` (strict header grammar, sizes, the
// streamed report).
//
// Input layout: byte 0 picks inspect options; the rest is the file after the 6-byte magic
// "\x93NUMPY", which the harness prepends so that every input reaches the .npy parser instead of
// the safetensors one. Only InspectError is expected; any other exception, crash, ASan or UBSan
// report is a finding. fuzz/fuzz_npy.dict holds the header's tokens.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "inspect.hpp"

using dsv4kv::conformance::InspectError;
using dsv4kv::conformance::InspectOptions;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t opt = data[0];
  std::vector<uint8_t> file = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  file.insert(file.end(), data + 1, data + size);

  InspectOptions o;
  o.format = (opt & 1) ? dsv4kv::spec::Fp8Format::kE4M3Fnuz : dsv4kv::spec::Fp8Format::kE4M3Fn;
  if (opt & 2) o.block = static_cast<int64_t>((opt >> 4) & 3) - 1;  // -1..2: includes an invalid index
  if (opt & 4) o.token = static_cast<int64_t>((opt >> 6) & 1);
  static const int64_t kBlockSizes[4] = {0, 1, 2, int64_t{1} << 40};  // 0: inferred from the shape (or refused)
  o.block_size = kBlockSizes[((opt >> 3) & 1) | ((opt >> 6) & 2)];
  try {
    const auto image = dsv4kv::conformance::load_cache_image(file, "", "fuzz.npy");
    // The parsed shape must describe exactly the bytes of the view.
    size_t expect = 1;
    for (size_t d = 0; d < image.shape.size(); ++d) expect *= static_cast<size_t>(image.shape[d]);
    if (expect != image.bytes.size()) __builtin_trap();
    size_t written = 0;
    (void)dsv4kv::conformance::write_inspection(image, o, [&](std::string_view s) {
      written += s.size();
      return written < (size_t{1} << 20);  // a long report is cut, as a closed pipe would
    });
  } catch (const InspectError&) {}
  return 0;
}
