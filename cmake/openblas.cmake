# openblas.cmake: sdpa::openblas, the CPU's BLAS of the float64 reference's matrix products
# (math_sdpa/reference.cpp), found here with CMake's FindBLAS: OpenBLAS's library and its cblas.h.
#
# The harness compiles against cblas.h and opens the library by its SONAME when the reference
# first multiplies (math_sdpa/cpu_blas.cpp), not when a program starts: the threaded OpenBLAS
# starts one thread per core as it loads, and each spins for about 0.1 s before it sleeps, which
# every `repro` process (the supervising parent, `--help`, the sweep's and the report's parents)
# would pay for a library only a check uses. What FindBLAS found is the file a link would have
# used; the dynamic loader finds the same by its SONAME in the system's folders.
#
# Included by math_sdpa/CMakeLists.txt, so every project that builds the reference (the harness,
# host_only/, fuzz/) finds it the same way; a cross build (cmake/aarch64-linux-gnu.cmake) finds
# the target's (Debian's multiarch libopenblas-dev:arm64).
if(TARGET sdpa_openblas)
  return()
endif()

if(CMAKE_CROSSCOMPILING AND CMAKE_SYSTEM_PROCESSOR STREQUAL "aarch64")
  set(sdpa_openblas_package "libopenblas-dev:arm64")
else()
  set(sdpa_openblas_package "libopenblas-dev")
endif()
string(CONCAT sdpa_openblas_missing "the float64 reference multiplies through OpenBLAS: install the Debian package "
              "${sdpa_openblas_package} (scripts/setup_deps.sh does)")

set(BLA_VENDOR OpenBLAS)
find_package(BLAS QUIET)
# Debian keeps each OpenBLAS variant's cblas.h in a folder of its own (pthreads, OpenMP, serial);
# their declarations are the same, and the harness uses no more than those.
find_path(SDPA_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas-openmp openblas-serial openblas)
if(NOT BLAS_FOUND)
  message(FATAL_ERROR "OpenBLAS was not found (FindBLAS, BLA_VENDOR OpenBLAS): ${sdpa_openblas_missing}")
endif()
if(NOT SDPA_CBLAS_INCLUDE_DIR)
  message(FATAL_ERROR "cblas.h was not found: ${sdpa_openblas_missing}")
endif()

# The SONAME of the library FindBLAS chose (libopenblas.so.0 on Debian and Ubuntu), read from its
# dynamic section: the name the dynamic loader knows it by.
set(sdpa_openblas_library "")
foreach(library IN LISTS BLAS_LIBRARIES)
  if(library MATCHES "openblas[^/]*$")
    set(sdpa_openblas_library ${library})
    break()
  endif()
endforeach()
if(sdpa_openblas_library STREQUAL "" OR NOT CMAKE_OBJDUMP)
  message(FATAL_ERROR "OpenBLAS's shared library was not among FindBLAS's BLAS_LIBRARIES (${BLAS_LIBRARIES}), or no "
                      "objdump was found to read its SONAME: ${sdpa_openblas_missing}")
endif()
execute_process(COMMAND ${CMAKE_OBJDUMP} -p ${sdpa_openblas_library} OUTPUT_VARIABLE sdpa_openblas_dump
                RESULT_VARIABLE sdpa_objdump_status ERROR_QUIET)
if(NOT sdpa_objdump_status EQUAL 0 OR NOT sdpa_openblas_dump MATCHES "SONAME +([^ \t\r\n]+)")
  message(FATAL_ERROR "${sdpa_openblas_library} has no SONAME (${CMAKE_OBJDUMP} -p): a shared OpenBLAS is needed; "
                      "${sdpa_openblas_missing}")
endif()
set(SDPA_OPENBLAS_SONAME ${CMAKE_MATCH_1})
message(STATUS "OpenBLAS: ${sdpa_openblas_library} (loaded as ${SDPA_OPENBLAS_SONAME}), cblas.h in ${SDPA_CBLAS_INCLUDE_DIR}")

add_library(sdpa_openblas INTERFACE)
add_library(sdpa::openblas ALIAS sdpa_openblas)
target_include_directories(sdpa_openblas SYSTEM INTERFACE ${SDPA_CBLAS_INCLUDE_DIR})
target_compile_definitions(sdpa_openblas INTERFACE SDPA_OPENBLAS_SONAME="${SDPA_OPENBLAS_SONAME}")
target_link_libraries(sdpa_openblas INTERFACE ${CMAKE_DL_LIBS})
