# cublas.cmake: sdpa::cublas, the cuBLAS the GPU side links, chosen once here.
#
# A binary that travels to a bug report: the CUDA runtime is always static; cuBLAS is the
# toolkit's shared library by default, loaded when first called, or, with SDPA_STATIC_CUBLAS=ON, linked in, so that the
# binary needs nothing but the NVIDIA driver (`ldd repro` lists no CUDA library). The static
# cuBLAS is pruned to CMAKE_CUDA_ARCHITECTURES with nvprune where the toolkit has it
# (prune_cuda_library.cmake), which keeps a DGX-Spark-only binary small.
# SDPA_CUBLAS_LINKAGE says which, for `repro --version`.
option(SDPA_STATIC_CUBLAS "link cuBLAS statically, pruned to CMAKE_CUDA_ARCHITECTURES where nvprune is present" OFF)
add_library(sdpa_cublas INTERFACE)
add_library(sdpa::cublas ALIAS sdpa_cublas)
if(NOT SDPA_STATIC_CUBLAS)
  # Loaded at the first call (math_sdpa/cublas_loader.cpp), not linked: a program that never calls
  # cuBLAS (help, a refused command line, the supervisor's and the reports' parents) does not pay
  # for loading it. The run path is the one linking CUDA::cublas gave, so the same file is found.
  target_link_libraries(sdpa_cublas INTERFACE CUDA::toolkit ${CMAKE_DL_LIBS})
  target_link_options(sdpa_cublas INTERFACE "LINKER:-rpath,${CUDAToolkit_LIBRARY_DIR}")
  target_compile_definitions(sdpa_cublas INTERFACE SDPA_CUBLAS_SONAME="libcublas.so.${CUDAToolkit_VERSION_MAJOR}")
  set(SDPA_CUBLAS_LINKAGE "dynamic, loaded at first use (libcublas.so.${CUDAToolkit_VERSION_MAJOR}, libcublasLt.so.${CUDAToolkit_VERSION_MAJOR})")
  return()
endif()

if(NOT CUDA_cublas_static_LIBRARY OR NOT CUDA_cublasLt_static_LIBRARY OR NOT CUDA_culibos_LIBRARY)
  message(FATAL_ERROR "SDPA_STATIC_CUBLAS=ON needs libcublas_static.a, libcublasLt_static.a and libculibos.a, "
                      "which the CUDA toolkit in ${CUDAToolkit_LIBRARY_DIR} does not have (a toolkit assembled from "
                      "pip wheels ships only the shared libraries): install the full CUDA ${CUDAToolkit_VERSION_MAJOR} "
                      "toolkit, or configure with -DSDPA_STATIC_CUBLAS=OFF")
endif()
target_compile_definitions(sdpa_cublas INTERFACE SDPA_STATIC_CUBLAS)
find_program(SDPA_NVPRUNE nvprune HINTS ${CUDAToolkit_BIN_DIR})
find_program(SDPA_CUOBJDUMP cuobjdump HINTS ${CUDAToolkit_BIN_DIR})
set(sdpa_cublas_archives ${CUDA_cublas_static_LIBRARY} ${CUDA_cublasLt_static_LIBRARY})
if(SDPA_NVPRUNE)
  # Semicolons would split the argument of the custom command.
  string(REPLACE ";" "," sdpa_prune_archs "${CMAKE_CUDA_ARCHITECTURES}")
  file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/pruned)
  set(sdpa_pruned "")
  foreach(archive IN LISTS sdpa_cublas_archives)
    get_filename_component(name ${archive} NAME)
    set(pruned ${PROJECT_BINARY_DIR}/pruned/${name})
    add_custom_command(OUTPUT ${pruned}
      COMMAND ${CMAKE_COMMAND} -DNVPRUNE=${SDPA_NVPRUNE} -DNVCC=${CMAKE_CUDA_COMPILER} -DCUOBJDUMP=${SDPA_CUOBJDUMP}
              -DINPUT=${archive}
              -DOUTPUT=${pruned} -DARCHITECTURES=${sdpa_prune_archs} -P ${CMAKE_CURRENT_LIST_DIR}/prune_cuda_library.cmake
      DEPENDS ${archive} ${CMAKE_CURRENT_LIST_DIR}/prune_cuda_library.cmake
      COMMENT "Pruning ${name} to the architectures ${CMAKE_CUDA_ARCHITECTURES} (nvprune)"
      VERBATIM)
    list(APPEND sdpa_pruned ${pruned})
  endforeach()
  add_custom_target(sdpa_pruned_cublas DEPENDS ${sdpa_pruned})
  add_dependencies(sdpa_cublas sdpa_pruned_cublas)
  set(sdpa_cublas_archives ${sdpa_pruned})
  set(SDPA_CUBLAS_LINKAGE "static, pruned with nvprune to ${CMAKE_CUDA_ARCHITECTURES}")
else()
  message(STATUS "nvprune not found: linking the static cuBLAS unpruned (machine code for every GPU it supports; "
                 "a much larger binary)")
  set(SDPA_CUBLAS_LINKAGE "static, not pruned (nvprune was not found at build time)")
endif()
# cuBLAS needs cuBLASLt, both need culibos and the CUDA runtime, in that link order.
target_link_libraries(sdpa_cublas INTERFACE ${sdpa_cublas_archives} CUDA::culibos CUDA::cudart_static
                                            ${CMAKE_DL_LIBS} Threads::Threads)
