// dsv4kv: command-line front end of the library (demo, check-golden, convert, inspect).
//
// Exit status: 0 success; 1 a failed check, a mismatch, or a file that cannot be read or is
// malformed; 2 a usage error (no subcommand, an unknown or malformed option, a negative value).
// inspect returns conformance::InspectStatus (harness/inspect.hpp), the table that
// `python -m dsv4kv inspect` shares (spec/failure_model.md#failure_model_inspect_status).
#include <CLI/CLI.hpp>

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstring>
#include <exception>
#include <iterator>
#include <limits>
#include <string>

#include "commands.hpp"
#include "output.hpp"

namespace {

constexpr int kUsage = 2;

/// The command's status, unless stdout failed for another reason than a reader that went away.
int finish(int status) {
  const int err = dsv4kv::tools::finish_output();
  if (err != 0 && err != EPIPE) {
    dsv4kv::tools::error_line("dsv4kv: cannot write to stdout: ", std::strerror(err));
    return status == 0 ? 1 : status;
  }
  return status;
}

/// Accepts a plain decimal integer of type T that is at least `lo` (no sign for unsigned T, no
/// exponent, no trailing text): negative or malformed values are usage errors, never wrapped.
template <class T>
CLI::Validator integer_at_least(T lo) {
  return CLI::Validator(
      [lo](std::string& s) -> std::string {
        T v{};
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size() || s.empty())
          return "must be an integer >= " + std::to_string(lo) + ", got '" + s + "'";
        if (v < lo) return "must be >= " + std::to_string(lo) + ", got " + s;
        return "";
      },
      "INT>=" + std::to_string(lo));
}

}  // namespace

int main(int argc, char** argv) {
  // A closed pipe becomes EPIPE on write (tools/output.hpp), not a signal that kills the process.
  std::signal(SIGPIPE, SIG_IGN);

  CLI::App app{"dsv4kv: the DeepSeek-V4 paged FP8 K-cache (spec, reference, CUDA)"};
  app.require_subcommand(0, 1);  // none is a usage error reported below, with the usage text

  dsv4kv::tools::DemoOptions demo;
  auto* demo_cmd =
      app.add_subcommand("demo", "Run every operation on a synthetic batch, draw one cache block, check the results");
  demo_cmd->add_option("--backend", demo.backend, "reference, cuda, or auto (CUDA when a GPU is usable)")
      ->check(CLI::IsMember({"reference", "cuda", "auto"}))
      ->capture_default_str();
  demo_cmd->add_option("--tokens", demo.tokens, "tokens in the batch")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  demo_cmd->add_option("--block-size", demo.block_size, "tokens per cache block")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  demo_cmd->add_option("--seed", demo.seed, "random seed")->check(integer_at_least<uint64_t>(0))->capture_default_str();
  demo_cmd->add_option("--semantics", demo.semantics, "the index operations' profile: seed, vllm_v4 or vllm_v41")
      ->check(CLI::IsMember({"seed", "vllm_v4", "vllm_v41"}))
      ->capture_default_str();

  std::vector<std::string> golden_files;
  auto* golden_cmd = app.add_subcommand(
      "check-golden", "Replay golden files (Triton outputs) through the reference and, when available, CUDA");
  golden_cmd->add_option("FILE", golden_files, "golden .safetensors files")->required();

  dsv4kv::tools::ConvertOptionsCli convert;
  std::vector<std::string> record_names(std::begin(dsv4kv::spec::kRecordNames), std::end(dsv4kv::spec::kRecordNames));
  auto* convert_cmd = app.add_subcommand(
      "convert", "Re-encode a cache saved as safetensors or .npy from one record to another (spec/records.md)");
  convert_cmd->add_option("IN", convert.input, "the cache: .safetensors or .npy")->required();
  convert_cmd->add_option("OUT", convert.output, "the converted cache: .npy or .safetensors (a new file)")->required();
  convert_cmd->add_option("--to", convert.to, "the destination record")->required()->check(CLI::IsMember(record_names));
  convert_cmd->add_option("--from", convert.from, "the source record (default: implied by the shape, else fp8_ds_mla)")
      ->check(CLI::IsMember(record_names));
  convert_cmd->add_option("--block-size", convert.block_size, "tokens per block (default: implied by the shape)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  convert_cmd->add_option("--tensor", convert.tensor, "the safetensors tensor (default: the only uint8 cache tensor)");
  convert_cmd->add_flag("--fnuz", convert.fnuz, "the fp8_ds_mla side holds e4m3fnuz codes");
  convert_cmd->add_option("--backend", convert.backend, "reference, cuda, or auto (CUDA when a GPU is usable)")
      ->check(CLI::IsMember({"reference", "cuda", "auto"}))
      ->capture_default_str();
  convert_cmd->add_option("--chunk-tokens", convert.chunk_tokens, "tokens decoded per step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 26))
      ->capture_default_str();
  convert_cmd->add_flag("--force", convert.force, "replace OUT when it is an existing regular file");

  // The inspect command parses its own arguments (conformance::parse_inspect_args), the grammar
  // `python -m dsv4kv inspect` shares; CLI11 only lists it and hands the arguments over.
  auto* inspect_cmd = app.add_subcommand(
      "inspect", "Decode a cache saved as safetensors or .npy, token by token (dsv4kv inspect --help)");
  inspect_cmd->prefix_command();
  inspect_cmd->set_help_flag();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) { return app.exit(e); } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    dsv4kv::tools::error_line("dsv4kv: ", std::string(e.what()) + " (see dsv4kv --help)");
    return kUsage;
  }
  if (app.get_subcommands().empty()) {
    const std::string usage = app.help();
    std::fwrite(usage.data(), 1, usage.size(), stderr);
    dsv4kv::tools::error_line("dsv4kv: ", "a subcommand is required (demo, check-golden, convert or inspect)");
    return kUsage;
  }

  try {
    if (*demo_cmd) return finish(dsv4kv::tools::run_demo(demo));
    if (*golden_cmd) return finish(dsv4kv::tools::run_check_golden(golden_files));
    if (*convert_cmd) return finish(dsv4kv::tools::run_convert(convert));
    if (*inspect_cmd) return finish(dsv4kv::tools::run_inspect(inspect_cmd->remaining()));
  } catch (const std::exception& e) {
    dsv4kv::tools::error_line("dsv4kv: error: ", e.what());
    return finish(1);
  }
  return kUsage;
}
