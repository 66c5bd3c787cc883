#!/bin/sh
# deploy/docker-compose.yml is a valid Compose file (`docker-compose
# config` needs no Docker engine): 2 pservers and 2 trainers with their
# FLOTILLA_* environment, a checkpoint volume, the build from
# deploy/Dockerfile, and a job file that the image ships.  It refuses to
# start without FLOTILLA_TOKEN.  SKIP (77) without docker-compose.
set -u
command -v docker-compose > /dev/null 2>&1 ||
  { echo "SKIP: docker-compose not found (apt-get install docker-compose)"; exit 77; }
tmp=$(mktemp -d /tmp/fl_compose.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
compose="$FL_SRCDIR/deploy/docker-compose.yml"

FLOTILLA_TOKEN=test-token timeout 120 docker-compose -f "$compose" config > "$tmp/resolved" 2> "$tmp/err" ||
  { fail "docker-compose config:"; cat "$tmp/err"; }
services=$(FLOTILLA_TOKEN=t timeout 120 docker-compose -f "$compose" config --services 2> /dev/null | sort | tr '\n' ' ')
[ "$services" = "pserver0 pserver1 trainer0 trainer1 " ] || fail "services: $services"
FLOTILLA_TOKEN=t timeout 120 docker-compose -f "$compose" config --volumes 2> /dev/null | grep -qx checkpoints ||
  fail "no checkpoints volume"
for want in "FLOTILLA_PSERVER_ID: '1'" "FLOTILLA_TRAINER_ID: '1'" "FLOTILLA_ROLE: PSERVER" \
  "FLOTILLA_PSERVERS_IP_PORT_LIST: pserver0:6170,pserver1:6170" "FLOTILLA_TOKEN: test-token" \
  "dockerfile: deploy/Dockerfile" "checkpoints:/var/lib/flotilla"; do
  grep -q -- "$want" "$tmp/resolved" || fail "resolved config lacks '$want'"
done
# The job file the services name is one of the examples the image copies.
for job in $(grep -o '/etc/flotilla/examples/[a-z_]*\.yaml' "$tmp/resolved" | sort -u); do
  [ -f "$FL_SRCDIR/deploy/examples/$(basename "$job")" ] || fail "$job is not in deploy/examples"
done
[ -f "$FL_SRCDIR/deploy/Dockerfile" ] || fail "deploy/Dockerfile missing"
# Without the shared secret it refuses.
env -u FLOTILLA_TOKEN timeout 120 docker-compose -f "$compose" config > "$tmp/o" 2>&1 &&
  fail "config accepted a missing FLOTILLA_TOKEN"
grep -q "FLOTILLA_TOKEN" "$tmp/o" || fail "no word about FLOTILLA_TOKEN"
# And it does reject a broken file (so the checks above mean something).
sed 's/^    hostname: pserver0/    hostnme: pserver0/' "$compose" > "$tmp/broken.yml"
FLOTILLA_TOKEN=t timeout 120 docker-compose -f "$tmp/broken.yml" config > "$tmp/o" 2>&1 &&
  fail "a broken file passed"
grep -q "hostnme" "$tmp/o" || fail "the broken key was not named"
[ $fails -eq 0 ] || exit 1
echo "PASS: docker-compose.yml"
