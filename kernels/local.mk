# kernels/: optimizers, LR schedules, gradient merge, AMP, casts (this
# fragment), layer ops (layers.mk) and the CUDA twins (cuda.mk), all
# compiled into libflkernels (Makefile.am), with base/ and nothing else.
# One public header per family serves CPU and CUDA.
#
# The CPU optimizer kernels build as a convenience library merged into
# libflkernels only to get per-file flags (automake has no other way):
# -fno-math-errno lets GCC turn sqrtf into sqrtps inside the vectorized
# loops (with errno semantics every sqrtf is a call guarded by a branch, and
# __attribute__((optimize)) does not change that in GCC 12).
flotillainclude_HEADERS += kernels/fl_optim.h
noinst_LTLIBRARIES += libflkoptim.la
libflkoptim_la_SOURCES = kernels/kern_internal.h kernels/optim.c kernels/lr.c kernels/clip.c \
	kernels/gradmerge.c kernels/amp.c kernels/cast.c
libflkoptim_la_CFLAGS = $(AM_CFLAGS) -fno-math-errno
libflkernels_la_LIBADD += libflkoptim.la
EXTRA_DIST += kernels/flkernels.pc.in
include $(srcdir)/kernels/layers.mk
include $(srcdir)/kernels/cuda.mk
