// Quantizes one key into a one-block cache through the installed package and reads it back.
#include <cmath>
#include <cstdio>
#include <vector>

#include <dsv4kv/reference.hpp>

int main() {
  namespace spec = dsv4kv::spec;
  const int64_t block_size = 4;
  const int64_t stride = spec::block_data_bytes(block_size);
  std::vector<uint16_t> k(spec::kHeadDim);
  for (int i = 0; i < spec::kHeadDim; ++i) k[i] = spec::f32_to_bf16_rne(std::sin(0.1f * i));
  std::vector<uint8_t> cache(stride, 0xA5);
  std::vector<int64_t> slots{2};

  dsv4kv::QuantizeInsertArgs q;
  q.k = dsv4kv::TensorView::mat(k.data(), dsv4kv::DType::kBF16, 1, spec::kHeadDim);
  q.k_cache = dsv4kv::TensorView::mat(cache.data(), dsv4kv::DType::kU8, 1, stride);
  q.slot_mapping = dsv4kv::TensorView::vec(slots.data(), dsv4kv::DType::kI64, 1);
  q.block_size = block_size;
  dsv4kv::reference::quantize_and_insert_k_cache(q);

  std::vector<uint16_t> out(spec::kHeadDim, 0);
  std::vector<int32_t> seq_lens{3}, table{0};
  dsv4kv::DequantizeGatherArgs g;
  g.out = dsv4kv::TensorView::cube(out.data(), dsv4kv::DType::kBF16, 1, 1, spec::kHeadDim);
  g.k_cache = q.k_cache;
  g.seq_lens = dsv4kv::TensorView::vec(seq_lens.data(), dsv4kv::DType::kI32, 1);
  std::vector<int32_t> gather_lens{1};
  g.gather_lens = dsv4kv::TensorView::vec(gather_lens.data(), dsv4kv::DType::kI32, 1);
  g.block_table = dsv4kv::TensorView::mat(table.data(), dsv4kv::DType::kI32, 1, 1);
  g.block_size = block_size;
  dsv4kv::reference::dequantize_and_gather_k_cache(g);

  float worst = 0;
  for (int i = 0; i < spec::kHeadDim; ++i)
    worst = std::fmax(worst, std::fabs(spec::bf16_to_f32(out[i]) - spec::bf16_to_f32(k[i])));
  const bool ok = worst < 0.07f && out[spec::kHeadDim - 1] == k[spec::kHeadDim - 1];
  std::printf("consumer: round-trip max error %.4f -> %s\n", worst, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
