# Observability and service integration, linked into libflotilla:
# Prometheus registry + /metrics endpoint (libmicrohttpd), Chrome-tracing
# timeline writer, sd_notify for Type=notify systemd units (libsystemd),
# and fl_obs, the three calls a daemon's main() makes.
flotillainclude_HEADERS += common/fl_metrics.h common/fl_timeline.h common/fl_notify.h \
	common/fl_obs.h
libflotilla_la_SOURCES += common/metrics.c common/metrics_http.c common/timeline.c \
	common/notify.c common/obs.c
libflotilla_la_CFLAGS += $(MHD_CFLAGS) $(SYSTEMD_CFLAGS)
libflotilla_la_LIBADD += $(MHD_LIBS) $(SYSTEMD_LIBS)
