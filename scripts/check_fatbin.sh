#!/usr/bin/env bash
# Checks the GPU code a CUDA library, object or executable carries, with cuobjdump:
#   bash scripts/check_fatbin.sh [--exact] [--pdl] FILE TARGET...
# TARGET sm_NN[a|f]: SASS that must be there; compute_NN: PTX that must be there. Every CUDA object
# inside FILE (each .cu of a static library) must carry every target; with --exact, nothing else.
# --pdl: every kernel of every SASS target sm_90 or newer must wait for the previous grid
# (griddepcontrol.wait, SASS ACQBULK) before its first global, generic or atomic memory access, and
# trigger its dependents (griddepcontrol.launch_dependents, SASS PREEXIT): what makes the library's
# programmatic dependent launches safe (cuda/src/launch.cuh, grid_dependency_begin). L2 prefetches
# (CCTL...PF2, UBLKPF.L2: cuda/src/prefetch.cuh, used by rows.cuh's prefetch instances) may come
# before the wait: they are hints, not accesses, and change no value any load returns.
# Prints the lists found. cuobjdump comes from $CUOBJDUMP, PATH or nvcc's directory; failing those,
# from PyPI (nvidia-cuda-cuobjdump of nvcc's major version) into a venv under build/.
set -euo pipefail
cd "$(dirname "$0")/.."
exact=0
pdl=0
while [ $# -gt 0 ]; do
  case "$1" in
    --exact) exact=1 ;;
    --pdl) pdl=1 ;;
    *) break ;;
  esac
  shift
done
[ $# -ge 2 ] || { echo "usage: check_fatbin.sh [--exact] [--pdl] FILE TARGET..." >&2; exit 64; }
file=$1; shift
[ -f "$file" ] || { echo "check_fatbin: $file not found" >&2; exit 66; }

find_cuobjdump() {
  if [ -n "${CUOBJDUMP:-}" ]; then echo "$CUOBJDUMP"; return; fi
  if command -v cuobjdump >/dev/null; then command -v cuobjdump; return; fi
  local nvcc; nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  if [ -x "$(dirname "$nvcc")/cuobjdump" ]; then echo "$(dirname "$nvcc")/cuobjdump"; return; fi
  # A CUDA toolkit installed without cuobjdump: NVIDIA publishes it on PyPI.
  local venv=${DSV4KV_TOOLS_VENV:-$PWD/build/tools-venv}
  local major; major=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  local found; found=$(find "$venv" -name cuobjdump -type f 2>/dev/null | head -n 1)
  # --pdl reads the SASS: cuobjdump -sass runs nvdisasm, published beside it.
  local pkgs=() ; [ -n "$found" ] || pkgs+=("nvidia-cuda-cuobjdump==${major}.*")
  if [ $pdl = 1 ] && [ -z "$(find "$venv" -name nvdisasm -type f 2>/dev/null | head -n 1)" ]; then
    pkgs+=("nvidia-cuda-nvdisasm==${major}.*")
  fi
  if [ ${#pkgs[@]} -gt 0 ]; then
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
    "$venv/bin/python" -m pip install -q "${pkgs[@]}" >&2
    found=$(find "$venv" -name cuobjdump -type f | head -n 1)
  fi
  [ -n "$found" ] || { echo "check_fatbin: no cuobjdump (set CUOBJDUMP)" >&2; exit 69; }
  echo "$found"
}
cuobjdump=$(find_cuobjdump)
# nvdisasm is looked up on PATH: the one installed beside cuobjdump first.
export PATH="$(dirname "$cuobjdump"):$PATH"

# One line per embedded file: "<object> <target>", e.g. "quantize.cu.o sm_89": the archive member
# it sits in (an executable or object file is one unit, "-"); embedded files are named like
# libdsv4kv_cuda.3.sm_89.cubin or .sm_89.ptx ("a"/"f" suffixes kept).
list() {  # list --list-elf|--list-ptx
  "$cuobjdump" "$1" "$file" 2>/dev/null | awk '
    /^member / { n = split($0, part, ":"); obj = part[n - 1]; next }
    /^(ELF|PTX) file/ && match($NF, /\.(sm|compute)_[0-9]+[af]?\.(cubin|ptx)$/) {
      t = substr($NF, RSTART + 1, RLENGTH - 1); sub(/\.(cubin|ptx)$/, "", t)
      print (obj == "" ? "-" : obj), t }' | sort -u
}
elf=$(list --list-elf)
ptx=$(list --list-ptx | sed -E 's/ sm_/ compute_/')
objects=$(printf '%s\n%s\n' "$elf" "$ptx" | awk 'NF {print $1}' | sort -u)
n_obj=$(printf '%s\n' "$objects" | grep -c . || true)
echo "check_fatbin: $file ($(du -h "$file" | cut -f1), $n_obj CUDA objects)"
targets() { local t; t=$(printf '%s\n' "$1" | awk 'NF {print $2}' | sort -u | tr '\n' ' '); echo "${t:-none}"; }
echo "  SASS: $(targets "$elf")"
echo "  PTX:  $(targets "$ptx")"
[ "$n_obj" -gt 0 ] || { echo "check_fatbin: FAIL: no GPU code in $file" >&2; exit 1; }

fail=0
for t in "$@"; do
  case "$t" in
    sm_*) have=$elf ;;
    compute_*) have=$ptx ;;
    *) echo "check_fatbin: target $t is neither sm_NN nor compute_NN" >&2; exit 64 ;;
  esac
  for o in $objects; do
    if ! grep -qxF -e "$o $t" <<<"$have"; then echo "check_fatbin: FAIL: $o has no $t" >&2; fail=1; fi
  done
