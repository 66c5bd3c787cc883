#!/bin/sh
# The PServer-mode example jobs of deploy/examples (sync, async, geo, CTR
# with sparse tables), as their headers say to run them (see
# examples_lib.sh).
. "$FL_SRCDIR/tests/integration/examples_lib.sh"
for j in ps_sync_mlp_fmnist ps_async_mlp_fmnist ps_geo_mlp_fmnist ctr_ps_synthetic; do
  run_example "$FL_SRCDIR/deploy/examples/$j.yaml"
done
finish_examples
