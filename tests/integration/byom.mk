# Integration tests of "bring your own model": a C model plugin builds
# against the installed tree (make install DESTDIR=..., pkg-config flotilla)
# and the installed flotilla-trainer trains it; the ONNX examples go from a
# PyTorch module through .npy data, a 2-trainer run and ONNX export back
# into PyTorch with the same test accuracy; float targets (mse, bce) train.
byom_tests = tests/integration/test_plugin_install.sh tests/integration/test_examples_onnx.sh
dist_check_SCRIPTS += $(byom_tests)
TESTS += $(byom_tests)
EXTRA_DIST += tests/integration/float_targets.py
