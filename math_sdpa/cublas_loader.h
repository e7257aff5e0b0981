// cublas_loader.h: where the cuBLAS in use came from.
//
// Linked dynamically (the default), cuBLAS is loaded when the harness first calls it, not when a
// program starts (cublas_loader.cpp): loading libcublas and libcublasLt takes 0.1-0.3 s a
// process and maps the NVIDIA driver's library, which `repro --help`, a refused command line and
// the parents of the supervisor, the sweep, the reports and the triage never need. Linked
// statically (SDPA_STATIC_CUBLAS), it is part of the executable.
#pragma once

#include <string>

namespace sdpa {

// The file cuBLAS was loaded from (loading it if it is not yet): the shared library the dynamic
// loader chose (LD_LIBRARY_PATH, this binary's run path, the system's), or the executable itself
// when linked statically; "unknown" where it cannot be loaded.
std::string cublas_library_file();

// Why cuBLAS could not be loaded ("libcublas.so.13: cannot open shared object file: ..."), or ""
// when it was (or is linked statically).
std::string cublas_load_error();

}  // namespace sdpa
