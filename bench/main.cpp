/// \file main.cpp
/// \brief dsv4kv_bench: times the dsv4kv::cuda operations (and two serving-step chains of them)
/// at the benchmark's shapes, verifies every case against the reference, and reports GB/s
/// against a device-to-device copy measured in the same run. The method is in timer.cuh, the
/// cases in cases.hpp, the output in report.hpp; bench/README.md has the whole story.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cases.hpp"
#include "dsv4kv/cuda.hpp"
#include "report.hpp"
#include "timer.cuh"

/// The commit the binary was built from (bench_commit.cpp, generated at build time by commit.cmake).
const char* dsv4kv_bench_commit();

namespace dsv4kv::bench {
namespace {

void usage(std::ostream& o) {
  std::string groups;
  for (const std::string& g : case_groups()) groups += (groups.empty() ? "" : ", ") + g;
  o << "usage: dsv4kv_bench [--quick] [--only OP[,OP...]] [--filter SUBSTR] [--reps N] [--no-verify] [--pdl]\n"
       "                    [--chain-steps] [--json PATH] [--csv PATH]\n"
       "       dsv4kv_bench --layout-json\n"
       "       dsv4kv_bench --list|--host-check [--only OP[,OP...]] [--filter SUBSTR] [--light] [--pdl]\n"
       "                    [--chain-steps]\n"
       "  OP: "
    << groups
    << " (or the full operation names)\n"
       "  Times every operation/shape of the CUDA issue and the decode and prefill chains; prints a\n"
       "  Markdown table and writes JSON/CSV for bench/compare.py. Needs a CUDA device. --layout-json\n"
       "  prints the spec constants and bench shapes bench/triton_bench.py uses; --list prints the keys of\n"
       "  the cases a run would time; --host-check builds them and runs validate() and the reference on\n"
       "  their host arguments (none of the three needs a device); --light keeps the cases whose host\n"
       "  side takes seconds (the CTest host check). --pdl adds, after each chain, the same chain launched\n"
       "  with programmatic dependent launch (key + \" pdl\", e.g. \"chain decode pdl\"), captured and\n"
       "  byte-checked the same way. --chain-steps adds, after each chain, each of its steps alone in its\n"
       "  own graph (key + \" step N: \" + the step's key; no Triton counterpart), and times each chain's\n"
       "  copy chain (one copy kernel per step over that step's minimal bytes, in one graph, with PDL for\n"
       "  the pdl rows; printed on stderr and in the JSON): a diagnostic of what the boundaries between\n"
       "  the steps cost.\n";
}

/// Parses the command line; exits for --help and --layout-json.
Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(name) + " needs a value");
      return argv[++i];
    };
    if (a == "--quick")
      c.quick = true;
    else if (a == "--no-verify")
      c.verify = false;
    else if (a == "--reps")
      c.reps = std::stoi(value("--reps"));
    else if (a == "--json")
      c.json_path = value("--json");
    else if (a == "--csv")
      c.csv_path = value("--csv");
    else if (a == "--filter")
      c.filter = value("--filter");
    else if (a == "--only") {
      std::stringstream ss(value("--only"));
      std::string op;
      while (std::getline(ss, op, ',')) {
        const std::string s = short_op(op);
        if (s.empty()) throw std::invalid_argument("unknown op for --only: " + op);
        c.only.push_back(s);
      }
    } else if (a == "--list") {
      c.list = true;
    } else if (a == "--light") {
      c.light = true;
    } else if (a == "--pdl") {
      c.pdl = true;
    } else if (a == "--chain-steps") {
      c.chain_steps = true;
    } else if (a == "--host-check") {
      c.host_check = true;
    } else if (a == "--layout-json") {
      std::cout << layout_json() << "\n";
      std::exit(0);
    } else if (a == "-h" || a == "--help") {
      usage(std::cout);
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown argument: " + a);
    }
  }
  return c;
}

Info device_info() {
  Info info;
  int dev = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, dev));
  info.gpu = prop.name;
  int v = 0;
  BENCH_CUDA(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
  info.sm_count = v;
  BENCH_CUDA(cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, dev));
  info.l2_bytes = v;
  BENCH_CUDA(cudaDriverGetVersion(&info.driver));
  BENCH_CUDA(cudaRuntimeGetVersion(&info.runtime));
  info.commit = dsv4kv_bench_commit();
  info.pdl_supported = dsv4kv::cuda::programmatic_launch_supported();
  info.layout = layout_json();
  return info;
}

