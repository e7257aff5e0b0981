# build_flags.cmake: the optimization level of a Release build's host C++ (the top-level project
# and host_only/ include it after project()).
#
# -O2 rather than CMake's default -O3: the host code is a command-line tool's (parsing, JSON,
# processes, files) plus the float64 reference, whose loops -O3 makes no faster (a 4608-key
# layer's reference took the same time either way); -O3 took about a fifth longer to compile
# (run_options.cpp: 11.5 s against 9.3 s), which a fresh clone's build pays on every file.
string(REPLACE "-O3" "-O2" CMAKE_CXX_FLAGS_RELEASE "${CMAKE_CXX_FLAGS_RELEASE}")
