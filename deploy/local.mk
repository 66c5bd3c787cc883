# deploy/: flotilla-run launcher, units, Docker files, example jobs.
EXTRA_DIST += deploy/deps.sh deploy/build.sh deploy/run-tests.sh deploy/run-main-job.sh
