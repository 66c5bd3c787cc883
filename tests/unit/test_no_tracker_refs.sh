#!/bin/sh
# Code and build files point at no issue tracker: a comment that says
# "issue 14" refers to something outside the repository.  Scans the
# sources, scripts, build files and examples for "issue N" / "#N"-style
# references; the docs may tell history in words, not numbers either.
#
# First the scan runs on a made-up file that holds one reference, so a
# scan that finds nothing fails too.
set -u
S=${FL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PATTERN='[Ii]ssues? ?#?[0-9]+'
tmp=$(mktemp -d /tmp/fl_refs.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
printf '/* fixed in issue 7 */\n' > "$tmp/made_up.c"
if ! grep -qE "$PATTERN" "$tmp/made_up.c"; then
  echo "FAIL: the scan misses a reference in a made-up file"
  exit 1
fi
hits=$(cd "$S" && grep -rnE "$PATTERN" \
  --include='*.c' --include='*.h' --include='*.cu' --include='*.py' --include='*.sh' \
  --include='*.mk' --include='*.am' --include='*.ac' --include='*.proto' --include='*.md' \
  --include='*.yaml' --include='*.in' \
  common base kernels trainer pserver deploy proto python tests docs README.md \
  Makefile.am configure.ac 2>/dev/null | grep -v '^tests/unit/test_no_tracker_refs.sh:')
if [ -n "$hits" ]; then
  echo "FAIL: references to an issue tracker that is not in the repository:"
  echo "$hits"
  exit 1
fi
echo "PASS: no issue-tracker references"
