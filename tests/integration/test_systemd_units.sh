#!/bin/sh
# The systemd template units in deploy/systemd pass `systemd-analyze
# verify` (unit syntax, known directives, executables that exist) without
# a single warning, and their hardening keeps `systemd-analyze security`
# exposure under 3.0.  The units are instantiated with the build tree's
# programs as @bindir@.  SKIP (77) without systemd-analyze or before the
# daemons are built.
set -u
command -v systemd-analyze > /dev/null 2>&1 ||
  { echo "SKIP: systemd-analyze not found (apt-get install systemd)"; exit 77; }
for b in flotilla-pserver flotilla-trainer; do
  [ -x "$FL_BUILDDIR/$b" ] || { echo "SKIP: $b is not built yet"; exit 77; }
done
tmp=$(mktemp -d /tmp/fl_units.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
for u in pserver trainer; do
  sed "s|@bindir@|$FL_BUILDDIR|g" "$FL_SRCDIR/deploy/systemd/flotilla-$u@.service.in" \
    > "$tmp/flotilla-$u@.service"
done

# Does verify work here at all?  A unit with a typo must be reported.
sed 's/^ProtectSystem=strict/ProtectSystm=strict/' "$tmp/flotilla-pserver@.service" \
  > "$tmp/broken@.service"
(cd "$tmp" && systemd-analyze verify --man=no ./broken@.service) > "$tmp/broken.out" 2>&1
if ! grep -q "ProtectSystm" "$tmp/broken.out"; then
  echo "SKIP: systemd-analyze verify does not work in this container:"
  cat "$tmp/broken.out"
  exit 77
fi
rm "$tmp/broken@.service"

for u in pserver trainer; do
  (cd "$tmp" && systemd-analyze verify --man=no "./flotilla-$u@.service" "./flotilla-$u@x.service") \
    > "$tmp/$u.out" 2>&1 || fail "verify flotilla-$u@.service failed"
  if [ -s "$tmp/$u.out" ]; then
    fail "verify flotilla-$u@.service is not clean:"
    cat "$tmp/$u.out"
  fi
  (cd "$tmp" && systemd-analyze security --offline=yes --threshold=30 "./flotilla-$u@x.service") \
    > "$tmp/$u.sec" 2>&1 || { fail "flotilla-$u@.service exposure above 3.0:"; tail -n 3 "$tmp/$u.sec"; }
  grep "Overall exposure" "$tmp/$u.sec"
  for key in Type=notify EnvironmentFile=/etc/flotilla/%i.env Restart=on-failure \
    NoNewPrivileges=yes ProtectSystem=strict PrivateTmp=yes ReadWritePaths=; do
    grep -q "^$key" "$tmp/flotilla-$u@.service" || fail "flotilla-$u@.service lacks $key"
  done
done
[ $fails -eq 0 ] || exit 1
echo "PASS: systemd units"
