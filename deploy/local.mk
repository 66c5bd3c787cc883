# flotilla-run launcher and deployment files.
EXTRA_DIST += deploy/deps.sh deploy/build.sh deploy/run-tests.sh deploy/run-main-job.sh

# flotilla-run: the launcher (libuv supervisor, job layout, progress).
bin_PROGRAMS += flotilla-run
flotilla_run_SOURCES = deploy/run.c deploy/run_plan.c deploy/run_progress.c deploy/run_failure.c \
	deploy/run_elastic.c \
	deploy/run_internal.h
flotilla_run_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) -I$(top_srcdir)/deploy
flotilla_run_LDADD = $(FL_LIBS) $(UV_LIBS) -lm

# systemd template units, with the install's bindir written in.
systemdunitdir = $(prefix)/lib/systemd/system
systemdunit_DATA = deploy/systemd/flotilla-pserver@.service deploy/systemd/flotilla-trainer@.service
sysusersdir = $(prefix)/lib/sysusers.d
sysusers_DATA = deploy/systemd/sysusers.d/flotilla.conf
flotilla_unit_edit = $(SED) -e 's|@bindir[@]|$(bindir)|g'
deploy/systemd/flotilla-pserver@.service: $(srcdir)/deploy/systemd/flotilla-pserver@.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) deploy/systemd && \
	$(flotilla_unit_edit) $(srcdir)/deploy/systemd/flotilla-pserver@.service.in > $@.tmp && mv $@.tmp $@
deploy/systemd/flotilla-trainer@.service: $(srcdir)/deploy/systemd/flotilla-trainer@.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) deploy/systemd && \
	$(flotilla_unit_edit) $(srcdir)/deploy/systemd/flotilla-trainer@.service.in > $@.tmp && mv $@.tmp $@
CLEANFILES += $(systemdunit_DATA)
EXTRA_DIST += deploy/systemd/flotilla-pserver@.service.in deploy/systemd/flotilla-trainer@.service.in \
	deploy/systemd/pserver.env.example deploy/systemd/trainer.env.example \
	deploy/systemd/sysusers.d/flotilla.conf \
	deploy/Dockerfile deploy/Dockerfile.dockerignore deploy/docker-compose.yml deploy/examples \
	deploy/README.md
include $(srcdir)/deploy/gpu-bundle.mk
