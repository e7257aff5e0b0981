# git_commit.cmake: SDPA_GIT_COMMIT, the commit a binary was built from, for results and bug
# reports. A binary built from uncommitted changes says so (as of configure time), so a bug
# report never names a commit whose code it does not hold.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SDPA_ROOT}
                OUTPUT_VARIABLE SDPA_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT SDPA_GIT_COMMIT)
  set(SDPA_GIT_COMMIT unknown)
else()
  execute_process(COMMAND git diff --quiet HEAD -- WORKING_DIRECTORY ${SDPA_ROOT}
                  RESULT_VARIABLE sdpa_tree_dirty ERROR_QUIET)
  if(sdpa_tree_dirty EQUAL 1)
    string(APPEND SDPA_GIT_COMMIT "-dirty")
  endif()
endif()
