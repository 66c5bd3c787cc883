# Run identities in checkpoints and the start-up decision about a used
# checkpoint directory (identity.c, fl_identity.h).
flotillainclude_HEADERS += common/fl_identity.h
libflotilla_la_SOURCES += common/identity.c
# Process set-up of the daemons: open-file limit, dying with flotilla-run.
flotillainclude_HEADERS += common/fl_proc.h
libflotilla_la_SOURCES += common/proc.c
# The command-line parser of the three programs (getopt_long, both
# spellings, "did you mean"; fl_args.h).
libflotilla_la_SOURCES += common/args.c common/fl_args.h
