# prune_cuda_library.cmake: a static CUDA library cut down to the GPU architectures this build
# embeds, so that a binary with cuBLAS linked statically stays small enough to attach to a bug
# report (run at build time by cublas.cmake when SDPA_STATIC_CUBLAS is ON):
#
#   cmake -DNVPRUNE=/usr/local/cuda/bin/nvprune -DNVCC=/usr/local/cuda/bin/nvcc -DINPUT=libcublas_static.a
#         -DOUTPUT=pruned/libcublas_static.a -DARCHITECTURES=90-real,121-real,121-virtual [-DCUOBJDUMP=...]
#         -P prune_cuda_library.cmake
#
# nvprune keeps only exact matches, and a library may carry the code for a GPU under another
# name than the GPU's own: an sm_120 cubin runs on sm_121 (same major version), and Hopper and
# Blackwell kernels are often built for the arch-specific sm_90a / sm_100a or the family-specific
# sm_100f / sm_120f targets. So for every architecture XY this keeps machine code for every
# architecture of its family up to XY that this toolkit knows (nvcc --list-gpu-code), with their
# "a" and "f" variants, and PTX for the family of every virtual architecture. If nvprune rejects
# a variant name, it retries with plain names; if the result
# lacks machine code for a target (checked with cuobjdump where present), or nvprune fails
# again, the library is copied unpruned with a warning: a larger binary, never a broken one.
cmake_minimum_required(VERSION 3.24)

string(REPLACE "," ";" archs "${ARCHITECTURES}")
# The real architectures this toolkit knows ("sm_75 sm_80 sm_86 ..."), so that no name nvprune
# would reject (sm_81 does not exist) is asked for.
set(known "")
if(NVCC)
  execute_process(COMMAND ${NVCC} --list-gpu-code OUTPUT_VARIABLE listed ERROR_QUIET RESULT_VARIABLE listed_rc)
  if(listed_rc EQUAL 0)
    string(REGEX MATCHALL "sm_[0-9]+" known "${listed}")
    string(REPLACE "sm_" "" known "${known}")
  endif()
endif()
set(plain "")
set(variants "")
set(families "")
foreach(item IN LISTS archs)
  string(REGEX MATCH "^([0-9]+)" number "${item}")
  if(NOT number)
    message(WARNING "prune_cuda_library: architecture '${item}' is not a number; keeping ${INPUT} unpruned")
    file(COPY_FILE ${INPUT} ${OUTPUT})
    return()
  endif()
  math(EXPR major "${number} / 10")
  math(EXPR minor "${number} % 10")
  list(APPEND families ${major})
  foreach(m RANGE 0 ${minor})
    set(arch ${major}${m})
    if(NOT m EQUAL minor AND known AND NOT arch IN_LIST known)
      continue()
    endif()
    if(NOT item MATCHES "-virtual$")
      list(APPEND plain "arch=compute_${arch},code=sm_${arch}")
      if(major GREATER_EQUAL 9)
        list(APPEND variants "arch=compute_${arch}a,code=sm_${arch}a")
      endif()
      if(major GREATER_EQUAL 10)
        list(APPEND variants "arch=compute_${arch}f,code=sm_${arch}f")
      endif()
    endif()
    if(NOT item MATCHES "-real$")
      list(APPEND plain "arch=compute_${arch},code=compute_${arch}")
    endif()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES plain)
list(REMOVE_DUPLICATES variants)
list(REMOVE_DUPLICATES families)

function(run_nvprune gencodes result)
  set(args "")
  foreach(g IN LISTS gencodes)
    list(APPEND args -gencode ${g})
  endforeach()
  execute_process(COMMAND ${NVPRUNE} ${args} ${INPUT} -o ${OUTPUT}.part RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    string(STRIP "${err}" err)
    message(STATUS "nvprune with ${gencodes}: failed (${err})")
  endif()
  set(${result} ${rc} PARENT_SCOPE)
endfunction()

run_nvprune("${plain};${variants}" rc)
if(NOT rc EQUAL 0)
  run_nvprune("${plain}" rc)
endif()

set(usable FALSE)
if(rc EQUAL 0)
  set(usable TRUE)
  if(CUOBJDUMP)
    execute_process(COMMAND ${CUOBJDUMP} --list-elf ${OUTPUT}.part OUTPUT_VARIABLE elves ERROR_QUIET RESULT_VARIABLE listed)
    if(listed EQUAL 0)
      foreach(major IN LISTS families)
        if(NOT elves MATCHES "sm_${major}[0-9][af]?[.]")
          message(WARNING "prune_cuda_library: no machine code for the sm_${major}x family left in the pruned "
                          "${INPUT}; keeping it unpruned")
          set(usable FALSE)
        endif()
      endforeach()
    endif()
  endif()
endif()

if(usable)
  file(RENAME ${OUTPUT}.part ${OUTPUT})
  file(SIZE ${INPUT} before)
  file(SIZE ${OUTPUT} after)
  math(EXPR before_mib "${before} / 1048576")
  math(EXPR after_mib "${after} / 1048576")
  message(STATUS "pruned ${INPUT} to ${ARCHITECTURES}: ${before_mib} MiB -> ${after_mib} MiB")
else()
  file(REMOVE ${OUTPUT}.part)
  message(WARNING "prune_cuda_library: could not prune ${INPUT}; linking it unpruned (a larger binary)")
  file(COPY_FILE ${INPUT} ${OUTPUT})
endif()
