#!/usr/bin/env bash
# probe: what the device machine offers (tools, libraries, unified-memory attributes)
out=${OUT:-/tmp/out}; mkdir -p $out
export PATH=$PATH:/usr/local/cuda/bin
{
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,compute_cap --format=csv
uname -a; nproc; free -g | head -2
nvcc --version | tail -2
ls -la /usr/local/cuda/lib64/libcublas* /usr/local/cuda/targets/x86_64-linux/lib/libcublas* 2>&1 | head
find / -name 'libcublas_static.a' -o -name 'libcublasLt_static.a' 2>/dev/null | head
which nvprune compute-sanitizer ncu clang clang++ cuobjdump; compute-sanitizer --version | tail -1
ls /usr/include/CLI /usr/include/doctest /usr/include/nlohmann 2>&1 | head -5
cat > /tmp/attr.cu <<'E2'
#include <cstdio>
#include <cuda_runtime.h>
int main(){ int d=0; const char* names[]={"integrated","concurrentManagedAccess","pageableMemoryAccess","pageableMemoryAccessUsesHostPageTables","directManagedMemAccessFromHost","hostNativeAtomicSupported","managedMemory","memoryPoolsSupported"};
 cudaDeviceAttr a[]={cudaDevAttrIntegrated,cudaDevAttrConcurrentManagedAccess,cudaDevAttrPageableMemoryAccess,cudaDevAttrPageableMemoryAccessUsesHostPageTables,cudaDevAttrDirectManagedMemAccessFromHost,cudaDevAttrHostNativeAtomicSupported,cudaDevAttrManagedMemory,cudaDevAttrMemoryPoolsSupported};
 for(int i=0;i<8;i++){int v=-1; cudaDeviceGetAttribute(&v,a[i],d); printf("%s=%d\n",names[i],v);} size_t f,t; cudaMemGetInfo(&f,&t); printf("free=%zu total=%zu\n",f,t);}
E2
nvcc -o /tmp/attr /tmp/attr.cu && /tmp/attr
} 2>&1 | tee $out/probe.txt
