/* nocuda.c - the CUDA entry points of a CPU-only build: each says FL_ENOTSUP. */
#include <config.h>
#include "fl_optim.h"
int fl_cuda_device_count(void) { return 0; }
