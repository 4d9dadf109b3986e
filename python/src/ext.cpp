/// \file ext.cpp
/// \brief The compiled half of the Python package: `dsv4kv._ext`.
///
/// One generic binding per entry of the operation table (spec/op_table.hpp, DSV4KV_OPS):
/// call_op<Args> walks `Args::fields()`, turns each DLPack array (PyTorch, NumPy, CuPy, ...)
/// into a dsv4kv::TensorView and each scalar into its member, and runs the reference backend
/// for host arrays or the CUDA backend for device arrays. Adding an operation to the table
/// adds its binding here and its row in `_ext.ops` with no edit to this file. The Python
/// wrappers in dsv4kv/ops.py (and the torch.library kernels in dsv4kv/_torch.py) choose the
/// stream, allocate outputs and normalize arguments; everything about shapes, dtypes and
/// ranges is checked here by the shared C++ `validate()`, so Python users see exactly the
/// messages of the C++ contracts.
///
/// Exceptions: dsv4kv::Error -> ValueError, or TypeError when the message is a dtype rule
/// ("... must be <dtype>, got ..."); dsv4kv::CudaError -> RuntimeError. Each operation binding
/// catches them itself (guarded()) and raises the Python exception before returning to nanobind,
/// so no library exception travels through nanobind's dispatcher, std::exception_ptr or the
/// exception-translator list (which nanobind shares between the modules of one ABI domain).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "binding_common.hpp"
#include "dsv4kv/reference.hpp"
#include "dsv4kv/spec.hpp"
#include "dsv4kv/spec/op_table.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace dsv4kv::python {
namespace {

namespace dl = nb::dlpack;

/// A dtype problem found while binding an array (becomes Python's TypeError).
struct TypeProblem : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// True if `msg` is one of validate()'s dtype rules ("x must be int32, got int64", or with
/// alternatives, "x must be int32 or int64, got uint8"): those are TypeErrors in Python, every
/// other contract violation a ValueError.
bool is_dtype_message(const char* msg) {
  static constexpr DType kAll[] = {DType::kBF16, DType::kU8, DType::kI32, DType::kI64, DType::kBool};
  for (DType t : kAll) {
    for (const char* after : {", got ", " or "}) {
      const std::string pattern = std::string(" must be ") + dtype_name(t) + after;
      if (std::strstr(msg, pattern.c_str()) != nullptr) return true;
    }
  }
  return false;
}

/// PyTorch-style name of a DLPack dtype, for messages ("float32", "uint16", "bool").
std::string dlpack_dtype_name(dl::dtype t) {
  const char* base = nullptr;
  switch (static_cast<dl::dtype_code>(t.code)) {
    case dl::dtype_code::Int: base = "int"; break;
    case dl::dtype_code::UInt: base = "uint"; break;
    case dl::dtype_code::Float: base = "float"; break;
    case dl::dtype_code::Bfloat: base = "bfloat"; break;
    case dl::dtype_code::Complex: base = "complex"; break;
    case dl::dtype_code::Bool: base = "bool"; break;
    default: break;
  }
  // snprintf rather than std::string concatenation: GCC 12 reports a false -Wrestrict on the
  // inlined operator+ chain once this function is inlined into Binder::bind().
  char buf[64];
  const bool plain_bool = static_cast<dl::dtype_code>(t.code) == dl::dtype_code::Bool && t.bits == 8;
  int n = base ? std::snprintf(buf, sizeof buf, plain_bool ? "%s" : "%s%d", base, static_cast<int>(t.bits))
               : std::snprintf(buf, sizeof buf, "dtype(code=%d)%d", static_cast<int>(t.code), static_cast<int>(t.bits));
  if (t.lanes != 1 && n > 0 && n < static_cast<int>(sizeof buf))
    std::snprintf(buf + n, sizeof buf - n, "x%d", static_cast<int>(t.lanes));
  return buf;
}

/// Maps a DLPack dtype onto the library's DType. `bf16_bits`: the array is a uint16 view of
/// bfloat16 data (how dsv4kv/ops.py passes NumPy arrays of ml_dtypes.bfloat16, which NumPy
/// cannot export through DLPack).
std::optional<DType> map_dtype(dl::dtype t, bool bf16_bits) {
  if (t.lanes != 1) return std::nullopt;
  const auto code = static_cast<dl::dtype_code>(t.code);
  if (code == dl::dtype_code::Bfloat && t.bits == 16) return DType::kBF16;
  if (code == dl::dtype_code::UInt && t.bits == 16 && bf16_bits) return DType::kBF16;
  if (code == dl::dtype_code::UInt && t.bits == 8) return DType::kU8;
  if (code == dl::dtype_code::Int && t.bits == 32) return DType::kI32;
  if (code == dl::dtype_code::Int && t.bits == 64) return DType::kI64;
  if (code == dl::dtype_code::Bool && t.bits == 8) return DType::kBool;
  return std::nullopt;
}

// DLPack device types (dlpack.h's DLDeviceType values, fixed by the DLPack ABI).
constexpr int kDLCPU = 1;
constexpr int kDLCUDA = 2;
constexpr int kDLCUDAHost = 3;
constexpr int kDLCUDAManaged = 13;

/// Where a bound array lives: host memory (CPU, CUDA-pinned host) runs the reference,
/// device memory (CUDA, CUDA-managed) the CUDA backend.
enum class Where { kNone, kHost, kCuda };

std::string where_name(Where w, int id) {
  if (w == Where::kCuda) return "cuda:" + std::to_string(id);
  return "cpu";
}

/// Binds the array arguments of one call: imports each through DLPack, converts it to a
/// TensorView, keeps the import alive for the duration of the call, and checks that every
/// array is on one device.
class Binder {
 public:
  explicit Binder(const char* op) : op_(op) {}

