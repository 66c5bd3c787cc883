# Benchmarks: built with the tree, run by hand or by deploy/run-main-job.sh;
# they print `name: value unit` lines and are never pass/fail tests.
