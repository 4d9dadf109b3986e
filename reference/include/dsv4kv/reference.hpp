/// \file reference.hpp
/// \brief The scalar C++ reference of the five operations (the oracle, and the CPU fallback).
///
/// Each function validates its arguments with the shared `dsv4kv::validate()`
/// (throwing dsv4kv::Error), then follows the spec's steps on host memory.
/// `error_count`, when given, is a host pointer.
#pragma once

#include "dsv4kv/spec.hpp"

namespace dsv4kv::reference {

/// Quantizes bf16 keys into the paged FP8 cache (spec "quantize_and_insert_k_cache").
void quantize_and_insert_k_cache(const QuantizeInsertArgs& args);

/// Gathers and dequantizes cache rows into bf16 (spec "dequantize_and_gather_k_cache").
void dequantize_and_gather_k_cache(const DequantizeGatherArgs& args);

/// Maps request-local top-k indices to global cache slots and counts them
/// (spec "compute_global_topk_indices_and_lens").
void compute_global_topk_indices_and_lens(const GlobalTopkArgs& args);

/// Builds FlashMLA's combined top-k + sliding-window index rows
/// (spec "combine_topk_swa_indices").
void combine_topk_swa_indices(const CombineArgs& args);

/// Builds FlashInfer's mixed decode/prefill sparse index matrix
/// (spec "build_flashinfer_mixed_sparse_indices").
void build_flashinfer_mixed_sparse_indices(const MixedSparseArgs& args);

}  // namespace dsv4kv::reference
