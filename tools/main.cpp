// dsv4kv: command-line front end of the library (demo, check-golden, inspect).
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <exception>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"dsv4kv: the DeepSeek-V4 paged FP8 K-cache (spec, reference, CUDA)"};
  app.require_subcommand(1);

  dsv4kv::tools::DemoOptions demo;
  auto* demo_cmd = app.add_subcommand(
      "demo", "Run all five operations on a synthetic batch, draw one cache block, check the results");
  demo_cmd->add_option("--backend", demo.backend, "reference, cuda, or auto (CUDA when a GPU is usable)")
      ->check(CLI::IsMember({"reference", "cuda", "auto"}))
      ->capture_default_str();
  demo_cmd->add_option("--tokens", demo.tokens, "tokens in the batch")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  demo_cmd->add_option("--block-size", demo.block_size, "tokens per cache block")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  demo_cmd->add_option("--seed", demo.seed, "random seed")->capture_default_str();

  std::vector<std::string> golden_files;
  auto* golden_cmd = app.add_subcommand(
      "check-golden", "Replay golden files (Triton outputs) through the reference and, when available, CUDA");
  golden_cmd->add_option("FILE", golden_files, "golden .safetensors files")->required()->check(CLI::ExistingFile);

  std::string inspect_file;
  dsv4kv::conformance::InspectOptions inspect;
  int64_t block = -1, token = -1;
  bool fnuz = false;
  auto* inspect_cmd = app.add_subcommand(
      "inspect", "Decode a cache saved as safetensors or .npy (uint8 [num_blocks, block_stride] or rank 3)");
  inspect_cmd->add_option("FILE", inspect_file, "a .safetensors or .npy file")->required()->check(CLI::ExistingFile);
  inspect_cmd->add_option("--block", block, "only this block");
  inspect_cmd->add_option("--token", token, "only this position inside the block(s)");
  inspect_cmd->add_option("--block-size", inspect.block_size,
                          "tokens per block (default: from a [num_blocks, B, 584] shape, else 64)");
  inspect_cmd->add_option("--tensor", inspect.tensor, "safetensors tensor name (default: first uint8 tensor of rank 2/3)");
  inspect_cmd->add_flag("--fnuz", fnuz, "the cache holds e4m3fnuz codes (use_fnuz=True)");
  inspect_cmd->add_option("--rope", inspect.rope_values, "RoPE values printed per token")->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo_cmd) return dsv4kv::tools::run_demo(demo);
    if (*golden_cmd) return dsv4kv::tools::run_check_golden(golden_files);
    if (*inspect_cmd) {
      if (block >= 0) inspect.block = block;
      if (token >= 0) inspect.token = token;
      if (fnuz) inspect.format = dsv4kv::spec::Fp8Format::kE4M3Fnuz;
      return dsv4kv::tools::run_inspect(inspect_file, inspect);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "dsv4kv: error: {}\n", e.what());
    return 2;
  }
  return 1;
}
