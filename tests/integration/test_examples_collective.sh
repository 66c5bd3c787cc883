#!/bin/sh
# The collective-mode example jobs of deploy/examples, as their headers say
# to run them (see examples_lib.sh).
. "$FL_SRCDIR/tests/integration/examples_lib.sh"
for j in collective_mlp_fmnist gradient_merge_mlp_fmnist lars_mlp_fmnist lamb_mlp_fmnist \
  amp_mlp_fmnist recompute_cnn_fmnist hierarchical_mlp_fmnist; do
  run_example "$FL_SRCDIR/deploy/examples/$j.yaml"
done
finish_examples
