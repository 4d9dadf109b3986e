// The reference backend: host pointers go straight to dsv4kv::reference.
#include <memory>

#include "backend.hpp"
#include "dsv4kv/reference.hpp"

namespace dsv4kv::conformance {

namespace {

class ReferenceBackend final : public Backend {
 public:
  const char* name() const override { return "reference"; }
  void quantize_and_insert_k_cache(const QuantizeInsertArgs& args) override {
    reference::quantize_and_insert_k_cache(args);
  }
  void dequantize_and_gather_k_cache(const DequantizeGatherArgs& args) override {
    reference::dequantize_and_gather_k_cache(args);
  }
  void compute_global_topk_indices_and_lens(const GlobalTopkArgs& args) override {
    reference::compute_global_topk_indices_and_lens(args);
  }
  void combine_topk_swa_indices(const CombineArgs& args) override { reference::combine_topk_swa_indices(args); }
  void build_flashinfer_mixed_sparse_indices(const MixedSparseArgs& args) override {
    reference::build_flashinfer_mixed_sparse_indices(args);
  }
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace dsv4kv::conformance
