// Output of dsv4kv_bench: the Markdown table, JSON and CSV; see report.hpp.
#include "report.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace dsv4kv::bench {

Stats summarize(std::vector<float> ms) {
  Stats s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) { return 1e3 * ms[static_cast<size_t>(q * static_cast<double>(ms.size() - 1) + 0.5)]; };
  const size_t n = ms.size();
  s.median_us = n % 2 ? 1e3 * ms[n / 2] : 1e3 * 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  s.p10_us = at(0.1);
  s.p90_us = at(0.9);
  s.min_us = 1e3 * ms.front();
  s.n = static_cast<int>(n);
  return s;
}

namespace {

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", ch);
      o += b;
    } else {
      o += ch;
    }
  }
  return o + "\"";
}

std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream s;
  s.precision(10);
  s << v;
  return s.str();
}

}  // namespace

std::string fmt(double v, int prec) {
  if (!std::isfinite(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}

void write_json(const std::string& path, const Info& info, const Config& cfg, const std::vector<Row>& rows) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << "{\n \"tool\": \"dsv4kv_bench\",\n \"info\": {\n";
  f << "  \"gpu\": " << json_str(info.gpu) << ",\n  \"sm_count\": " << info.sm_count
    << ",\n  \"l2_bytes\": " << info.l2_bytes << ",\n  \"cuda_driver\": " << info.driver
    << ",\n  \"cuda_runtime\": " << info.runtime << ",\n  \"build_commit\": " << json_str(info.commit)
    << ",\n  \"quick\": " << (cfg.quick ? "true" : "false") << ",\n  \"layout\": " << info.layout << ",\n  \"copy\": [";
  for (size_t i = 0; i < info.copies.size(); ++i)
    f << (i ? ", " : "") << "{\"bytes\": " << info.copies[i].bytes << ", \"us\": " << json_num(info.copies[i].us)
      << ", \"GBps_read_plus_write\": " << json_num(info.copies[i].GBps) << "}";
  f << "],\n  \"empty_kernel_graph_us\": " << json_num(info.empty_graph.median_us)
    << ",\n  \"pdl_supported\": " << (info.pdl_supported ? "true" : "false");
  f << ",\n  \"flush_probe\": [";
  for (size_t i = 0; i < info.probes.size(); ++i)
    f << (i ? ", " : "") << "{\"what\": " << json_str(info.probes[i].what)
      << ", \"memset_only_flush_us\": " << json_num(info.probes[i].dirty_us)
      << ", \"clean_flush_us\": " << json_num(info.probes[i].clean_us) << "}";
  f << "],\n  \"copy_ceiling_GBps\": " << json_num(info.ceiling) << ",\n  \"method\": "
    << json_str(
           "L2 flushed before every timed run, outside the events: 256 MiB cudaMemsetAsync, then a read-only "
           "pass over another 256 MiB buffer (leaves the L2 clean: no dirty lines for the timed kernel to write "
           "back); inputs rotated "
           "among `copies` sets; median of `n` runs after warm-up. graph_* = op captured in a CUDA graph "
           "(one per copy), replay between events (Triton table's cold GPU method); stream_* = direct launch "
           "between events. GBps and frac_of_ceiling use graph_median_us (stream_median_us when the graph "
           "timing failed). Copy ceiling = max over cudaMemcpyAsync D2D sizes of (read+write)/time.")
    << "\n },\n \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const double us = r.headline_us();
    const double gbps = r.c.bytes_min / (us * 1e-6) / 1e9;
    f << "  {\"key\": " << json_str(r.c.key) << ", \"op\": " << json_str(r.c.op)
      << ", \"shape\": " << json_str(r.c.shape) << ", \"block_stride\": " << r.c.block_stride
      << ", \"copies\": " << r.c.copies << ", \"small\": " << (r.c.small ? "true" : "false")
      << ", \"pdl\": " << (r.c.pdl ? "true" : "false") << ", \"bytes_min\": " << json_num(r.c.bytes_min)
      << ", \"bytes_note\": " << json_str(r.c.bytes_note)
      << ",\n   \"graph_median_us\": " << json_num(r.graph.median_us)
      << ", \"graph_p10_us\": " << json_num(r.graph.p10_us) << ", \"graph_p90_us\": " << json_num(r.graph.p90_us)
      << ", \"graph_min_us\": " << json_num(r.graph.min_us) << ", \"graph_n\": " << r.graph.n
      << ", \"graph_error\": " << json_str(r.graph.error)
      << ",\n   \"stream_median_us\": " << json_num(r.stream.median_us)
      << ", \"stream_p10_us\": " << json_num(r.stream.p10_us) << ", \"stream_p90_us\": " << json_num(r.stream.p90_us)
      << ", \"stream_min_us\": " << json_num(r.stream.min_us) << ", \"stream_n\": " << r.stream.n
      << ", \"stream_error\": " << json_str(r.stream.error) << ",\n   \"us\": " << json_num(us)
      << ", \"GBps\": " << json_num(gbps) << ", \"frac_of_ceiling\": " << json_num(gbps / info.ceiling)
      << ", \"same_bytes_copy_us\": " << json_num(r.copy.median_us)
      << ", \"copy_chain_us\": " << json_num(r.copy_chain.median_us) << ", \"verify\": " << json_str(r.verify)
      << ", \"error\": " << json_str(r.error) << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  f << " ]\n}\n";
}

namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char ch : s) o += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return o + "\"";
}

}  // namespace

