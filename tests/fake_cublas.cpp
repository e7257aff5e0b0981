// fake_cublas.cpp: a shared library that answers cuBLAS's version query, as 99.1.2, and has
// nothing else. cpu.report puts it first in LD_LIBRARY_PATH under cuBLAS's name, to see that
// `repro --version` opens the cuBLAS the dynamic loader's search finds, and names that file.
extern "C" int cublasGetProperty(int type, int* value) {
  static const int version[] = {99, 1, 2};  // MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
  if (type < 0 || type > 2) return 7;       // CUBLAS_STATUS_INVALID_VALUE
  *value = version[type];
  return 0;  // CUBLAS_STATUS_SUCCESS
}