  /// An input array (read only), or the absent view for None.
  TensorView in(nb::handle h, const char* name) { return bind(h, name, false); }
  /// An output array (must be writable), or the absent view for None.
  TensorView out(nb::handle h, const char* name) { return bind(h, name, true); }

  /// The optional `error_count` argument: None, or a writable int32 array of one element.
  /// The pointer is checked with the spec's tensor rule (int32, 4-byte aligned, non-null), so a
  /// misaligned view (e.g. a NumPy int32 view at an odd byte offset) is a contract error, never
  /// an unaligned counter handed to the backend.
  int32_t* counter(nb::handle h) {
    if (h.is_none()) return nullptr;
    TensorView v = bind(h, "error_count", true);
    if (!foreign_.empty() && foreign_.back().name == "error_count") {
      const Foreign& f = foreign_.back();
      if (!f.dtype.empty()) throw TypeProblem(std::string(op_) + ": error_count must be int32, got " + f.dtype);
      throw Error(op_, "error_count must have rank 1, got " + std::to_string(f.ndim));
    }
    if (v.dtype != DType::kI32)
      throw TypeProblem(std::string(op_) + ": error_count must be int32, got " + dtype_name(v.dtype));
    if (v.numel() != 1) throw Error(op_, "error_count must have exactly one element, got " + std::to_string(v.numel()));
    detail::Check(op_).tensor(v, "error_count", DType::kI32, v.ndim);
    return v.as<int32_t>();
  }

  Where where() const { return where_; }
  int device_id() const { return device_id_; }

  /// True when some array has a dtype the library has no DType for, or a rank above
  /// kMaxRank: the call must not run, explain_foreign() says why.
  bool has_foreign() const { return !foreign_.empty(); }

