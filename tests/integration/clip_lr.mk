# Gradient clipping and the plateau schedule in the modes: collective with
# global-norm clipping against one local trainer of the global batch, PS
# sync clipping before the push, plateau lowering the rate and refused by
# PS sync.  Seconds.
dist_check_SCRIPTS += tests/integration/test_clip_lr.sh
TESTS += tests/integration/test_clip_lr.sh
EXTRA_DIST += tests/integration/runs_lib.sh
