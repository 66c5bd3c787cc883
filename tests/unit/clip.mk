# Gradient clipping kernels (kernels/clip.c) against torch's clip_grad_norm_
# and clip_grad_value_ (tests/fixtures/clip, written by gen_clip.py there).
check_PROGRAMS += tests/unit/test_clip
TESTS += tests/unit/test_clip
tests_unit_test_clip_SOURCES = tests/unit/test_clip.c
tests_unit_test_clip_CFLAGS = $(AM_CFLAGS) $(FL_DEP_CFLAGS) $(CHECK_CFLAGS)
tests_unit_test_clip_LDADD = $(FL_LIBS) $(CHECK_LIBS) -lm
EXTRA_DIST += tests/fixtures/clip
