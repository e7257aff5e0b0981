#!/usr/bin/env bash
# setup_deps.sh: installs the distribution packages the build needs, if they are missing
# (CLI11, nlohmann/json, doctest headers; CMake and Ninja; with --fuzz also clang and its
# libFuzzer runtime for scripts/fuzz.sh). The CUDA 13 toolkit itself is not installed here: it
# must be on the machine (nvcc on PATH or in /usr/local/cuda/bin).
#
#   scripts/setup_deps.sh [--fuzz]
set -euo pipefail

missing=()
if [[ ${1:-} == --fuzz ]]; then
  command -v clang++ >/dev/null || missing+=(clang)
  compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a" >/dev/null || missing+=(libclang-rt-dev)
fi
[[ -f /usr/include/CLI/CLI.hpp ]] || missing+=(libcli11-dev)
[[ -f /usr/include/nlohmann/json.hpp ]] || missing+=(nlohmann-json3-dev)
[[ -f /usr/include/doctest/doctest.h ]] || missing+=(doctest-dev)
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)

if ((${#missing[@]})); then
  echo "setup_deps: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi

if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup_deps: nvcc found in /usr/local/cuda/bin (add it to PATH to skip this notice)"
fi
