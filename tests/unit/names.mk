# The name lookup of base/ (Check): tables of names and of {name, value} rows.
check_PROGRAMS += tests/unit/test_names
TESTS += tests/unit/test_names
tests_unit_test_names_SOURCES = tests/unit/test_names.c
tests_unit_test_names_CFLAGS = $(FL_KERNEL_TEST_CFLAGS)
tests_unit_test_names_LDADD = $(FL_KERNEL_TEST_LDADD)
