// The reference backend: host pointers go straight to dsv4kv::reference.
#include <memory>

#include "backend.hpp"
#include "dsv4kv/reference.hpp"

namespace dsv4kv::conformance {

namespace {

class ReferenceBackend final : public Backend {
 public:
  const char* name() const override { return "reference"; }

#define DSV4KV_REFERENCE_BACKEND_OP(op, Args, stem) \
  void op(const Args& args) override { reference::op(args); }
  DSV4KV_OPS(DSV4KV_REFERENCE_BACKEND_OP)
#undef DSV4KV_REFERENCE_BACKEND_OP
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace dsv4kv::conformance
