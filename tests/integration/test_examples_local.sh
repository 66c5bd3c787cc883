#!/bin/sh
# The one-trainer example jobs of deploy/examples, through flotilla-run
# (see examples_lib.sh).
. "$FL_SRCDIR/tests/integration/examples_lib.sh"
for j in logreg_fmnist mlp_fmnist cnn_fmnist gpu_amp_cnn_fmnist; do run_example "$FL_SRCDIR/deploy/examples/$j.yaml"; done
finish_examples
