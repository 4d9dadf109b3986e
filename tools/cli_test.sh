#!/usr/bin/env bash
# Command-line behaviour of dsv4kv that the library tests cannot see: exit statuses (0 success,
# 1 failed check or unusable file, 2 usage error; for inspect, the table InspectStatus of
# harness/inspect.hpp, spec/failure_model.md#failure_model_inspect_status), the usage text,
# one-line errors, non-files refused without blocking, a closed stdout (`| head`) ending the
# program quietly, a stdout that cannot be written (/dev/full) failing it, and convert's output file.
#
#   tools/cli_test.sh DSV4KV GOLDEN_DIR      (registered with ctest as dsv4kv_cli)
set -uo pipefail
D=$1
G=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect NAME STATUS STDERR_FRAGMENT -- ARGS...: runs dsv4kv ARGS (10 s limit) and checks the exit
# status, that a usage error (2) or a failed inspect comes with exactly one stderr line (the usage
# text of a missing subcommand aside; check-golden reports files on stdout), and that stderr
# contains the fragment.
expect() {
  local name=$1 want=$2 frag=$3
  shift 4
  timeout 10 "$D" "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  local lines
  lines=$(grep -c . "$tmp/err")
  if [[ $got != "$want" ]]; then
    echo "FAIL $name: exit $got, want $want; stderr: $(head -c 300 "$tmp/err")"
    failures=$((failures + 1))
  elif [[ ($want == 2 || ($want == 1 && ${1:-} == inspect)) && $name != usage* && $lines != 1 ]]; then
    echo "FAIL $name: $lines stderr lines, want one: $(head -c 300 "$tmp/err")"
    failures=$((failures + 1))
  elif [[ -n $frag ]] && ! grep -qF -- "$frag" "$tmp/err"; then
    echo "FAIL $name: stderr lacks '$frag': $(head -c 300 "$tmp/err")"
    failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}

golden=$G/quantize.safetensors
expect "usage: no subcommand" 2 "a subcommand is required" -- 
grep -q "Usage:" "$tmp/err" || { echo "FAIL usage text missing"; failures=$((failures + 1)); }
[[ ! -s $tmp/out ]] || { echo "FAIL no-subcommand wrote to stdout"; failures=$((failures + 1)); }
expect "help" 0 "" -- --help
expect "negative --block" 2 "dsv4kv inspect: --block must be >= 0, got -5" -- inspect "$golden" --block -5
expect "negative --token" 2 "--token must be >= 0" -- inspect "$golden" --token=-1
expect "zero --block-size" 2 "--block-size must be >= 1" -- inspect "$golden" --block-size 0
expect "--rope past the RoPE values" 2 "--rope must be <=" -- inspect "$golden" --rope 1000
expect "unknown inspect option" 2 "unknown option '--frobnicate'" -- inspect "$golden" --frobnicate
expect "--format naming no record" 2 "--format must be one of fp8_ds_mla, mxfp8_ds_mla" -- inspect "$golden" --format fp4
expect "--fnuz with a V4.1 --format" 2 "--fnuz applies to record fp8_ds_mla only" -- inspect "$golden" --fnuz --record=mxfp8_ds_mla
expect "inspect without FILE" 2 "missing FILE" -- inspect
expect "inspect --help" 0 "" -- inspect --help
grep -q "^usage: inspect FILE" "$tmp/out" || { echo "FAIL inspect --help: no usage on stdout"; failures=$((failures + 1)); }
grep -qF "spec/failure_model.md#failure_model_inspect_status" "$tmp/out" ||
  { echo "FAIL inspect --help: does not point to the table of exit statuses"; failures=$((failures + 1)); }
