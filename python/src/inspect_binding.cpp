/// \file inspect_binding.cpp
/// \brief The cache inspector in `dsv4kv._ext`: dsv4kv.inspect and `python -m dsv4kv inspect`
/// run the C++ inspector (harness/inspect.*), so Python and the `dsv4kv inspect`
/// program share one file reader, one decoder, one command line and one output format.
///
/// Errors: InspectError and SafetensorsError are caught here and raised as
/// dsv4kv.inspect.CacheFileError (a ValueError) before returning to nanobind, as ext.cpp does
/// for the operations (no library exception crosses nanobind's dispatcher). inspect_main returns
/// the C++ command's InspectStatus (bound as InspectStatus, the one table of exit statuses); it
/// takes the arguments as bytes, so a file name that is not UTF-8 reaches the C++ command as the
/// same bytes as on the C++ program's command line. Exceptions raised by its Python callables
/// pass through.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "inspect.hpp"
#include "safetensors.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

namespace C = dsv4kv::conformance;
namespace S = dsv4kv::spec;

/// dsv4kv.inspect.CacheFileError, created once by bind_inspect (a new reference kept for the
/// life of the interpreter, as the module that owns it).
PyObject* g_cache_file_error = nullptr;

template <class Body>
auto file_errors(Body&& body) -> decltype(body()) {
  std::string message;
  try {
    return body();
  } catch (const C::InspectError& e) { message = e.what(); } catch (const C::SafetensorsError& e) {
    message = e.what();
  }
  PyErr_SetString(g_cache_file_error, message.c_str());
  throw nb::python_error();
}

using CacheArray = nb::ndarray<const uint8_t, nb::c_contig, nb::device::cpu>;
using ByteView = nb::ndarray<nb::numpy, const uint8_t>;

/// A read-only NumPy view of `bytes`, keeping `storage` (the mapped file) alive.
ByteView view_of(std::shared_ptr<const C::FileBytes> storage, std::span<const uint8_t> bytes,
                 const std::vector<int64_t>& shape) {
  auto* keep = new std::shared_ptr<const C::FileBytes>(std::move(storage));
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<const C::FileBytes>*>(p); });
  std::vector<size_t> dims(shape.begin(), shape.end());
  return ByteView(bytes.data(), dims.size(), dims.data(), owner);
}

C::CacheImage image_of(const CacheArray& cache) {
  std::vector<int64_t> shape(cache.ndim());
  for (size_t d = 0; d < cache.ndim(); ++d) shape[d] = static_cast<int64_t>(cache.shape(d));
  return C::cache_image_from_memory(std::move(shape), std::span<const uint8_t>(cache.data(), cache.size()));
}

S::Fp8Format format_of(bool use_fnuz) { return use_fnuz ? S::Fp8Format::kE4M3Fnuz : S::Fp8Format::kE4M3Fn; }

/// The record named `name` (None: from the cache's shape); an unknown name raises ValueError.
std::optional<S::Record> record_of(const std::optional<std::string>& name) {
  if (!name) return std::nullopt;
  S::Record r{};
  if (!S::record_from_name(*name, r)) {
    std::string names;
    for (int i = 0; i < S::kNumRecords; ++i) names.append(i ? ", " : "").append(S::kRecordNames[i]);
    throw nb::value_error(("record must be one of " + names + ", got '" + C::printable(*name, 80) + "'").c_str());
  }
  return r;
}

}  // namespace

