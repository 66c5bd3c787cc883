# kernels/: optimizers, gradient merge, AMP, casts (this fragment), layer
# ops (layers.mk) and the CUDA twins (cuda.mk), all compiled into
# libflotilla.  One public header per family serves CPU and CUDA.
flotillainclude_HEADERS += kernels/fl_optim.h
libflotilla_la_SOURCES += kernels/optim.c
include $(srcdir)/kernels/layers.mk
include $(srcdir)/kernels/cuda.mk