expect "check-golden without files" 2 "FILE is required" -- check-golden
expect "/dev/zero" 1 "not a regular file (a character device)" -- inspect /dev/zero
mkfifo "$tmp/fifo"
expect "FIFO" 1 "not a regular file (a FIFO)" -- inspect "$tmp/fifo"
expect "directory" 1 "not a regular file (a directory)" -- inspect "$tmp"
expect "missing" 1 "cannot open" -- inspect "$tmp/missing.npy"
printf 'not a tensor file, just text\n' >"$tmp/text.safetensors"
expect "text file" 1 "not a safetensors file" -- inspect "$tmp/text.safetensors"
expect "size cap" 1 "over the limit of 10 bytes" -- inspect "$golden" --max-file-size 10
# quantize.safetensors holds one cache per case: naming none is ambiguous, and the message lists them.
expect "ambiguous file" 1 "cannot tell which tensor is the cache" -- inspect "$golden"
grep -qF "'case000.k_cache_after'" "$tmp/err" || { echo "FAIL ambiguous: candidates not listed"; failures=$((failures + 1)); }
cache=(--tensor case000.k_cache_after)
expect "block out of range" 1 "block 99 out of range" -- inspect "$golden" "${cache[@]}" --block 99
expect "one token" 0 "" -- inspect "$golden" "${cache[@]}" --block 0 --token 0
grep -q "^summary: 1 tokens" "$tmp/out" || { echo "FAIL one token: no summary line"; failures=$((failures + 1)); }
# A stdout that cannot be written: no complete report, status 1 and one line (main's finish).
timeout 10 "$D" inspect "$golden" "${cache[@]}" >/dev/full 2>"$tmp/err"
got=$?
if [[ $got != 1 || $(grep -c . "$tmp/err") != 1 ]] || ! grep -qF "dsv4kv: cannot write to stdout: " "$tmp/err"; then
  echo "FAIL inspect >/dev/full: exit $got, want 1 and one line; stderr: $(head -c 300 "$tmp/err")"
  failures=$((failures + 1))
else
  echo "ok   inspect >/dev/full"
fi
expect "check-golden on a golden file" 0 "" -- check-golden "$golden"
expect "check-golden on /dev/zero" 1 "" -- check-golden /dev/zero
grep -q "^FAIL .*/dev/zero: not a regular file" "$tmp/out" || { echo "FAIL check-golden /dev/zero: no FAIL line"; failures=$((failures + 1)); }

# A large sparse .npy cache (the block stride read from the golden file's header, 3000 blocks),
# piped into `head`: the program must stop quietly when head goes away.
stride=$(head -c 100000 "$golden" | grep -ao '"case000.k_cache_after":{[^}]*}' | sed -E 's/.*"shape":\[[0-9]+,([0-9]+)\].*/\1/')
if [[ -z $stride ]]; then
  echo "FAIL cannot read the block stride from $golden"
  failures=$((failures + 1))
