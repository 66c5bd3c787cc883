# base/: the bottom layer.  Status codes (fl_status.h, with fl_strerror)
# and leveled logging (fl_log.h, log.c): what every other layer, kernels/
# included, reports errors with; the name lookup of every table of choices
# (fl_names.h, names.c).  base/ includes nothing else of Flotilla
# and needs only the C library and pthreads, so it can sit inside
# libflkernels, the kernels library that links no gRPC, HTTP or YAML.
flotillainclude_HEADERS += base/fl_status.h base/fl_log.h base/fl_names.h
libflkernels_la_SOURCES += base/log.c base/names.c
