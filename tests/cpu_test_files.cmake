# What both projects that build cpu_tests share (tests/CMakeLists.txt, and host_only/ for the
# aarch64 cross build): the files the CPU test binary reads, as compile definitions, and how the
# test code is optimized.
function(sdpa_cpu_test_files target fake_child)
  target_compile_definitions(${target} PRIVATE
    SWEEP_TEST_FAKE_CHILD="$<TARGET_FILE:${fake_child}>"
    MINIMIZE_FAKE_CHILD="$<TARGET_FILE:minimize_fake_child>"
    WORKLOAD_FIXTURE_DIR="${SDPA_ROOT}/tests/fixtures/capture"
    SWEEP_TEST_SCHEMA="${SDPA_ROOT}/results/sweep.schema.json"
    STATS_FIXTURE="${SDPA_ROOT}/tests/fixtures/stats_known_answers.json"
    SDPA_RESULTS_DIR="${SDPA_ROOT}/results"
    FAKE_CUBLAS_LIBRARY="$<TARGET_FILE:fake_cublas>")
  sdpa_runs_programs(${target} ${fake_child} minimize_fake_child fake_cublas)
  # A library that answers only cuBLAS's version query (tests/fake_cublas.cpp).
  add_library(fake_cublas SHARED ${SDPA_ROOT}/tests/fake_cublas.cpp)
endfunction()

# A test binary that runs these programs is linked after they are built, so that building it
# (alone, too) leaves none stale. A file dependency of its link step, not add_dependencies: that
# would hold back the compilation of all its sources until the programs are linked, and the
# build's critical path with it.
function(sdpa_runs_programs target)
  foreach(program IN LISTS ARGN)
    set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS $<TARGET_FILE:${program}>)
  endforeach()
endfunction()

# The test code unoptimized (the harness's libraries it tests keep the build's -O2, or the asan
# preset's -O1): it drives processes and compares values, and its large files compiled three
# times faster (test_sweep.cpp: 11 s against 37 s at -O3; under ASan 34 s against 113 s at -O1),
# the longest steps of a fresh build. Three test files compute for their checks and keep the
# build's optimization: the JSON schema validator (cpu.schemas and cpu.sweep validate thousands of
# documents: under ASan on 2 cores 38 s and 83 s unoptimized, 19 s and 59 s optimized), the
# coverage of the bootstrap intervals (cpu.stats: 46 s against 20 s) and the GPU kernels' checks
# of millions of elements one by one (gpu_kernels on an H100: 26 s against 9 s).
# (Files with options of their own are left out of the unity build's batches: CMake compiles each
# alone.)
function(sdpa_unoptimized_test_code target)
  target_compile_options(${target} PRIVATE $<$<CONFIG:Release,RelWithDebInfo>:-O0>)
  set_source_files_properties(${SDPA_ROOT}/tests/json_schema_check.cpp ${SDPA_ROOT}/tests/test_stats.cpp
                              ${SDPA_ROOT}/tests/test_gpu_kernels.cpp
                              PROPERTIES COMPILE_OPTIONS "$<$<CONFIG:Release>:-O2>$<$<CONFIG:RelWithDebInfo>:-O1>")
endfunction()
