/// \file cases.hpp
/// \brief The bench's cases: what is timed, on which device buffers, and how it is verified.
///
/// A case is one or more operation calls (a chain: several, captured in one CUDA graph). Each
/// call starts as the operation's arguments on HOST memory: for most cases a conformance tester
/// (testers.hpp) configured with the bench's shape, which draws and owns the host buffers; the
/// bench copies every tensor the arguments name (Args::fields, op_table.hpp) to device memory,
/// once per rotation copy, and verifies by running the operation once more on copy 0 (outputs
/// poisoned with kFillByte, an error counter) and comparing every output byte for byte with the
/// reference backend run on the host arguments.
///
/// Where the cases of one operation are listed: `OpBench<Args>` in cases.cpp, one specialization
/// per entry of DSV4KV_OPS (a table entry without one does not compile). The chains are listed
/// in cases.cpp too (`plan_chains`).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "report.hpp"

namespace dsv4kv::bench {

/// One operation call: its host arguments, their device copies, launch and verification.
class Call {
 public:
  virtual ~Call() = default;
  /// The operation's name (Args::kName).
  virtual const char* op_name() const = 0;
  /// Makes `copies` device copies of every tensor (tensors named in `shared` get one copy, used
  /// by all: the 613 MB caches).
  virtual void stage(int copies, cudaStream_t s) = 0;
  /// The operation on device copy `copy`, without error counter (as the Triton kernels run).
  virtual void launch(int copy, cudaStream_t s) const = 0;
  /// Runs on copy 0 with poisoned outputs and a counter; "" when every output byte and the count
  /// equal the reference backend's on the host arguments, else the first difference.
  virtual std::string verify(cudaStream_t s) = 0;
  /// Without a device: validate() and the reference on the host arguments (which it changes);
  /// returns the error count (throws what validate throws). For `dsv4kv_bench --host-check`.
  virtual int32_t host_check() = 0;
  std::shared_ptr<void> owner;      ///< keeps the host buffers the arguments point into alive
  std::vector<std::string> shared;  ///< tensors staged once and used by every rotation copy
};

/// A case: its description and its calls, launched in order on one stream (with programmatic
/// dependent launch when meta.pdl: the runner holds a dsv4kv::cuda::ScopedProgrammaticLaunch
/// while it times, captures and verifies them).
struct Case {
  CaseMeta meta;
  std::vector<std::unique_ptr<Call>> calls;
};

/// A case not built yet: built, timed, verified and freed one at a time.
struct Planned {
  std::string op;   ///< short op name, or "chain"
  std::string key;  ///< the join key (what --filter matches)
  std::function<Case()> build;
  bool light = false;  ///< its host side takes seconds (OpBench<Args>::kLight): `--light`
};

/// Everything the case builders need from the run.
struct BenchContext {
  cudaStream_t stream = nullptr;
  int64_t l2_bytes = 0;
  /// Plan each chain twice: as is, and launched with programmatic dependent launch (key + " pdl").
  bool pdl_chains = false;
  /// Also plan each step of each chain alone, in its own graph (key + " step N: " + the step's key):
  /// a diagnostic (bench/compare.py has no Triton row for it); the chain's time minus the steps'
  /// times, plus one empty-kernel floor per step after the first, is what the steps' boundaries cost.
  bool chain_steps = false;
};

/// The short name of every operation of the table (in table order), then "chain".
std::vector<std::string> case_groups();
/// The short name for an operation's full name or short name ("" when neither).
std::string short_op(const std::string& name);
/// Every case of the groups in `only` (all when empty) whose key contains `filter` (and that is
/// light, when `light_only`), in table order, then the chains.
std::vector<Planned> plan_cases(const BenchContext& ctx, const std::vector<std::string>& only,
                                const std::string& filter, bool light_only = false);
/// Builds every planned case and runs host_check() on each of its calls (no device needed);
/// prints one line per case to `out`; returns false when a case failed to build or validate, or
/// counted an error (every bench input is valid).
bool host_check_cases(const std::vector<Planned>& plan, std::ostream& out);
/// The spec constants and bench shapes the Python side needs (`dsv4kv_bench --layout-json`).
std::string layout_json();

}  // namespace dsv4kv::bench
