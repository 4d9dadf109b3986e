#!/usr/bin/env bash
# The benchmark on a machine with an NVIDIA GPU (see bench/README.md and bench/RESULTS.md):
#   bash bench/run_gpu.sh [--quick] [--only OP[,OP...]] [--filter SUBSTR] [--pdl]
# Runs dsv4kv_bench, then the Triton transcription at the same shapes (bench/triton_bench.py),
# then bench/compare.py. Everything lands in $OUT, or ./build-bench-out when OUT is unset.
# Environment:
#   DSV4KV_BIN_DIR     folder holding dsv4kv_bench (scripts/build_gpu_binaries.sh fills it); default .carry
#   DSV4KV_BENCH       the dsv4kv_bench binary itself; default $DSV4KV_BIN_DIR/dsv4kv_bench
#   DSV4KV_TRITON_DIR  folder holding dsv4_triton.py, the Triton transcription of vLLM's kernels
#                      (passed to triton_bench.py --oracle-dir); default $DSV4KV_ORACLE_DIR or .oracle
#   SKIP_TRITON=1      time only dsv4kv
#   INSTALL_PY=1       pip-install the dsv4kv package (with CUDA, about a minute) first, so that
#                      triton_bench.py byte-checks every Triton row and chain against it
# Relative folders are taken from the repository root (the script runs there).
# OP: an op's short name as `dsv4kv_bench --list` prints it, or chain.
# --pdl (dsv4kv_bench only): each chain also as "<chain> pdl", launched with programmatic dependent
# launch; compare.py holds it to the chain's figure against the same Triton chain.
# Exit status: 0 when every figure is met.
set -uo pipefail
cd "$(dirname "$0")/.."

bin_dir=${DSV4KV_BIN_DIR:-.carry}
bin=${DSV4KV_BENCH:-$bin_dir/dsv4kv_bench}
triton_dir=${DSV4KV_TRITON_DIR:-${DSV4KV_ORACLE_DIR:-.oracle}}
out=${OUT:-build-bench-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1

args=()
ours_args=()  # dsv4kv_bench only
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) args+=("$1") ;;
    --pdl) ours_args+=("$1") ;;
    --only|--filter) [ $# -ge 2 ] || { echo "run_gpu.sh: $1 needs a value" >&2; exit 64; }
                     args+=("$1" "$2"); shift ;;
    *) echo "run_gpu.sh: unknown argument $1 (allowed: --quick, --only OP, --filter SUBSTR, --pdl)" >&2; exit 64 ;;
  esac
  shift
done

if [ ! -x "$bin" ]; then
  echo "run_gpu.sh: $bin not found or not executable: build dsv4kv_bench (bench/RESULTS.md, \"Reproduce\")" \
       "and put it in \$DSV4KV_BIN_DIR (now $bin_dir) or name it with DSV4KV_BENCH" >&2
  exit 66
fi

log="$out/dsv4kv.log"
{
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) bash bench/run_gpu.sh ${args[*]:-} ${ours_args[*]:-}"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv 2>&1
} >"$log"

echo "== dsv4kv_bench" >&2
"$bin" "${args[@]}" "${ours_args[@]}" --json "$out/dsv4kv.json" --csv "$out/dsv4kv.csv" 2>&1 | tee -a "$log"
ours_rc=${PIPESTATUS[0]}
echo "dsv4kv_bench exit status $ours_rc" | tee -a "$log"

triton_json=""
if [ "${SKIP_TRITON:-0}" != 1 ] && [ "${INSTALL_PY:-0}" = 1 ]; then
  echo "== pip install . (dsv4kv with CUDA, for the Triton byte check; log in $out/pip.log)" >&2
  DSV4KV_PY_CUDA=ON python3 -m pip install --no-build-isolation --no-deps . >"$out/pip.log" 2>&1 ||
    echo "run_gpu.sh: pip install failed (see pip.log); the Triton rows stay unchecked" >&2
fi
if [ "${SKIP_TRITON:-0}" != 1 ]; then
  echo "== triton_bench.py" >&2
  python3 bench/triton_bench.py --oracle-dir "$triton_dir" --bench-bin "$bin" --out "$out/triton.json" "${args[@]}" 2>&1 | tee "$out/triton.log"
  triton_rc=${PIPESTATUS[0]}
  echo "triton_bench.py exit status $triton_rc" | tee -a "$out/triton.log"
  [ -f "$out/triton.json" ] && triton_json="$out/triton.json"
fi

if [ ! -f "$out/dsv4kv.json" ]; then
  echo "run_gpu.sh: dsv4kv_bench wrote no JSON (exit status $ours_rc); see $log" >&2
  exit 1
fi
echo
echo "== comparison (also in $out/compare.md)"
python3 bench/compare.py "$out/dsv4kv.json" $triton_json --md "$out/compare.md" --json "$out/compare.json"
cmp_rc=$?
[ "$ours_rc" -eq 0 ] || exit "$ours_rc"
exit "$cmp_rc"
