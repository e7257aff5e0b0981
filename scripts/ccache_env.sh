# ccache_env.sh: sourced by the build scripts (test.sh, cross_aarch64.sh, fuzz.sh, .ci/run): every
# compile goes through ccache where it is installed (scripts/setup_deps.sh installs it), so that a
# build repeated on the same machine (CI's next run, another clone, a removed build folder, the
# mutation check) takes the objects of unchanged sources from the cache instead of compiling them.
#
# CMake reads CMAKE_<LANG>_COMPILER_LAUNCHER from the environment only when it configures a folder
# for the first time: a folder configured without ccache keeps building without it (it is not
# rebuilt because of this). SDPA_CCACHE=0 keeps ccache out; CCACHE_DISABLE=1 makes it compile
# every file anyway (tools/time_build_and_tests.sh does, to time a build from scratch).
if [[ ${SDPA_CCACHE:-1} != 0 ]] && command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CUDA_COMPILER_LAUNCHER=${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}
  # Paths inside the repository hashed relative to the build folder, and the build folder itself
  # (hashed when compiling with -g) left out, so that a clone elsewhere hits the same entries.
  CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
  export CCACHE_BASEDIR
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
fi