/// The copy ceiling (D2D copies of 1 GiB and 4 GiB; the larger rate), the flush-bias probe and
/// the empty-kernel floor, all in this process.
void measure_floors(Timer& timer, cudaStream_t stream, Info& info, bool quick, int warmup, int reps) {
  for (size_t bytes : {size_t{1} << 30, size_t{4} << 30}) {
    try {
      CopyResult r{bytes, 0, 0};
      r.GBps = timer.copy_GBps(bytes, quick ? 10 : 20, &r.us);
      info.copies.push_back(r);
      std::cerr << "copy " << (bytes >> 20) << " MiB: " << fmt(r.us, 1) << " us, " << fmt(r.GBps, 0)
                << " GB/s (read+write)\n";
    } catch (const std::exception& e) {
      std::cerr << "copy " << (bytes >> 20) << " MiB skipped: " << e.what() << "\n";
      cudaGetLastError();
    }
  }
  for (const auto& r : info.copies)
    info.ceiling = std::isfinite(info.ceiling) ? std::max(info.ceiling, r.GBps) : r.GBps;
  if (!std::isfinite(info.ceiling)) throw std::runtime_error("could not measure the copy ceiling");

  // With the memset-only flush every timed op pays for write-backs of the memset's dirty lines
  // (see bench/RESULTS.md#clean-l2-flush).
  const int preps = std::max(reps, 20);
  auto probe = [&](const std::string& what, const std::function<void()>& fn) {
    Info::Probe pr;
    pr.what = what;
    pr.dirty_us = timer.time_plain(fn, false, preps).median_us;
    pr.clean_us = timer.time_plain(fn, true, preps).median_us;
    std::cerr << "flush probe " << what << ": memset-only " << fmt(pr.dirty_us, 2) << " us, clean "
              << fmt(pr.clean_us, 2) << " us\n";
    info.probes.push_back(pr);
  };
  probe("empty kernel", [&] { timer.launch_empty(); });
  info.empty_graph = timer.empty_graph(warmup, preps);
  std::cerr << "empty kernel, graph replay: " << fmt(info.empty_graph.median_us, 2) << " us\n";
  for (size_t mib : {size_t{1}, size_t{32}}) {
    DeviceBuffer src(mib << 20), dst(mib << 20);
    BENCH_CUDA(cudaMemsetAsync(src.get(), 1, src.bytes(), stream));
    probe("D2D copy " + std::to_string(mib) + " MiB",
          [&] { BENCH_CUDA(cudaMemcpyAsync(dst.get(), src.get(), src.bytes(), cudaMemcpyDeviceToDevice, stream)); });
  }
}

/// Builds, stages, times and verifies one case; the case's buffers are freed on return.
Row run_case(Planned& plan, Timer& timer, const Info& info, const Config& cfg, cudaStream_t stream, int warmup,
             int reps, bool* mismatch) {
  Row row;
  row.c.op = plan.op;
  row.c.key = plan.key;
  row.c.shape = plan.key;
  Case cs = plan.build();
  row.c = cs.meta;
  // Every launch of the case (timed, captured, verified) with or without PDL, whatever the
  // process-wide setting (DSV4KV_CUDA_PDL) says.
  const dsv4kv::cuda::ScopedProgrammaticLaunch pdl(cs.meta.pdl);
  for (auto& call : cs.calls) call->stage(cs.meta.copies, stream);
  const RunFn run = [&cs](int c, cudaStream_t s) {
    for (const auto& call : cs.calls) call->launch(c, s);
  };
  row.stream = timer.time_stream(run, cs.meta.copies, warmup, reps);
  try {
    row.graph = timer.time_graph(run, cs.meta.copies, warmup, reps);
  } catch (const std::exception& e) {
    row.graph.error = e.what();
    cudaGetLastError();
    std::cerr << "  graph timing failed for " << plan.key << ": " << e.what() << "\n";
  }
  row.copy = timer.same_bytes_copy(cs.meta.bytes_min, info.sm_count, warmup, reps);
  if (cfg.chain_steps && cs.meta.step_bytes.size() > 1) {
    row.copy_chain =
        timer.copy_chain(cs.meta.step_bytes, cs.meta.pdl && info.pdl_supported, info.sm_count, warmup, reps);
    std::cerr << "  " << plan.key << ": copy chain (" << cs.meta.step_bytes.size() << " copy kernels"
              << (cs.meta.pdl && info.pdl_supported ? ", PDL" : "") << ") " << fmt(row.copy_chain.median_us, 1)
              << " us; one copy of the sum " << fmt(row.copy.median_us, 1) << " us\n";
  }
  if (!cfg.verify) return row;
  std::string m;
  for (const auto& call : cs.calls) {
    m = call->verify(stream);
    // A chain names the step that differs.
    if (!m.empty() && cs.calls.size() > 1) m = std::string(call->op_name()) + ": " + m;
    if (!m.empty()) break;
  }
  row.verify = m.empty() ? "ok" : "MISMATCH: " + m;
  if (!m.empty()) *mismatch = true;
  return row;
}

