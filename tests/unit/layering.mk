# The layers and the library split: test_layering.sh fails on a
# forbidden #include arrow between directories; test_libflkernels.sh checks
# that libflkernels needs no RPC/HTTP/YAML library, through kernels_only, a
# program that links libflkernels and nothing else of ours.
check_PROGRAMS += tests/unit/kernels_only
tests_unit_kernels_only_SOURCES = tests/unit/kernels_only.c
tests_unit_kernels_only_CFLAGS = $(AM_CFLAGS)
tests_unit_kernels_only_LDADD = libflkernels.la -lm
layering_tests = tests/unit/test_layering.sh tests/unit/test_libflkernels.sh
dist_check_SCRIPTS += $(layering_tests)
TESTS += $(layering_tests)
# The function-length rule: no function in pserver/ over 80
# lines without a " * Long:" reason above it (today's exceptions listed in
# the script, with why).
dist_check_SCRIPTS += tests/unit/test_function_length.sh
TESTS += tests/unit/test_function_length.sh
# No comment, script or document points at an issue tracker by number.
dist_check_SCRIPTS += tests/unit/test_no_tracker_refs.sh
TESTS += tests/unit/test_no_tracker_refs.sh