  /// Throws the contract error for the call's foreign arrays. The binder does not know which
  /// dtype or rank each argument wants (validate() does), so it lets validate() judge them:
  /// a foreign dtype stands in as a placeholder DType, and in the message that names it
  /// ("k must be bfloat16, got bool") the placeholder is replaced by the array's real dtype.
  /// Two placeholders are tried, so that one of them differs from the wanted dtype. The
  /// operation itself never runs.
  template <class Args>
  [[noreturn]] void explain_foreign(Args& a) {
    std::string first;
    for (DType placeholder : {DType::kBool, DType::kI64}) {
      Args::fields(a, [&](const char* name, Role, auto& m) {
        if constexpr (std::is_same_v<std::remove_cvref_t<decltype(m)>, TensorView>) {
          for (const Foreign& f : foreign_)
            if (!f.dtype.empty() && f.name == name) m.dtype = placeholder;
        }
      });
      try {
        validate(a);
      } catch (const Error& e) {
        const std::string msg = e.what();
        const std::string got = std::string(", got ") + dtype_name(placeholder);
        for (const Foreign& f : foreign_) {
          const std::string lead = std::string(op_) + ": " + f.name + " must be ";
          if (!f.dtype.empty() && msg.rfind(lead, 0) == 0 && msg.size() > got.size() &&
              msg.compare(msg.size() - got.size(), got.size(), got) == 0)
            throw TypeProblem(msg.substr(0, msg.size() - got.size()) + ", got " + f.dtype);
        }
        if (first.empty()) first = msg;
        continue;
      }
    }
    if (!first.empty()) {
      // validate() stopped at another argument first: that is a contract error of its own.
      throw Error(op_, first.substr(std::string(op_).size() + 2));
    }
    const Foreign& f = foreign_.front();
    throw TypeProblem(std::string(op_) + ": " + f.name + " must be an array of " + supported_dtypes() + ", got " +
                      (f.dtype.empty() ? "rank " + std::to_string(f.ndim) : f.dtype));
  }

 private:
  /// An array validate() has to judge before anything runs (see explain_foreign()).
  struct Foreign {
    std::string name;
    std::string dtype;  ///< DLPack dtype name when it has no DType, else empty
    int ndim = 0;
  };

  static std::string supported_dtypes() { return "bfloat16, uint8, int32, int64 or bool"; }

  TensorView bind(nb::handle h, const char* name, bool writable) {
    if (h.is_none()) return TensorView{};
    nb::object src = nb::borrow(h);
    bool bf16_bits = false;
    // dsv4kv/ops.py wraps NumPy bfloat16 arrays as (uint16 view, True).
    if (nb::isinstance<nb::tuple>(h)) {
      const nb::tuple t = nb::borrow<nb::tuple>(h);
      if (t.size() == 2) {
        src = t[0];
        bf16_bits = nb::cast<bool>(t[1]);
      }
    }
    nb::ndarray<nb::ro> arr;
    if (writable) {
      nb::ndarray<> w;
      if (!nb::try_cast(src, w, false)) {
        if (nb::try_cast(src, arr, false))
          throw Error(op_, std::string(name) + " must be writable, got a read-only array");
        throw TypeProblem(std::string(op_) + ": " + name +
                          " must be an array supporting DLPack (torch.Tensor, numpy.ndarray, cupy.ndarray), got " +
                          nb::inst_name(src).c_str());
      }
      arr = nb::ndarray<nb::ro>(w);
    } else if (!nb::try_cast(src, arr, false)) {
      throw TypeProblem(std::string(op_) + ": " + name +
                        " must be an array supporting DLPack (torch.Tensor, numpy.ndarray, cupy.ndarray), got " +
                        nb::inst_name(src).c_str());
    }

    // A dtype without a DType, or a rank above kMaxRank, is recorded; explain_foreign() turns
    // it into validate()'s message for the argument before anything runs.
    const std::optional<DType> dt = map_dtype(arr.dtype(), bf16_bits);
    const int ndim = static_cast<int>(arr.ndim());
    if (!dt || ndim > kMaxRank) foreign_.push_back({name, dt ? std::string() : dlpack_dtype_name(arr.dtype()), ndim});

    Where w;
    switch (arr.device_type()) {
      case kDLCPU:
      case kDLCUDAHost: w = Where::kHost; break;
      case kDLCUDA:
      case kDLCUDAManaged: w = Where::kCuda; break;
      default:
        throw Error(op_, std::string(name) + " is on an unsupported device (DLPack device type " +
                             std::to_string(arr.device_type()) + "); use CPU or CUDA memory");
    }
    const int id = w == Where::kCuda ? arr.device_id() : 0;
    if (where_ == Where::kNone) {
      where_ = w;
      device_id_ = id;
      first_ = name;
    } else if (w != where_ || id != device_id_) {
      throw Error(op_, "all arrays must be on one device: " + first_ + " is on " + where_name(where_, device_id_) +
                           ", " + name + " is on " + where_name(w, id));
    }

    TensorView v;
    // nanobind's data() already includes DLPack's byte_offset.
    v.data = const_cast<void*>(arr.data());
    v.dtype = dt.value_or(DType::kBool);
    v.ndim = ndim;
    const int kept = ndim < kMaxRank ? ndim : kMaxRank;
    for (int d = 0; d < kept; ++d) {
      v.shape[d] = static_cast<int64_t>(arr.shape(d));
      v.stride[d] = arr.stride(d);  // DLPack strides are in elements, like TensorView's
    }
    // An empty array's strides carry no meaning (NumPy reports 0 for every dimension of a
    // [0, n] array): give it row-major strides so the stride rules only judge real layouts.
    if (v.numel() == 0) {
      int64_t s = 1;
      for (int d = kept - 1; d >= 0; --d) {
        v.stride[d] = s;
        s *= v.shape[d] > 0 ? v.shape[d] : 1;
      }
    }
    keep_.push_back(std::move(arr));
    return v;
  }

