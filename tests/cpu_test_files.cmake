# The files the CPU test binary reads, as compile definitions: one list for both projects that
# build cpu_tests (tests/CMakeLists.txt, and host_only/ for the aarch64 cross build).
function(sdpa_cpu_test_files target fake_child)
  target_compile_definitions(${target} PRIVATE
    SWEEP_TEST_FAKE_CHILD="$<TARGET_FILE:${fake_child}>"
    MINIMIZE_FAKE_CHILD="$<TARGET_FILE:minimize_fake_child>"
    WORKLOAD_FIXTURE_DIR="${SDPA_ROOT}/tests/fixtures/capture"
    SWEEP_TEST_SCHEMA="${SDPA_ROOT}/results/sweep.schema.json"
    STATS_FIXTURE="${SDPA_ROOT}/tests/fixtures/stats_known_answers.json"
    SDPA_RESULTS_DIR="${SDPA_ROOT}/results")
  sdpa_runs_programs(${target} ${fake_child} minimize_fake_child)
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
