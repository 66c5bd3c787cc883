# The flotilla Python package end to end (export, Job.run, load_trained)
# against this build's programs; its install is checked by
# test_plugin_install.sh.
python_tests = tests/integration/test_python.sh
dist_check_SCRIPTS += $(python_tests)
TESTS += $(python_tests)
EXTRA_DIST += tests/integration/test_python.py
