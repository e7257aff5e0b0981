# build_flags.cmake: the optimization level of a Release build's host C++, and unity builds (the
# top-level project, host_only/ and fuzz/ include it after project()).
#
# -O2 rather than CMake's default -O3: the host code is a command-line tool's (parsing, JSON,
# processes, files) plus the float64 reference, whose loops -O3 makes no faster (a 4608-key
# layer's reference took the same time either way); -O3 took about a fifth longer to compile
# (run_options.cpp: 11.5 s against 9.3 s), which a fresh clone's build pays on every file.
string(REPLACE "-O3" "-O2" CMAKE_CXX_FLAGS_RELEASE "${CMAKE_CXX_FLAGS_RELEASE}")

# Unity builds: each target's C++ files compiled eight at a time (CMake's batch) as one translation
# unit. Nearly every file includes nlohmann/json, CLI11 or doctest, whose templates each translation
# unit would otherwise parse, instantiate and optimize again: on an H100 machine a fresh build's
# steps summed 307 s against 564 s with every file alone, and 404 s in batches of four
# (results/h100-2026-11-28/test_sh/). The files a target builds together share their anonymous
# namespace, so their file-local names must differ. -DCMAKE_UNITY_BUILD=OFF compiles each file
# alone, as a check that each includes what it uses.
if(NOT DEFINED CMAKE_UNITY_BUILD)
  set(CMAKE_UNITY_BUILD ON)
endif()
