#!/usr/bin/env bash
# Formats the tracked C++ and CUDA sources with .clang-format, or checks them:
#   bash scripts/format.sh            rewrite every file in place
#   bash scripts/format.sh --check    list the files that differ and exit 1 (nothing is written)
# CLANG_FORMAT names the binary (default: clang-format, Debian's package).
set -euo pipefail
cd "$(dirname "$0")/.."
cf=${CLANG_FORMAT:-clang-format}
command -v "$cf" >/dev/null || { echo "format.sh: $cf not found (apt-get install clang-format)" >&2; exit 69; }
mapfile -d '' files < <(git ls-files -z -- '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h' '*.cc')
[ ${#files[@]} -gt 0 ] || { echo "format.sh: no C++ sources found" >&2; exit 66; }
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    "$cf" --style=file "$f" | cmp -s - "$f" || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    printf 'format.sh: not formatted (run bash scripts/format.sh):\n' >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format.sh: ${#files[@]} files formatted ($("$cf" --version | head -n 1))"
else
  "$cf" --style=file -i "${files[@]}"
fi
