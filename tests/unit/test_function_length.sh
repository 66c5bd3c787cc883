#!/bin/sh
# The function-length rule, checked on pserver/: no function
# longer than LIMIT lines (signature to closing brace) unless the comment
# just above it says why, on a line starting " * Long:".  The lengths come
# from an awk scan that tracks braces outside comments, strings and
# character literals, at file level.
#
# Before the tree, the scan runs on a made-up file with one long function
# and one short one, so a scan that finds nothing fails too.
set -u
S=${FL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
LIMIT=80
# Functions over the limit today without a written reason, each with why it
# is still here.  Format: "file function".  None since core.c was split
# along membership, update modes (an ops table per mode), barriers and
# checkpoints, and main.c's main into the daemon's setup steps.
EXCEPTIONS='
'
tmp=$(mktemp -d /tmp/fl_funclen.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# lengths FILE...: "file:line name length reasoned" per top-level function.
lengths() {
  awk '
  FNR == 1 { depth = 0; incom = 0; head = ""; headline = 0; reason = 0; lastcom = 0 }
  {
    line = $0; out = ""; i = 1; n = length(line)
    if (line ~ /^[ \t]*\* Long:/ || line ~ /^\/\* Long:/) lastcom = FNR
    if (depth == 0 && line ~ /^[ \t]*#/) next
    while (i <= n) {
      c = substr(line, i, 1); c2 = substr(line, i, 2)
      if (incom) { if (c2 == "*/") { incom = 0; i += 2 } else i++; continue }
      if (c2 == "/*") { incom = 1; i += 2; continue }
      if (c2 == "//") break
      if (c == "\"" || c == "\047") {
        q = c; i++
        while (i <= n && substr(line, i, 1) != q) i += substr(line, i, 1) == "\\" ? 2 : 1
        i++; continue
      }
      if (c == "{") {
        if (depth == 0) {
          fn = ""
          if (head ~ /\(/ && head !~ /=[^(]*$/ && head !~ /^[ \t]*(struct|enum|union|typedef)/) {
            h = head; sub(/\(.*/, "", h); m = split(h, w, /[^A-Za-z0-9_]+/)
            for (k = m; k >= 1 && fn == ""; k--) if (w[k] != "") fn = w[k]
          }
          start = headline ? headline : FNR
          reason = lastcom && lastcom >= start - 40 && lastcom < start
        }
        depth++
      } else if (c == "}") {
        depth--
        if (depth == 0) {
          if (fn != "") printf "%s:%d %s %d %d\n", FILENAME, start, fn, FNR - start + 1, reason
          fn = ""; head = ""; headline = 0
        }
      } else if (c == ";" && depth == 0) { head = ""; headline = 0 }
      else if (depth == 0 && c !~ /[ \t]/ && headline == 0) headline = FNR
      if (depth == 0 && c != ";" && c != "}") head = head c
      i++
    }
    if (depth == 0) head = head " "
  }' "$@"
}

# over FILE... : the functions over LIMIT without a reason, minus EXCEPTIONS.
over() {
  lengths "$@" | while read -r loc name len reasoned; do
    [ "$len" -gt "$LIMIT" ] || continue
    [ "$reasoned" = 1 ] && continue
    f=${loc%%:*}
    f=${f#"$S"/}
    case "$EXCEPTIONS" in *"
$f $name
"*) continue ;; esac
    echo "$f:${loc#*:}: $name is $len lines (over $LIMIT, no \" * Long:\" reason above it)"
  done
}

fails=0
# 1. The scan on a made-up file.
{
  echo '/* a comment with a { brace */'
  echo 'static int short_one(int x) {'
  echo '  return x ? "}" [0] : 0;'
  echo '}'
  echo 'static const int table[] = {1, 2};'
  echo 'int long_one(int a,'
  echo '             int b) {'
  i=0
  while [ $i -lt 90 ]; do echo '  a += b; /* } */'; i=$((i + 1)); done
  echo '  return a;'
  echo '}'
  echo '/* Why it is long.'
  echo ' * Long: a table of cases that reads best in one place. */'
  echo 'int long_reasoned(void) {'
  i=0
  while [ $i -lt 90 ]; do echo '  ;'; i=$((i + 1)); done
  echo '}'
} > "$tmp/fake.c"
lengths "$tmp/fake.c" > "$tmp/fake.out"
got=$(awk '{ print $2, $3, $4 }' "$tmp/fake.out" | tr '\n' ';')
want="short_one 3 0;long_one 94 0;long_reasoned 92 1;"
[ "$got" = "$want" ] || { echo "FAIL: the scan of the made-up file says '$got', want '$want'"; fails=$((fails + 1)); }

# 2. The tree.
over "$S"/pserver/*.c > "$tmp/real.out"
if [ -s "$tmp/real.out" ]; then
  echo "FAIL: functions over $LIMIT lines without a written reason:"
  cat "$tmp/real.out"
  fails=$((fails + 1))
fi
n=$(lengths "$S"/pserver/*.c | wc -l)
[ "$n" -gt 50 ] || { echo "FAIL: only $n functions found in $S/pserver"; fails=$((fails + 1)); }
[ "$fails" -eq 0 ] || exit 1
echo "PASS: $n functions in pserver/, none over $LIMIT lines without a reason (exceptions listed: $(echo "$EXCEPTIONS" | grep -c .))"
