# Layer ops (linear, activations, softmax-xent, conv2d, pooling, norms).
# CPU kernels here; their CUDA twins (kernels/layers.cu) come with the CUDA
# build, and a CPU-only tree gets layers_nocuda.c, whose twins say
# FL_ENOTSUP.
flotillainclude_HEADERS += kernels/fl_layers.h
libflkernels_la_SOURCES += kernels/layers.c kernels/conv.c kernels/norm.c \
	kernels/layers_internal.h
if !HAVE_CUDA
libflkernels_la_SOURCES += kernels/layers_nocuda.c
endif
