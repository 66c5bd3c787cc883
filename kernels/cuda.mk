# The CUDA twins of the kernels (nvcc through build-aux/nvcc-wrap), or, in a
# CPU-only tree, nocuda.c whose entry points return FL_ENOTSUP.
if HAVE_CUDA
libflotilla_la_SOURCES += kernels/device.cu
else
libflotilla_la_SOURCES += kernels/nocuda.c
endif
