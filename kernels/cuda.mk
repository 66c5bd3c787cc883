# The CUDA twins of the kernels (nvcc through build-aux/nvcc-wrap), or, in a
# CPU-only tree, nocuda.c whose entry points return FL_ENOTSUP.
# fl_device.h (device memory helpers for C and FFI callers) is installed in
# both trees so that programs using it build either way.
flotillainclude_HEADERS += kernels/fl_device.h
libflkernels_la_SOURCES += kernels/cuda_internal.h
if HAVE_CUDA
libflkernels_la_SOURCES += kernels/device.cu kernels/optim.cu kernels/layers.cu

# nvcc flags of this tree (NVCC_COMPILE in Makefile.am uses them; NVCCFLAGS
# stays the user's).  SASS for Hopper (sm_90) plus compute_90 PTX for newer
# GPUs; override with `make FL_NVCC_ARCH=...` for other devices.  No FMA
# contraction, so that every element is rounded exactly as the CPU twin
# rounds it (the kernels are memory-bound; FMA buys nothing there).
FL_NVCC_ARCH = -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
FL_NVCCFLAGS = $(FL_NVCC_ARCH) --fmad=false --Werror=all-warnings \
	--compiler-options=-Wall,-Wextra,-Werror

# The .cu.lo suffix rule tracks no header dependencies; list them.
FL_CUDA_DEPS = $(srcdir)/kernels/cuda_internal.h $(srcdir)/base/fl_status.h \
	$(srcdir)/base/fl_log.h config.h
kernels/device.lo: $(FL_CUDA_DEPS) $(srcdir)/kernels/fl_device.h $(srcdir)/kernels/fl_optim.h
kernels/optim.lo: $(FL_CUDA_DEPS) $(srcdir)/kernels/fl_optim.h
kernels/layers.lo: $(FL_CUDA_DEPS) $(srcdir)/kernels/fl_layers.h
else
libflkernels_la_SOURCES += kernels/nocuda.c
endif
