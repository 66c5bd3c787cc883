/* device.cu - CUDA device discovery for the kernels library. */
#include <cuda_runtime.h>
#include "fl_optim.h"

extern "C" int fl_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}