void write_csv(const std::string& path, const Info& info, const std::vector<Row>& rows) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << "key,op,shape,block_stride,copies,bytes_min,graph_median_us,graph_p10_us,graph_p90_us,stream_median_us,"
       "stream_p10_us,stream_p90_us,us,GBps,frac_of_ceiling,copy_ceiling_GBps,same_bytes_copy_us,verify,error\n";
  for (const Row& r : rows) {
    const double us = r.headline_us();
    const double gbps = r.c.bytes_min / (us * 1e-6) / 1e9;
    f << csv_field(r.c.key) << "," << r.c.op << "," << csv_field(r.c.shape) << "," << r.c.block_stride << ","
      << r.c.copies << "," << json_num(r.c.bytes_min) << "," << json_num(r.graph.median_us) << ","
      << json_num(r.graph.p10_us) << "," << json_num(r.graph.p90_us) << "," << json_num(r.stream.median_us) << ","
      << json_num(r.stream.p10_us) << "," << json_num(r.stream.p90_us) << "," << json_num(us) << "," << json_num(gbps)
      << "," << json_num(gbps / info.ceiling) << "," << json_num(info.ceiling) << "," << json_num(r.copy.median_us)
      << "," << csv_field(r.verify) << "," << csv_field(r.error) << "\n";
  }
}

void print_markdown(const Info& info, const std::vector<Row>& rows) {
  std::cout << "\n## dsv4kv_bench: " << info.gpu << " (" << info.sm_count << " SMs, L2 " << (info.l2_bytes >> 20)
            << " MiB), build " << info.commit << "\n\n";
  std::cout << "| op | shape | stride | copies | graph µs (p10–p90) | stream µs | min MB | GB/s | % of ceiling | "
               "copy of min bytes µs | verify |\n"
               "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const Row& r : rows) {
    const double us = r.headline_us();
    const double gbps = r.c.bytes_min / (us * 1e-6) / 1e9;
    std::cout << "| " << r.c.op << " | " << r.c.shape << " | "
              << (r.c.block_stride ? std::to_string(r.c.block_stride) : "") << " | " << r.c.copies << " | ";
    if (!r.error.empty()) {
      std::cout << "error: " << r.error << " | | | | | | |\n";
      continue;
    }
    std::cout << fmt(r.graph.median_us, 1) << " (" << fmt(r.graph.p10_us, 1) << "–" << fmt(r.graph.p90_us, 1) << ") | "
              << fmt(r.stream.median_us, 1) << " | " << fmt(r.c.bytes_min / 1e6, 2) << " | " << fmt(gbps, 0) << " | "
              << fmt(100.0 * gbps / info.ceiling, 1) << " | "
              << (r.copy.ok() ? fmt(r.copy.median_us, 1) : std::string("-")) << " | " << r.verify << " |\n";
  }
  std::cout << "\nCopy ceiling (cudaMemcpyAsync D2D, (read+write)/time, median): ";
  for (size_t i = 0; i < info.copies.size(); ++i)
    std::cout << (i ? ", " : "") << (info.copies[i].bytes >> 20) << " MiB " << fmt(info.copies[i].GBps, 0) << " GB/s";
  std::cout << "; ceiling used " << fmt(info.ceiling, 0) << " GB/s.\n"
            << "graph µs = op captured in a CUDA graph, replay timed after the clean L2 flush (256 MiB memset, "
               "then a read-only pass over 256 MiB; headline, the same method as bench/triton_bench.py); stream µs = "
               "direct launch, same flush; copy of min bytes µs = a plain copy kernel over min MB / 2 (so min MB "
               "read + written), timed like graph µs. An empty kernel timed like graph µs: "
            << fmt(info.empty_graph.median_us, 2) << " µs.\n";
  if (std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.c.pdl; }))
    std::cout << "\nRows ending in \"pdl\": the same calls launched with programmatic dependent launch "
                 "(dsv4kv::cuda::ScopedProgrammaticLaunch), captured and verified the same way; PDL on this device: "
              << (info.pdl_supported ? "yes" : "no (compute capability < 9.0 or no sm_90+ image: plain launches)")
              << ".\n";
  if (!info.probes.empty()) {
    std::cout << "\nFlush-bias probe (median µs after a memset-only flush → after the clean flush): ";
    for (size_t i = 0; i < info.probes.size(); ++i)
      std::cout << (i ? "; " : "") << info.probes[i].what << " " << fmt(info.probes[i].dirty_us, 2) << " → "
                << fmt(info.probes[i].clean_us, 2);
    std::cout << ".\n";
  }
}

}  // namespace dsv4kv::bench
