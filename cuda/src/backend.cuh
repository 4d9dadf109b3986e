/// \file backend.cuh
/// \brief What every file of the CUDA backend includes: the public API, the CUDA error checks shared with the harness,
/// and the spec (as `sp`).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsv4kv/cuda.hpp"
#include "dsv4kv/cuda/check.hpp"  // check() and DSV4KV_CUDA_CHECK, shared with the harness
#include "dsv4kv/spec.hpp"

namespace dsv4kv::cuda::detail {

/// The spec, as every kernel file names it.
namespace sp = ::dsv4kv::spec;

}  // namespace dsv4kv::cuda::detail