void bind_inspect(nb::module_& m) {
  g_cache_file_error = PyErr_NewExceptionWithDoc(
      "dsv4kv.inspect.CacheFileError",
      "A file or array that cannot be read as a K cache (missing, not a regular file, malformed, "
      "ambiguous, without the requested tensor) or options it cannot satisfy. One line.",
      PyExc_ValueError, nullptr);
  if (!g_cache_file_error) throw nb::python_error();
  m.attr("CacheFileError") = nb::borrow(g_cache_file_error);

  nb::class_<C::TokenReport>(m, "TokenReport", "What one token's records say (C++ TokenReport).")
      .def_ro("block", &C::TokenReport::block)
      .def_ro("pos", &C::TokenReport::pos)
      .def_prop_ro("record", [](const C::TokenReport& t) { return std::string(S::record_name(t.record)); })
      .def_prop_ro("scale_bytes",
                   [](const C::TokenReport& t) {
                     return std::vector<int>(t.scale_bytes.begin(), t.scale_bytes.begin() + t.num_scales);
                   })
      .def_ro("pad_byte", &C::TokenReport::pad_byte)
      .def_ro("nope_min", &C::TokenReport::nope_min)
      .def_ro("nope_max", &C::TokenReport::nope_max)
      .def_ro("nan_codes", &C::TokenReport::nan_codes)
      .def_ro("nan_values", &C::TokenReport::nan_values)
      .def_ro("inf_values", &C::TokenReport::inf_values)
      .def_prop_ro("rope_bits",  // a V4.1 record has no RoPE part (its values are all quantized)
                   [](const C::TokenReport& t) {
                     if (t.record != S::Record::kFp8DsMla) return std::vector<int>();
                     return std::vector<int>(t.rope.begin(), t.rope.end());
                   })
      .def_prop_ro("flags", &C::TokenReport::flags)
      .def("line", &C::format_token_line, "rope_values"_a = 4, "The token's line of the report.");

  nb::enum_<C::InspectStatus>(m, "InspectStatus", nb::is_arithmetic(),
                              "Exit statuses of the inspect command (harness/inspect.hpp; "
                              "spec/failure_model.md#failure_model_inspect_status).")
      .value("kInspectOk", C::kInspectOk, "the report (or the help) was written; flagged bytes are findings")
      .value("kInspectFailed", C::kInspectFailed,
             "no complete report: the file cannot be used, does not fit the options, or stdout cannot be written")
      .value("kInspectUsageError", C::kInspectUsageError, "the command line alone is wrong");

  m.def(
      "inspect_main",
      [](const std::vector<nb::bytes>& args, nb::callable out, nb::callable err) {
        std::vector<std::string> argv;
        argv.reserve(args.size());
        for (const auto& a : args) argv.emplace_back(a.c_str(), a.size());
        // The report and the messages are ASCII (names from a file or the command line are
        // escaped), so every piece is a valid str.
        return C::run_inspect_command(
            argv,
            [&](std::string_view s) {
              const nb::object more = out(nb::str(s.data(), s.size()));  // None or true: go on
              if (more.is_none()) return true;
              const int truth = PyObject_IsTrue(more.ptr());
              if (truth < 0) throw nb::python_error();
              return truth != 0;
            },
            [&](std::string_view s) { err(nb::str(s.data(), s.size())); });
      },
      "args"_a, "out"_a, "err"_a,
      "The inspect command (arguments after `inspect`, as bytes): the report goes to out(str), which "
      "returns a false value (not None) to stop it, an error line to err(str); returns an InspectStatus value.");
  m.def("inspect_usage", &C::inspect_usage, "The inspect command's help text.");
  m.def(
      "inspect_columns_line", [](const std::string& record) { return C::columns_line(*record_of(record)); },
      "record"_a = S::record_name(S::Record::kFp8DsMla), "The report's line naming its columns for a record.");
  m.def(
      "inspect_scale_flag",
      [](const std::string& record, int byte) {
        if (byte < 0 || byte > 255) throw nb::value_error("a scale byte is 0..255");
        return std::string(C::scale_flag_name(C::scale_flag(*record_of(record), static_cast<uint8_t>(byte))));
      },
      "record"_a, "byte"_a,
      "The report's flag of one scale byte of a record (scale255, scale-nan, scale-neg, scale0), '' for none.");
  m.def(
      "inspect_record_layout",
      [](const std::string& record) {
        const S::RecordLayout rec = S::record_layout(*record_of(record));
        return std::make_tuple(rec.head_dim, rec.quant_dim, rec.group, rec.num_scales(), rec.token_bytes(),
                               std::string(rec.scales == S::ScaleCode::kUe8m0 ? "ue8m0" : "e4m3fn"),
                               std::string(rec.values == S::ValueCode::kE4M3 ? "e4m3fn" : "e2m1"));
      },
      "record"_a,
      "(head_dim, quantized values, group, scales, token bytes, scale encoding, value encoding) of a record.");

  m.def(
      "load_cache_file",
      [](const std::string& path, const std::string& tensor, uint64_t max_bytes) {
        return file_errors([&] {
          const C::CacheImage img = C::load_cache_file(path, tensor, max_bytes);
          return std::make_tuple(view_of(img.storage, img.bytes, img.shape), img.tensor);
        });
      },
      "path"_a, "tensor"_a = "", "max_bytes"_a = C::kDefaultMaxCacheFileBytes,
      "(read-only uint8 array mapping the file, tensor name) of a .safetensors or .npy cache.");

  m.def(
      "safetensors_entries",
      [](const std::string& path, uint64_t max_bytes) {
        return file_errors([&] {
          const auto file = C::SafetensorsFile::load(path, max_bytes);
          std::vector<std::tuple<std::string, std::string, std::vector<int64_t>, ByteView>> out;
          for (const auto& name : file.tensor_names()) {
            const auto& info = file.info(name);
            const auto raw = file.raw(name);
            out.emplace_back(name, info.dtype_name, info.shape,
                             view_of(file.storage(), raw, {static_cast<int64_t>(raw.size())}));
          }
          return out;
        });
      },
      "path"_a, "max_bytes"_a = C::kDefaultMaxCacheFileBytes,
      "[(name, dtype name, shape, read-only uint8 array of its bytes)] of a safetensors file, by the C++ reader.");

  m.def(
      "infer_block_size",
      [](const std::vector<int64_t>& shape, const std::optional<std::string>& record) {
        return C::infer_block_size(shape, record_of(record));
      },
      "shape"_a, "record"_a = nb::none(),
      "The block size a cache shape implies for a record (None: the shape's), or None.");
  m.def(
      "record_of_shape",
      [](const std::vector<int64_t>& shape) -> std::optional<std::string> {
        const auto r = C::record_of_shape(shape);
        if (!r) return std::nullopt;
        return std::string(S::record_name(*r));
      },
      "shape"_a, "The record a [num_blocks, B, W] shape's W is the width of, or None.");

  m.def(
      "inspect_tokens",
      [](const CacheArray& cache, int64_t block, int64_t block_size, bool use_fnuz,
         std::optional<std::vector<int64_t>> positions, const std::optional<std::string>& record) {
        const std::optional<S::Record> rec = record_of(record);
        return file_errors([&] {
          const C::CacheImage image = image_of(cache);
          C::InspectOptions o;
          o.block = block;
          o.block_size = block_size;
          o.format = format_of(use_fnuz);
          o.record = rec;
          std::vector<C::TokenReport> reports;
          int64_t used = 0;
          S::Record used_record = S::Record::kFp8DsMla;
          if (!positions) {
            auto r = C::inspect_image(image, o);
            reports = std::move(r.tokens);
            used = r.block_size;
            used_record = r.record;
          } else {
            if (positions->empty()) {  // still check the block, the record and the block size against the cache
              o.token = 0;
              const auto r = C::inspect_image(image, o);
              used = r.block_size;
              used_record = r.record;
            }
            for (const int64_t p : *positions) {
              o.token = p;
              auto r = C::inspect_image(image, o);
              reports.push_back(r.tokens.at(0));
              used = r.block_size;
              used_record = r.record;
            }
          }
          const auto bytes = image.bytes.subspan(static_cast<size_t>(block * image.block_stride),
                                                 static_cast<size_t>(image.block_stride));
          std::vector<std::tuple<C::TokenReport, nb::bytes>> out;
          for (const auto& t : reports) {
            const auto values = C::decode_quantized(bytes, used, t.pos, o.format, used_record);
            out.emplace_back(t, nb::bytes(values.data(), values.size() * sizeof(float)));
          }
          return std::make_tuple(used, out);
        });
      },
      "cache"_a, "block"_a, "block_size"_a = 0, "use_fnuz"_a = false, "positions"_a = nb::none(),
      "record"_a = nb::none(),
      "(block size used, [(TokenReport, float32 bytes of the decoded quantized values)]) of one block; "
      "block_size 0 = inferred from the shape, record None = from the shape (else fp8_ds_mla).");

  m.def(
      "summarize_blocks",
      [](const CacheArray& cache, int64_t block_size, bool use_fnuz, const std::optional<std::string>& record) {
        const std::optional<S::Record> rec = record_of(record);
        return file_errors([&] {
          const C::CacheImage image = image_of(cache);
          std::vector<std::tuple<int, int, int64_t>> out;
          for (const auto& s : C::summarize_blocks(image, block_size, format_of(use_fnuz), rec))
            out.emplace_back(s.min_scale_byte, s.max_scale_byte, s.flagged);
          const int64_t used = block_size > 0 ? block_size : C::infer_block_size(image.shape, rec).value_or(0);
          return std::make_tuple(used, image.block_stride, out);
        });
      },
      "cache"_a, "block_size"_a = 0, "use_fnuz"_a = false, "record"_a = nb::none(),
      "(block size, block stride, [(min scale byte, max scale byte, flagged tokens)] per block).");
}
