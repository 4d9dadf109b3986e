/// \file records.cuh
/// \brief The V4.1 records (spec "Cache records") on the GPU: launches for every record but the 584-byte one, whose
/// kernels the operations' own files hold. Each operation resolves its validated arguments into one of these
/// parameter sets.
#pragma once

#include "backend.cuh"

namespace dsv4kv::cuda::detail {

/// Quantize: token t < n of `k` (row stride `k_stride` elements) into slot `slots[t]`.
struct RecordQuantizeParams {
  const uint16_t* k;
  int64_t k_stride;
  const int64_t* slots;
  int64_t n;
  CacheGeometry cache;
  int32_t* error_count;
};

/// Dense gather: request b < num_requests, rows i < min(gather_len, row_limit) to out[b, offset + i].
struct RecordGatherParams {
  uint16_t* out;
  int64_t out_s0, out_s1;  // elements
  int64_t offset, row_limit, rows_per_request;
  const int32_t* seq_lens;
  const int32_t* gather_lens;  // null: gather_len = seq_len
  const int32_t* block_table;
  int64_t bt_stride, bt_cols;
  int64_t num_requests;
  CacheGeometry cache;
  int32_t* error_count;
};

/// Sparse gather: entry i < n, slot slots[i] (int32 or int64) to out[i].
struct RecordSparseParams {
  uint16_t* out;
  int64_t out_stride;  // elements
  const void* slots;
  bool slots_i64;
  int64_t n;
  CacheGeometry cache;
  int32_t* error_count;
};

/// Launch the record's kernel (`record` is not the 584-byte one; `op` names the operation in errors).
void launch_record_quantize(const char* op, Record record, const RecordQuantizeParams& p, cudaStream_t stream);
void launch_record_gather(const char* op, Record record, const RecordGatherParams& p, cudaStream_t stream);
void launch_record_sparse_gather(const char* op, Record record, const RecordSparseParams& p, cudaStream_t stream);

}  // namespace dsv4kv::cuda::detail