  const char* op_;
  Where where_ = Where::kNone;
  int device_id_ = 0;
  std::string first_;
  std::vector<nb::ndarray<nb::ro>> keep_;  // DLPack imports stay alive until the call returns
  std::vector<Foreign> foreign_;
};

/// Runs `host()` for host arrays or `device(stream)` for CUDA arrays, without the GIL.
template <class Host, class Device>
void dispatch([[maybe_unused]] const char* op, const Binder& b, uintptr_t stream, Host&& host, Device&& device) {
  if (b.where() == Where::kCuda) {
#if defined(DSV4KV_HAVE_CUDA)
    DeviceGuard guard(b.device_id());
    nb::gil_scoped_release no_gil;
    device(stream);
#else
    (void)device;
    (void)stream;
    throw std::runtime_error(std::string(op) +
                             ": the arrays are in CUDA memory but this build of dsv4kv has no CUDA backend "
                             "(reinstall with nvcc available, or DSV4KV_PY_CUDA=ON pip install .)");
#endif
  } else {
    nb::gil_scoped_release no_gil;
    host();
  }
}

/// Raises `type(message)` in Python: sets the error indicator and hands it to nanobind as a
/// python_error, which nanobind's dispatcher restores without consulting any translator.
[[noreturn]] void raise_python(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw nb::python_error();
}

/// Runs one operation binding: every exception of the library or of the binder becomes the
/// Python exception of the contract right here, with the GIL held again (the gil_scoped_release
/// in dispatch() has ended by the time a handler runs). The message is copied out of the C++
/// exception before the exception object is destroyed.
template <class Body>
auto guarded(Body&& body) -> decltype(body()) {
  PyObject* type = nullptr;
  std::string message;
  try {
    return body();
  } catch (const nb::python_error&) {
    throw;  // already a Python exception (raised by a nanobind call in the binder)
  } catch (const nb::builtin_exception&) {
    throw;  // nanobind's own TypeError/ValueError/...; its dispatcher maps it by type
  } catch (const TypeProblem& e) {
    type = PyExc_TypeError;
    message = e.what();
  } catch (const Error& e) {
    type = is_dtype_message(e.what()) ? PyExc_TypeError : PyExc_ValueError;
    message = e.what();
  } catch (const CudaError& e) {
    type = PyExc_RuntimeError;
    message = e.what();
  } catch (const std::bad_alloc&) {
    type = PyExc_MemoryError;
    message = "out of host memory";
  } catch (const std::exception& e) {
    type = PyExc_RuntimeError;
    message = e.what();
  }
  raise_python(type, message);
}

spec::Fp8Format fp8_format(bool use_fnuz) { return use_fnuz ? spec::Fp8Format::kE4M3Fnuz : spec::Fp8Format::kE4M3Fn; }

// ---------------------------------------------------------------------------
// The operations, bound generically from the operation table (spec/op_table.hpp)
// ---------------------------------------------------------------------------

/// Python's name for the kind of one argument-struct member (exported in `_ext.ops`, from
/// which dsv4kv/ops.py and the torch.library schemas are built).
template <class T>
constexpr const char* kind_name() {
  if constexpr (std::is_same_v<T, TensorView>)
    return "tensor";
  else if constexpr (std::is_same_v<T, int64_t>)
    return "int";
  else if constexpr (std::is_same_v<T, bool>)
    return "bool";
  else if constexpr (std::is_same_v<T, spec::Fp8Format>)
    return "bool";  // use_fnuz
  else if constexpr (std::is_same_v<T, spec::Semantics> || std::is_same_v<T, spec::Record>)
    return "str";  // a profile's or a record's name
  else if constexpr (std::is_same_v<T, std::optional<int64_t>>)
    return "int?";
  else if constexpr (std::is_same_v<T, int32_t*>)
    return "counter";
  else
    static_assert(sizeof(T) == 0, "ext.cpp: an argument-struct member type the binder does not know");
}

constexpr const char* role_name(Role r) {
  switch (r) {
    case Role::kIn: return "in";
    case Role::kOut: return "out";
    case Role::kInOut: return "inout";
    case Role::kScalar: return "scalar";
    case Role::kCounter: return "counter";
  }
  return "?";
}

/// An integer scalar argument: a Python int or anything with __index__ (NumPy integers, 0-d
/// integer tensors), never a bool or a float.
int64_t int_arg(const char* op, const char* name, nb::handle h) {
  if (PyBool_Check(h.ptr()) || !PyIndex_Check(h.ptr()))
    throw TypeProblem(std::string(op) + ": " + name + " must be an integer, got " + nb::inst_name(h).c_str());
  nb::object i = nb::steal(PyNumber_Index(h.ptr()));
  if (!i.is_valid()) throw nb::python_error();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (overflow != 0) throw Error(op, std::string(name) + " must fit in int64");
  return static_cast<int64_t>(v);
}

/// A named enumeration by name, never anything but a str: a semantics profile
/// (spec::kSemanticsNames) or a record (spec::kRecordNames).
template <class E, size_t N>
E named_arg(const char* op, const char* name, nb::handle h, bool (*from_name)(std::string_view, E&),
            const char* const (&names)[N]) {
  if (!PyUnicode_Check(h.ptr()))
    throw TypeProblem(std::string(op) + ": " + name + " must be a str, got " + nb::inst_name(h).c_str());
  Py_ssize_t n = 0;
  const char* text = PyUnicode_AsUTF8AndSize(h.ptr(), &n);
  if (text == nullptr) throw nb::python_error();
  E e{};
  if (!from_name(std::string_view(text, static_cast<size_t>(n)), e)) {
    std::string all;
    for (const char* v : names) all += (all.empty() ? "" : ", ") + std::string(v);
    throw Error(op, std::string(name) + " must be one of " + all + ", got '" +
                        std::string(text, static_cast<size_t>(n < 64 ? n : 64)) + "'");
  }
  return e;
}

bool bool_arg(nb::handle h) {
  const int t = PyObject_IsTrue(h.ptr());
  if (t < 0) throw nb::python_error();
  return t != 0;
}

/// Binds Python argument `h` into member `m` of the argument struct.
template <class T>
void bind_field(Binder& b, const char* op, const char* name, Role role, T& m, nb::handle h) {
  if constexpr (std::is_same_v<T, TensorView>) {
    m = role == Role::kIn ? b.in(h, name) : b.out(h, name);
  } else if constexpr (std::is_same_v<T, int32_t*>) {
    m = b.counter(h);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    m = int_arg(op, name, h);
  } else if constexpr (std::is_same_v<T, bool>) {
    m = bool_arg(h);
  } else if constexpr (std::is_same_v<T, spec::Fp8Format>) {
    m = fp8_format(bool_arg(h));
  } else if constexpr (std::is_same_v<T, spec::Semantics>) {
    m = named_arg(op, name, h, spec::semantics_from_name, spec::kSemanticsNames);
  } else if constexpr (std::is_same_v<T, spec::Record>) {
    m = named_arg(op, name, h, spec::record_from_name, spec::kRecordNames);
  } else if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
    m = h.is_none() ? std::nullopt : std::optional<int64_t>(int_arg(op, name, h));
  }
}

