# aarch64-linux-gnu.cmake: a CMake toolchain file for the DGX Spark's CPU (aarch64 Linux), built
# on an x86-64 Debian machine with Debian's cross compiler (g++-aarch64-linux-gnu), and its
# programs run under Debian's user-mode emulator (qemu-user):
#
#   cmake -S host_only -B build-aarch64 -G Ninja --toolchain "$PWD/cmake/aarch64-linux-gnu.cmake"
#   ctest --test-dir build-aarch64     (each test runs as qemu-aarch64 -L <sysroot> <test>)
#
# tools/cross_aarch64.sh runs both; scripts/setup_deps.sh --aarch64 installs the packages.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# The target's C and C++ runtime (glibc, libstdc++) come with the cross compiler under this
# folder. The one library found (OpenBLAS, cmake/openblas.cmake) is Debian's multiarch arm64 one
# (libopenblas-dev:arm64, in /usr/lib/aarch64-linux-gnu): "/" is a second root, under which CMake
# looks in lib/aarch64-linux-gnu (CMAKE_LIBRARY_ARCHITECTURE) before lib, and never in x86-64's
# lib/x86_64-linux-gnu, so nothing built for x86-64 is linked. Headers may also come from
# /usr/include: the third-party libraries are header-only (CLI11, nlohmann/json, doctest), and
# the cross compiler itself searches /usr/include last, after its own C and C++ headers.
set(SDPA_AARCH64_SYSROOT /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH ${SDPA_AARCH64_SYSROOT} /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)

# CTest (and add_test, custom commands) run the target's programs through the emulator; -L makes
# it load the aarch64 dynamic linker and libraries from the sysroot.
find_program(SDPA_QEMU_AARCH64 qemu-aarch64)
if(SDPA_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${SDPA_QEMU_AARCH64} -L ${SDPA_AARCH64_SYSROOT})
endif()
