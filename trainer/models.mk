# Models: the front (model.c) over the graph engine's presets and imported
# ONNX models, and plugins.
libfltrainer_la_SOURCES += trainer/model.c trainer/model_plugin.c trainer/model_internal.h \
	trainer/model_presets.c trainer/model_export.c

# The example model plugin: a loadable module (never installed) that the
# tests load and that shows a plugin's whole shape.
noinst_LTLIBRARIES += trainer/plugin_example.la
trainer_plugin_example_la_SOURCES = trainer/plugin_example.c
trainer_plugin_example_la_CFLAGS = $(FL_TRAINER_CFLAGS)
trainer_plugin_example_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shared -rpath /nowhere
trainer_plugin_example_la_LIBADD = $(FL_LIBS)