/// `_ext.<name>(*fields, stream)`: binds every member of `Args` from the positional arguments
/// (the struct's field order), then runs `Host(args)` for host arrays or `Device(args, stream)`
/// for CUDA arrays. Every operation of the table goes through this one function.
template <class Args, void (*Host)(const Args&), void (*Device)(const Args&, uintptr_t)>
void call_op(nb::args py) {
  static constexpr const char* kOp = Args::kName;
  static const int kFields = field_count<Args>();
  guarded([&] {
    if (py.size() != static_cast<size_t>(kFields + 1))
      throw TypeProblem(std::string("_ext.") + kOp + " takes " + std::to_string(kFields + 1) +
                        " positional arguments (the fields of its argument struct, then stream), got " +
                        std::to_string(py.size()));
    Binder b(kOp);
    Args a;
    size_t i = 0;
    Args::fields(a, [&](const char* name, Role role, auto& m) { bind_field(b, kOp, name, role, m, py[i++]); });
    const uintptr_t stream = static_cast<uintptr_t>(int_arg(kOp, "stream", py[i]));
    if (b.has_foreign()) b.explain_foreign(a);  // throws: an array the library cannot take
    dispatch(
        kOp, b, stream, [&] { Host(a); }, [&](uintptr_t s) { Device(a, s); });
  });
}

