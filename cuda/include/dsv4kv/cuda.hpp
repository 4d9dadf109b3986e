/// \file cuda.hpp
/// \brief The CUDA backend: the same five operations as dsv4kv::reference, byte for byte.
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

void quantize_and_insert_k_cache(const QuantizeInsertArgs& args, cudaStream_t stream);
void dequantize_and_gather_k_cache(const DequantizeGatherArgs& args, cudaStream_t stream);
void compute_global_topk_indices_and_lens(const GlobalTopkArgs& args, cudaStream_t stream);
void combine_topk_swa_indices(const CombineArgs& args, cudaStream_t stream);
void build_flashinfer_mixed_sparse_indices(const MixedSparseArgs& args, cudaStream_t stream);

}  // namespace dsv4kv::cuda
