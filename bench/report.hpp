/// \file report.hpp
/// \brief What dsv4kv_bench measured and how it is written: the rows, the run's information, and
/// the Markdown table, JSON and CSV (bench/compare.py reads the JSON). Plain C++: no CUDA here.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace dsv4kv::bench {

/// Median, p10, p90 and minimum of a set of timings, or why there is none.
struct Stats {
  double median_us = NAN, p10_us = NAN, p90_us = NAN, min_us = NAN;
  int n = 0;
  std::string error;  ///< why this timing is missing
  bool ok() const { return error.empty() && n > 0; }
};

/// Statistics of `ms` (milliseconds, as cudaEventElapsedTime gives them), in µs; the median of an
/// even count is the mean of the two middle values.
Stats summarize(std::vector<float> ms);

/// A case as the report sees it (bench/cases.hpp builds its device work).
struct CaseMeta {
  std::string op;            ///< short op name (quantize, gather, ...), or "chain"
  std::string key;           ///< join key shared with triton_bench.py
  std::string shape;         ///< human-readable shape
  int64_t block_stride = 0;  ///< cache block stride in bytes (cache ops only)
  double bytes_min = 0;      ///< bytes every input read once + every output written once
  std::string bytes_note;
  int copies = 1;      ///< device copies the timed runs rotate through
  bool small = false;  ///< a launch-latency-bound shape
  /// Launched with programmatic dependent launch (dsv4kv::cuda::ScopedProgrammaticLaunch): the
  /// " pdl" variants of the chains that `--pdl` adds; bench/compare.py joins them with the
  /// Triton row of the same key without the suffix.
  bool pdl = false;
  /// Chains: each step's bytes_min, in order (the copy chain of `--chain-steps` copies each).
  std::vector<double> step_bytes;
};

/// One timed case.
struct Row {
  CaseMeta c;
  Stats stream, graph;
  /// A copy kernel over bytes_min / 2 (so bytes_min read + written), timed like the op.
  Stats copy;
  /// Chains with `--chain-steps`: one copy kernel per step over that step's bytes, in one graph
  /// (launched like the chain: with programmatic dependent launch for the pdl rows).
  Stats copy_chain;
  std::string verify = "not run";
  std::string error;
  double headline_us() const { return graph.ok() ? graph.median_us : stream.median_us; }
};

/// Command-line options.
struct Config {
  bool quick = false;
  bool verify = true;
  bool list = false;              ///< print the planned keys and exit (no device needed)
  bool host_check = false;        ///< build the cases, validate and run the reference on the host, exit
  bool light = false;             ///< --list/--host-check: only the light cases (OpBench<Args>::kLight)
  bool pdl = false;               ///< also plan each chain launched with PDL ("chain decode pdl", ...)
  bool chain_steps = false;       ///< also plan each step of each chain alone ("chain decode step 1: ...")
  int reps = 0;                   ///< 0 = default
  std::vector<std::string> only;  ///< short op names, or "chain"
  std::string filter;
  std::string json_path, csv_path;
};

/// One device-to-device copy of the ceiling measurement.
struct CopyResult {
  size_t bytes;
  double us, GBps;
};

/// The run: device, ceiling, probes, floors.
struct Info {
  std::string gpu;
  int sm_count = 0;
  int64_t l2_bytes = 0;
  int driver = 0, runtime = 0;
  std::string commit;  ///< what the binary was built from
  std::string layout;  ///< layout_json(): the spec constants and shapes
  std::vector<CopyResult> copies;
  double ceiling = NAN;
  /// Flush-bias probe: medians (µs) after the memset-only flush and after the clean flush.
  struct Probe {
    std::string what;
    double dirty_us = NAN, clean_us = NAN;
  };
  std::vector<Probe> probes;
  /// An empty kernel captured in a graph and replayed like every case: the method's floor.
  Stats empty_graph;
  /// dsv4kv::cuda::programmatic_launch_supported() on the device: whether the " pdl" rows really
  /// launch with PDL (elsewhere they are plain launches, and time the same).
  bool pdl_supported = false;
};

/// `v` with `prec` decimals, or "-" when not finite.
std::string fmt(double v, int prec);

void write_json(const std::string& path, const Info& info, const Config& cfg, const std::vector<Row>& rows);
void write_csv(const std::string& path, const Info& info, const std::vector<Row>& rows);
/// Our table (without Triton; bench/compare.py prints the joined one).
void print_markdown(const Info& info, const std::vector<Row>& rows);

}  // namespace dsv4kv::bench
