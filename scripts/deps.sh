#!/usr/bin/env bash
# Installs the Debian packages dsv4kv builds with (idempotent; skips apt when all are present).
set -euo pipefail
pkgs=(cmake ninja-build g++ clang libclang-rt-14-dev libeigen3-dev libgtest-dev librapidcheck-dev
      nlohmann-json3-dev libcli11-dev libfmt-dev doxygen clang-format)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
echo "deps: all present"