done
if [ $exact = 1 ]; then
  for t in $(printf '%s\n%s\n' "$elf" "$ptx" | awk 'NF {print $2}' | sort -u); do
    case " $* " in *" $t "*) ;; *) echo "check_fatbin: FAIL: unexpected $t" >&2; fail=1 ;; esac
  done
fi
if [ $pdl = 1 ]; then
  # One line per kernel of an sm_90+ cubin: "<arch> <function> <verdict>"; the verdict is "ok" or
  # what is wrong. Opcodes are read after an optional predicate (@P0, @!PT, ...).
  sass=$("$cuobjdump" -sass "$file" 2>&1) || { echo "check_fatbin: cuobjdump -sass failed: ${sass: -300}" >&2; exit 69; }
  pdl_report=$(printf '%s\n' "$sass" | awk '
    function done_fn() {
      if (fn != "" && arch >= 90) {
        if (early != "") v = "memory access before ACQBULK: " early
        else if (!waited) v = "no ACQBULK (griddepcontrol.wait)"
        else if (!triggered) v = "no PREEXIT (griddepcontrol.launch_dependents)"
        else v = "ok"
        print an, fn, v
      }
      fn = ""; waited = 0; triggered = 0; early = ""
    }
    /^[[:space:]]*arch = sm_/ { done_fn(); an = $3; a = an; sub(/^sm_/, "", a); arch = a + 0; next }
    /Function : / { done_fn(); fn = $3; next }
    fn != "" && match($0, /\*\/[[:space:]]+(@!?U?P[0-9T]+[[:space:]]+)?[A-Z][A-Z0-9_]*/) {
      op = substr($0, RSTART + 2, RLENGTH - 2); sub(/^[[:space:]]+/, "", op); sub(/^@[^[:space:]]+[[:space:]]+/, "", op)
      if (op == "ACQBULK") waited = 1
      else if (op == "PREEXIT") triggered = 1
      else if (!waited && early == "" && op ~ /^(LDG|STG|LD|ST|ATOM|ATOMG|RED|REDG|LDGSTS|UBLKCP|UTMALDG|UTMASTG|SULD|SUST)$/) early = op
    }
    END { done_fn() }')
  n_pdl=$(printf '%s\n' "$pdl_report" | grep -c . || true)
  bad=$(printf '%s\n' "$pdl_report" | awk 'NF && $3 != "ok"')
  if [ "$n_pdl" -eq 0 ]; then
    echo "check_fatbin: --pdl: no kernel of an sm_90+ target in $file (nothing to check)"
  elif [ -n "$bad" ]; then
    printf 'check_fatbin: FAIL (--pdl): %s\n' "$bad" >&2
    fail=1
  else
    echo "check_fatbin: --pdl: all $n_pdl kernels of sm_90+ targets wait before their first memory access"
  fi
fi
[ $fail = 0 ] && echo "check_fatbin: OK ($*)"
exit $fail