/// `_ext.ops[name]`: the binding's arguments as (name, role, kind) triples, in order.
template <class Args>
nb::tuple op_fields() {
  Args a{};
  nb::list out;
  Args::fields(a, [&](const char* name, Role role, auto& m) {
    out.append(nb::make_tuple(name, role_name(role), kind_name<std::remove_cvref_t<decltype(m)>>()));
  });
  return nb::tuple(out);
}

/// Defines `_ext.<name>` for every operation of the table and `_ext.ops`.
void bind_ops(nb::module_& m) {
  nb::dict table;
#define DSV4KV_BIND_OP(name, Args, stem)                                                              \
  {                                                                                                   \
    m.def(#name, &call_op<Args, &::dsv4kv::reference::name, &device_##name>,                          \
          "Low level: every member of " #Args " positionally (see _ext.ops), then the CUDA stream."); \
    table[#name] = op_fields<Args>();                                                                 \
  }
  DSV4KV_OPS(DSV4KV_BIND_OP)
#undef DSV4KV_BIND_OP
  m.attr("ops") = table;
}

// ---------------------------------------------------------------------------
// Spec helpers for dsv4kv.inspect and output allocation
// ---------------------------------------------------------------------------

/// table[s * 256 + c] = bf16 bits of dequantize_element(code c, scale byte s): the whole
/// dequantization rule as one lookup table (64 K entries), straight from spec/numerics.hpp.
nb::bytes dequantize_table(bool use_fnuz) {
  std::vector<uint16_t> t(256 * 256);
  for (int s = 0; s < 256; ++s)
    for (int c = 0; c < 256; ++c)
      t[s * 256 + c] = spec::dequantize_element(static_cast<uint8_t>(c), static_cast<uint8_t>(s), fp8_format(use_fnuz));
  return nb::bytes(reinterpret_cast<const char*>(t.data()), t.size() * sizeof(uint16_t));
}

std::pair<bool, std::string> cuda_available() {
#if defined(DSV4KV_HAVE_CUDA)
  std::string why;
  const bool ok = cuda::device_available(&why);
  return {ok, ok ? std::string() : why};
#else
  return {false, "dsv4kv was built without the CUDA backend"};
#endif
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    PyErr_SetString(is_dtype_message(e.what()) ? PyExc_TypeError : PyExc_ValueError, e.what());
  } catch (const TypeProblem& e) { PyErr_SetString(PyExc_TypeError, e.what()); } catch (const CudaError& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

/// Calls a spec rule (spec::kNamedRules) on Python arguments, positional or by name.
int64_t call_rule(const spec::NamedRule& r, const nb::args& args, const nb::kwargs& kwargs) {
  std::vector<std::string> names;
  for (const char *b = r.args, *e = b;; ++e)
    if (*e == ',' || *e == '\0') {
      names.emplace_back(b, e);
      if (*e == '\0') break;
      b = e + 1;
    }
  if (args.size() > names.size())
    throw TypeProblem(std::string(r.name) + " takes " + std::to_string(names.size()) + " arguments, got " +
                      std::to_string(args.size()));
  size_t used = 0;
  int64_t v[8] = {};
  for (size_t i = 0; i < names.size(); ++i) {
    const char* n = names[i].c_str();
    if (i < args.size()) {
      v[i] = int_arg(r.name, n, args[i]);
    } else if (kwargs.contains(n)) {
      v[i] = int_arg(r.name, n, kwargs[n]);
      ++used;
    } else {
      throw TypeProblem(std::string(r.name) + ": missing argument " + names[i]);
    }
  }
  if (used != kwargs.size()) throw TypeProblem(std::string(r.name) + ": unexpected keyword argument");
  // Sizes, positions and widths are int32 quantities; the bound keeps every rule's int64
  // arithmetic (at most a product with a record's byte count, plus a sum) from overflowing.
  for (size_t i = 0; i < names.size(); ++i)
    if (v[i] < 0 || v[i] > std::numeric_limits<int32_t>::max())
      throw Error(r.name, names[i] + " must be in [0, 2^31), got " + std::to_string(v[i]));
  return r.fn(v);
}

}  // namespace
}  // namespace dsv4kv::python

void bind_inspect(nanobind::module_& m);  // inspect_binding.cpp

NB_MODULE(_ext, m) {
  namespace py = dsv4kv::python;
  namespace spec = dsv4kv::spec;
  m.doc() = "dsv4kv compiled core: DLPack arrays in, dsv4kv reference (CPU) or CUDA backend out.";
  nb::register_exception_translator(py::translate);
  bind_inspect(m);

  // The spec's constants and layout/row-width rules, exported in one loop each from the tables of
  // spec/semantics.hpp so Python never restates them: attributes by their C++ names, and the
  // constants also as the dict `constants`.
  nb::dict constants;
  for (const spec::NamedConstant& c : spec::kNamedConstants) {
    m.attr(c.name) = c.value;
    constants[c.name] = c.value;
  }
  m.attr("constants") = constants;
  nb::list semantics;
  for (const char* name : spec::kSemanticsNames) semantics.append(name);
  m.attr("semantics_names") = nb::tuple(semantics);
  nb::list records;
  for (const char* name : spec::kRecordNames) records.append(name);
  m.attr("record_names") = nb::tuple(records);
  nb::list head_dims;
  for (int i = 0; i < spec::kNumRecords; ++i)
    head_dims.append(spec::record_layout(static_cast<spec::Record>(i)).head_dim);
  m.attr("record_head_dims") = nb::tuple(head_dims);
  for (const spec::NamedRule& r : spec::kNamedRules)
    m.def(
        r.name,
        [&r](nb::args args, nb::kwargs kwargs) { return py::guarded([&] { return py::call_rule(r, args, kwargs); }); },
        r.doc);
#if defined(DSV4KV_HAVE_CUDA)
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif

  m.def(
      "dequantize_element",
      [](int code, int scale_byte, bool use_fnuz) {
        return spec::dequantize_element(static_cast<uint8_t>(code), static_cast<uint8_t>(scale_byte),
                                        py::fp8_format(use_fnuz));
      },
      "code"_a, "scale_byte"_a, "use_fnuz"_a = false, "bf16 bits of one dequantized FP8 code under a scale byte.");
  m.def("dequantize_table", &py::dequantize_table, "use_fnuz"_a = false,
        "bytes of a [256 scale bytes, 256 codes] uint16 table of bf16 bits (spec dequantize_element).");
  m.def("cuda_available", &py::cuda_available,
        "(True, '') when the CUDA backend is built and a device is usable, else (False, reason).");

  // The operations of the table (spec/op_table.hpp), each `_ext.<name>(*fields, stream)`; every
  // array argument accepts None, which validate() reports as "<op>: <name> is required" where
  // the argument is required.
  py::bind_ops(m);
}
