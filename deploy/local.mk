# flotilla-run launcher and deployment files.
EXTRA_DIST += deploy/deps.sh deploy/build.sh deploy/run-tests.sh deploy/run-main-job.sh