int run(const Config& cfg) {
  if (cfg.list) {
    const std::vector<Planned> plan =
        plan_cases(BenchContext{nullptr, 0, cfg.pdl, cfg.chain_steps}, cfg.only, cfg.filter, cfg.light);
    for (const Planned& p : plan) std::cout << p.key << "\n";
    return plan.empty() ? 1 : 0;
  }
  if (cfg.host_check) {
    const std::vector<Planned> plan =
        plan_cases(BenchContext{nullptr, 60 << 20, cfg.pdl, cfg.chain_steps}, cfg.only, cfg.filter, cfg.light);
    return !plan.empty() && host_check_cases(plan, std::cout) ? 0 : 1;
  }
  std::string why;
  if (!dsv4kv::cuda::device_available(&why)) {
    std::cerr << "dsv4kv_bench: no usable CUDA device (" << why
              << "); this benchmark only runs on a GPU machine (see bench/README.md).\n";
    return 2;
  }
  Info info = device_info();
  const int warmup = cfg.quick ? 3 : 10;
  const int reps = cfg.reps > 0 ? cfg.reps : (cfg.quick ? 20 : 100);
  cudaStream_t stream = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<Row> rows;
  bool failed = false, mismatch = false;
  {
    Timer timer(stream, size_t{256} << 20, std::max(reps, 20));
    measure_floors(timer, stream, info, cfg.quick, warmup, reps);
    std::vector<Planned> plan =
        plan_cases(BenchContext{stream, info.l2_bytes, cfg.pdl, cfg.chain_steps}, cfg.only, cfg.filter);
    if (cfg.pdl)
      std::cerr << "programmatic dependent launch on this device: "
                << (info.pdl_supported ? "yes" : "no (the pdl rows are plain launches)") << "\n";
    if (plan.empty()) throw std::invalid_argument("no case matches --only/--filter");
    for (Planned& p : plan) {
      const auto t0 = std::chrono::steady_clock::now();
      Row row;
      try {
        row = run_case(p, timer, info, cfg, stream, warmup, reps, &mismatch);
      } catch (const std::exception& e) {
        row.c.op = p.op;
        row.c.key = row.c.shape = p.key;
        row.error = e.what();
        failed = true;
        cudaGetLastError();
        BENCH_CUDA(cudaStreamSynchronize(stream));
      }
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double us = row.headline_us();
      std::cerr << p.key << ": "
                << (row.error.empty()
                        ? "graph " + fmt(row.graph.median_us, 1) + " us, stream " + fmt(row.stream.median_us, 1) +
                              " us, " + fmt(row.c.bytes_min / (us * 1e-6) / 1e9, 0) + " GB/s, verify " + row.verify
                        : "ERROR " + row.error)
                << " [" << fmt(secs, 1) << " s]\n";
      rows.push_back(std::move(row));
    }
  }
  print_markdown(info, rows);
  if (!cfg.json_path.empty()) write_json(cfg.json_path, info, cfg, rows);
  if (!cfg.csv_path.empty()) write_csv(cfg.csv_path, info, rows);
  BENCH_CUDA(cudaStreamDestroy(stream));
  if (mismatch) {
    std::cerr << "dsv4kv_bench: some outputs differ from dsv4kv::reference (see the verify column)\n";
    return 3;
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace dsv4kv::bench

int main(int argc, char** argv) {
  dsv4kv::bench::Config cfg;
  try {
    cfg = dsv4kv::bench::parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "dsv4kv_bench: " << e.what() << "\n";
    dsv4kv::bench::usage(std::cerr);
    return 64;
  }
  try {
    return dsv4kv::bench::run(cfg);
  } catch (const std::exception& e) {
    std::cerr << "dsv4kv_bench: " << e.what() << "\n";
    return 1;
  }
}
