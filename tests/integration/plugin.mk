# Integration test: a model plugin builds against the installed tree
# (make install DESTDIR=..., pkg-config flotilla) and the installed
# flotilla-trainer trains it.
dist_check_SCRIPTS += tests/integration/test_plugin_install.sh
TESTS += tests/integration/test_plugin_install.sh
