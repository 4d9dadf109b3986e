# Sourced by verify_gpu.sh and verify_ptx_jit.sh: `step NAME CMD...` runs CMD, appends its output
# to "$log", prints one status line and counts failures in "$failed" (both set by the caller).
step() {
  local name=$1; shift
  local t0=$SECONDS
  "$@" >>"$log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then echo "PASS  $name ($((SECONDS - t0)) s)"; else echo "FAIL  $name (exit $rc)"; failed=$((failed + 1)); fi
  echo "---- $name: exit $rc" >>"$log"
}