else
  # npy_header BLOCKS: the .npy v1 header of a uint8 [BLOCKS, stride] array; sets len (its bytes after the first 10).
  npy_header() {
    local dict="{'descr': '|u1', 'fortran_order': False, 'shape': ($1, $stride), }"
    while (((10 + ${#dict} + 1) % 64)); do dict+=" "; done
    dict+=$'\n'
    len=${#dict}
    printf '\x93NUMPY\x01\x00'
    printf "\\x$(printf %02x $((len & 255)))\\x$(printf %02x $((len >> 8)))"
    printf '%s' "$dict"
  }
  npy_header 3000 >"$tmp/big.npy"
  truncate -s $((10 + len + 3000 * stride)) "$tmp/big.npy"
  timeout 60 "$D" inspect "$tmp/big.npy" 2>"$tmp/err" | head -c 1000 >/dev/null
  status=("${PIPESTATUS[@]}")
  if [[ ${status[0]} != 0 || -s $tmp/err ]]; then
    echo "FAIL | head: exit ${status[0]} (want 0, quietly); stderr: $(head -c 300 "$tmp/err")"
    failures=$((failures + 1))
  else
    echo "ok   | head"
  fi
  expect "big sparse cache, last block" 0 "" -- inspect "$tmp/big.npy" --block 2999 --token 63
  # The same file cut inside its data: a file error (1), not a crash or a partial report.
  head -c $((10 + len + stride + 7)) "$tmp/big.npy" >"$tmp/cut.npy"
  expect "truncated .npy" 1 "but the file holds" -- inspect "$tmp/cut.npy"
  # Bytes that break the layout's rules (every pad byte 0x5a) are findings in the report, not a
  # failure: status 0.
  { npy_header 1; head -c "$stride" /dev/zero | tr '\0' 'Z'; } >"$tmp/flagged.npy"
  expect "flagged bytes" 0 "" -- inspect "$tmp/flagged.npy"
  grep -q "^summary: 64 tokens, 64 flagged" "$tmp/out" || { echo "FAIL flagged bytes: $(tail -1 "$tmp/out")"; failures=$((failures + 1)); }

  # convert: a cache re-encoded into each V4.1 attention record and back, read by inspect; OUT
  # is a new regular file (or replaced with --force), never a device, a FIFO or the input.
  # A cache of zeros is what a writer stores for zero keys: it converts without a report.
  { npy_header 2; head -c $((2 * stride)) /dev/zero; } >"$tmp/zero.npy"
  clean=(convert "$tmp/zero.npy")
  expect "convert to mxfp8_ds_mla" 0 "" -- "${clean[@]}" "$tmp/mx.npy" --to mxfp8_ds_mla --backend reference
  grep -q "fp8_ds_mla -> mxfp8_ds_mla" "$tmp/out" || { echo "FAIL convert: no summary line"; failures=$((failures + 1)); }
  ! grep -q "^warning" "$tmp/out" || { echo "FAIL convert: a clean cache gave reports"; failures=$((failures + 1)); }
  bs=$(sed -nE 's/.* blocks x ([0-9]+) tokens.*/\1/p' "$tmp/out")
  expect "inspect the converted cache" 0 "" -- inspect "$tmp/mx.npy" --format mxfp8_ds_mla --block-size "${bs:-0}"
  grep -q "^summary: .* 0 flagged" "$tmp/out" || { echo "FAIL converted cache: $(tail -1 "$tmp/out")"; failures=$((failures + 1)); }
  expect "convert back to fp8_ds_mla" 0 "" -- convert "$tmp/mx.npy" "$tmp/back.safetensors" --from mxfp8_ds_mla \
    --to fp8_ds_mla --block-size "${bs:-0}" --chunk-tokens 5
  expect "inspect the safetensors output" 0 "" -- inspect "$tmp/back.safetensors"
  grep -q "^summary: .* 0 flagged" "$tmp/out" || { echo "FAIL converted back: $(tail -1 "$tmp/out")"; failures=$((failures + 1)); }
  # quantize.safetensors case000's cache holds NaN codes (and stale bytes): converted, with a warning.
  conv=(convert "$golden" "${cache[@]}")
  expect "convert with reports" 0 "" -- "${conv[@]}" "$tmp/nan.npy" --to mxfp8_ds_mla
  grep -q "^warning: [0-9]* reports" "$tmp/out" || { echo "FAIL convert: NaN codes not reported"; failures=$((failures + 1)); }
  expect "convert to nvfp4_ds_mla" 0 "" -- "${conv[@]}" "$tmp/nv.npy" --to nvfp4_ds_mla
  expect "convert: OUT exists" 2 "exists (--force replaces it)" -- "${conv[@]}" "$tmp/mx.npy" --to mxfp8_ds_mla
  expect "convert --force" 0 "" -- "${conv[@]}" "$tmp/mx.npy" --to mxfp8_ds_mla --force
  expect "convert: OUT is a device" 2 "exists and is not a regular file" -- "${conv[@]}" /dev/null --to mxfp8_ds_mla --force
  expect "convert: OUT is a FIFO" 2 "exists and is not a regular file" -- "${conv[@]}" "$tmp/fifo" --to mxfp8_ds_mla --force
  expect "convert: OUT is IN" 2 "OUT is the input file" -- convert "$tmp/mx.npy" "$tmp/mx.npy" --to nvfp4_ds_mla --force
  expect "convert: OUT's suffix" 2 "OUT must end in .npy or .safetensors" -- "${conv[@]}" "$tmp/out.bin" --to mxfp8_ds_mla
  expect "convert: unknown record" 2 "--to" -- "${conv[@]}" "$tmp/x.npy" --to fp4
  expect "convert: different widths" 1 "hold keys of different widths" -- "${conv[@]}" "$tmp/x.npy" --to mxfp4_indexer
  expect "convert: IN is /dev/zero" 1 "not a regular file (a character device)" -- convert /dev/zero "$tmp/x.npy" --to mxfp8_ds_mla
  [[ ! -e $tmp/x.npy ]] || { echo "FAIL convert: a failed conversion left OUT behind"; failures=$((failures + 1)); }
  ls "$tmp" | grep -q '\.XXXXXX\|\.npy\.' && { echo "FAIL convert: temporary files left: $(ls "$tmp")"; failures=$((failures + 1)); }
fi

if ((failures)); then
  echo "$failures failures"
  exit 1
fi
echo "all passed"
