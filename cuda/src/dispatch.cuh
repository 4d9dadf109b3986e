/// \file dispatch.cuh
/// \brief Compile-time dispatch: run-time choices (block size, FP8 format, flags) to template parameters.
#pragma once

#include <string>
#include <type_traits>

#include "backend.cuh"

namespace dsv4kv::cuda::detail {

/// A runtime value turned into a type, for `if constexpr` in kernels.
template <auto V>
using Const = std::integral_constant<decltype(V), V>;

/// One compile-time choice of a launch: `value` is one of `Vs` (the caller maps it there).
template <auto... Vs>
struct OneOf {
  std::common_type_t<decltype(Vs)...> value;
};

/// The one dispatch idiom of the backend: calls `fn(Const<v1>{}, Const<v2>{}, ...)` with the run-time value of every
/// choice as a compile-time value, so that each combination gets its own kernel instantiation. Each choice's value must
/// be one of its alternatives (nothing is called otherwise; the choice helpers below guarantee it).
template <class Fn>
void dispatch(Fn&& fn) {
  fn();
}
template <class Fn, auto... Vs, class... Rest>
void dispatch(Fn&& fn, OneOf<Vs...> first, Rest... rest);
/// dispatch with the first choice fixed to V.
template <auto V, class Fn, class... Rest>
void dispatch_with(Fn& fn, Rest... rest) {
  dispatch([&](auto... more) { fn(Const<V>{}, more...); }, rest...);
}
template <class Fn, auto... Vs, class... Rest>
void dispatch(Fn&& fn, OneOf<Vs...> first, Rest... rest) {
  ((first.value == Vs ? (dispatch_with<Vs>(fn, rest...), true) : false) || ...);
}

/// Block size 0 in a kernel's template parameter means "any block size, read at run time".
inline constexpr int kGenericBlockSize = 0;

/// The block size as a choice: 64 and 128 (the sizes vLLM uses) get their own code, every other size runs the generic
/// code (kGenericBlockSize).
inline OneOf<64, 128, kGenericBlockSize> block_size_choice(int64_t block_size) {
  return {block_size == 64 || block_size == 128 ? static_cast<int>(block_size) : kGenericBlockSize};
}

/// The FP8 format as a choice; an unknown format throws dsv4kv::Error naming the operation.
inline OneOf<Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz> format_choice(const char* op, Fp8Format format) {
  if (format != Fp8Format::kE4M3Fn && format != Fp8Format::kE4M3Fnuz)
    throw Error(op, "unsupported FP8 format code " + std::to_string(static_cast<int>(format)) +
                        " (supported: e4m3fn, e4m3fnuz)");
  return {format};
}

/// A flag as a choice.
inline OneOf<false, true> flag_choice(bool b) { return {b}; }

/// The block size a kernel uses: its compile-time value, or the run-time one for the generic code.
template <int kBs>
__device__ __forceinline__ int64_t block_size_of(int64_t runtime) {
  if constexpr (kBs == kGenericBlockSize)
    return runtime;
  else
    return kBs;
}

}  // namespace dsv4kv::cuda::detail
