// libFuzzer target: arbitrary bytes into the two file decoders that read data from outside the build,
// the safetensors reader (SafetensorsFile::from_bytes and every accessor) and the `inspect` decoder
// (inspect_bytes: safetensors or .npy image -> per-token report).
//
// Input layout: bytes 0 and 1 pick inspect options (format, block/token selection, block size,
// tensor name, record), the rest is the file image. Only the documented exceptions (SafetensorsError, InspectError) are
// expected; any other exception, crash, ASan or UBSan report is a finding.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "inspect.hpp"
#include "safetensors.hpp"

using dsv4kv::conformance::InspectError;
using dsv4kv::conformance::InspectOptions;
using dsv4kv::conformance::SafetensorsError;
using dsv4kv::conformance::SafetensorsFile;

namespace {

// Every accessor of a parsed file, so that what the header claims is actually dereferenced.
void exercise(const SafetensorsFile& f) {
  size_t sink = 0;
  for (const std::string& name : f.tensor_names()) {
    const auto& info = f.info(name);
    sink += f.raw(name).size() + static_cast<size_t>(info.numel());
    try {
      switch (info.dtype) {
        case dsv4kv::conformance::StDType::kBF16: sink += f.bf16(name).size(); break;
        case dsv4kv::conformance::StDType::kU8: sink += f.u8(name).size(); break;
        case dsv4kv::conformance::StDType::kI32: sink += f.i32(name).size(); break;
        case dsv4kv::conformance::StDType::kI64: sink += f.i64(name).size(); break;
        case dsv4kv::conformance::StDType::kBool: sink += f.boolean(name).size(); break;
        case dsv4kv::conformance::StDType::kOther: sink += info.dtype_name.size(); break;  // listed, never decoded
      }
      sink += static_cast<size_t>(f.param(name));  // throws unless a one-element I64 tensor
    } catch (const SafetensorsError&) {}
    try {
      sink += f.i32(name).size();  // usually the wrong dtype: must throw, not misread
    } catch (const SafetensorsError&) {}
  }
  sink += f.case_names().size() + f.metadata().size() + f.meta("version", "none").size();
  try {
    (void)f.info("no such tensor");
  } catch (const SafetensorsError&) {}
  if (sink == 0x5EED) __builtin_trap();  // keep the reads observable
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t opt = data[0], opt2 = data[1];
  const std::span<const uint8_t> file(data + 2, size - 2);

  try {
    exercise(SafetensorsFile::from_bytes(file.data(), file.size()));
  } catch (const SafetensorsError&) {}

  InspectOptions o;
  o.format = (opt & 1) ? dsv4kv::spec::Fp8Format::kE4M3Fnuz : dsv4kv::spec::Fp8Format::kE4M3Fn;
  if (opt & 2) o.block = static_cast<int64_t>((opt >> 4) & 3) - 1;  // -1..2: includes an invalid index
  if (opt & 4) o.token = static_cast<int64_t>((opt >> 6) & 3) - 1;
  static const int64_t kBlockSizes[8] = {0, 0, 1, 2, 3, 64, -1, int64_t{1} << 40};
  o.block_size = kBlockSizes[opt2 & 7];
  o.rope_values = (opt2 & 8) ? 64 : 2;
  if (opt2 & 16) o.tensor = "cache";
  // Bits 5..7: 0 = the record from the shape, 1..4 = spec::Record 0..3 (--format), else from the shape.
  if (const int r = (opt2 >> 5) & 7; r >= 1 && r <= dsv4kv::spec::kNumRecords)
    o.record = static_cast<dsv4kv::spec::Record>(r - 1);
  try {
    const std::string text = dsv4kv::conformance::inspect_bytes(file, o);
    if (text.size() == 0x5EED5EED) __builtin_trap();
  } catch (const InspectError&) {}
  return 0;
}
