# kernels/: optimizers, gradient merge, AMP, casts and layer ops; *.c for
# the CPU, *.cu for CUDA, compiled into libflotilla.
flotillainclude_HEADERS += kernels/fl_optim.h
libflotilla_la_SOURCES += kernels/optim.c
if HAVE_CUDA
libflotilla_la_SOURCES += kernels/device.cu
else
libflotilla_la_SOURCES += kernels/nocuda.c
endif
