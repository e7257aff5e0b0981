#!/usr/bin/env bash
# setup_deps.sh: installs the distribution packages the build needs, if they are missing
# (CLI11, nlohmann/json, doctest headers; OpenBLAS, the float64 reference's products; CMake and
# Ninja; with --fuzz also clang and its libFuzzer runtime for tools/fuzz.sh; with --aarch64 the
# aarch64 cross compiler, the user-mode emulator and the arm64 OpenBLAS (Debian's multiarch: the
# arm64 architecture is added to dpkg's) for tools/cross_aarch64.sh; with --ccache (CI: .ci/run) or --mutation
# ccache, through which scripts/test.sh, the other build scripts (scripts/ccache_env.sh) and
# tools/mutation_check.py compile when it is installed, so that a repeated build takes the
# objects of unchanged sources from the cache). ccache is optional: without it every build
# compiles every file. The CUDA 13 toolkit itself is not installed here: it must be on the
# machine (nvcc on PATH or in /usr/local/cuda/bin).
#
# With --coverage, gcovr for tools/coverage.sh.
#
#   scripts/setup_deps.sh [--fuzz] [--aarch64] [--ccache] [--mutation] [--coverage]
set -euo pipefail

missing=()
add_arm64=0
for option in "$@"; do
  case $option in
    --fuzz)
      command -v clang++ >/dev/null || missing+=(clang)
      compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a" >/dev/null || missing+=(libclang-rt-dev)
      ;;
    --aarch64)
      command -v aarch64-linux-gnu-g++ >/dev/null || missing+=(g++-aarch64-linux-gnu)
      command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
      if [[ ! -e /usr/lib/aarch64-linux-gnu/libopenblas.so ]]; then
        missing+=(libopenblas-dev:arm64)
        dpkg --print-foreign-architectures | grep -qx arm64 || add_arm64=1
      fi
      ;;
    --ccache | --mutation) command -v ccache >/dev/null || missing+=(ccache) ;;
    --coverage) command -v gcovr >/dev/null || missing+=(gcovr) ;;
    *)
      echo "setup_deps: unknown option $option (usage: scripts/setup_deps.sh [--fuzz] [--aarch64] [--ccache] [--mutation] [--coverage])" >&2
      exit 2
      ;;
  esac
done
[[ -f /usr/include/CLI/CLI.hpp ]] || missing+=(libcli11-dev)
[[ -f /usr/include/nlohmann/json.hpp ]] || missing+=(nlohmann-json3-dev)
[[ -f /usr/include/doctest/doctest.h ]] || missing+=(doctest-dev)
# This machine's OpenBLAS and its cblas.h, in Debian's multiarch folders (cmake/openblas.cmake).
multiarch=$(gcc -print-multiarch 2>/dev/null || true)
[[ -n $multiarch ]] || multiarch=$(uname -m)-linux-gnu
if [[ ! -e /usr/lib/$multiarch/libopenblas.so ]] || ! compgen -G "/usr/include/$multiarch/openblas*/cblas.h" >/dev/null; then
  missing+=(libopenblas-dev)
fi
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)

if ((${#missing[@]})); then
  echo "setup_deps: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  if ((add_arm64)); then "${sudo_cmd[@]}" dpkg --add-architecture arm64; fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi

if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup_deps: nvcc found in /usr/local/cuda/bin (add it to PATH to skip this notice)"
fi
