/// \file cuda.hpp
/// \brief The CUDA backend: the same operations as dsv4kv::reference, byte for byte.
///
/// Every pointer in the argument structs (tensors and `error_count`) is device
/// memory. Each operation validates its arguments on the host (throwing
/// dsv4kv::Error), enqueues its work on `stream` and returns without
/// synchronizing; nothing allocates, so every operation can be captured in a
/// CUDA graph. CUDA failures throw dsv4kv::CudaError.
#pragma once

#include <cuda_runtime_api.h>

#include "dsv4kv/spec.hpp"

namespace dsv4kv::cuda {

/// True when a CUDA device is present and usable; `why` (if given) receives the reason when not.
bool device_available(std::string* why = nullptr);

/// One function per entry of DSV4KV_OPS (op_table.hpp), e.g.
/// `void quantize_and_insert_k_cache(const QuantizeInsertArgs& args, cudaStream_t stream);`,
/// with the reference's results byte for byte; the argument struct documents the arguments.
#define DSV4KV_CUDA_DECLARE(name, Args) void name(const Args& args, cudaStream_t stream);
DSV4KV_OPS(DSV4KV_CUDA_DECLARE)
#undef DSV4KV_CUDA_DECLARE

}  // namespace dsv4kv::cuda
