#!/bin/sh
# The layering rules of docs/DESIGN.md section 7, checked on the sources:
# every `#include "name"` in base/, kernels/, common/, pserver/, trainer/
# and deploy/ is resolved to the directory that holds that header (the
# includer's own directory first, then by file name anywhere in the tree,
# as the -I paths do), and the arrow from the includer's layer to the
# header's layer must be an allowed one:
#   base        -> (nothing of ours)
#   kernels     -> base
#   common      -> base kernels proto            (common knows no daemon)
#   pserver     -> base kernels common proto     (never trainer/)
#   trainer     -> base kernels common proto collective graph onnx contract
#                                                (never pserver/)
#   collective  -> base kernels common proto     (trainer/collective/: never
#                                                 pserver/, nor trainer/)
#   graph       -> base kernels common contract  (trainer/graph/: the op-graph
#                                                 engine knows no loop, model kind or file format)
#   onnx        -> base kernels common proto graph contract   (trainer/onnx/)
# where "contract" is trainer/fl_model.h alone: the model contract the
# engine implements (as a plugin does), not the training loop.
#   deploy      -> base kernels common proto
# config.h (configure's) is allowed everywhere; *.pb-c.h are proto/.
# tests/ may include anything and is not scanned.
#
# Before the tree, the checker runs on a small made-up tree with known
# forbidden arrows, so a checker that finds nothing fails too.
set -u
S=${FL_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
tmp=$(mktemp -d /tmp/fl_layering.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# Arrows that exist today and break a rule, each with its reason.  Format:
# "includer-path header-name".  Empty now; add a line only with a comment
# saying why it is there and what removes it.
EXCEPTIONS=''

# layer_of DIR: the layer a directory (relative to the root) belongs to.
layer_of() {
  case $1 in
  base | base/*) echo base ;;
  kernels | kernels/*) echo kernels ;;
  common | common/*) echo common ;;
  proto | proto/*) echo proto ;;
  pserver | pserver/*) echo pserver ;;
  trainer/collective | trainer/collective/*) echo collective ;;
  trainer/graph | trainer/graph/*) echo graph ;;
  trainer/onnx | trainer/onnx/*) echo onnx ;;
  trainer | trainer/*) echo trainer ;;
  deploy | deploy/*) echo deploy ;;
  tests | tests/*) echo tests ;;
  *) echo other ;;
  esac
}

# allowed FROM TO: exit 0 when layer FROM may include a header of layer TO.
allowed() {
  [ "$1" = "$2" ] && return 0
  case "$1:$2" in
  kernels:base) return 0 ;;
  common:base | common:kernels | common:proto) return 0 ;;
  proto:base | proto:kernels) return 0 ;;
  pserver:base | pserver:kernels | pserver:common | pserver:proto) return 0 ;;
  trainer:base | trainer:kernels | trainer:common | trainer:proto | trainer:collective) return 0 ;;
  trainer:graph | trainer:onnx | trainer:contract) return 0 ;;
  graph:base | graph:kernels | graph:common | graph:contract) return 0 ;;
  onnx:base | onnx:kernels | onnx:common | onnx:proto | onnx:graph | onnx:contract) return 0 ;;
  collective:base | collective:kernels | collective:common | collective:proto) return 0 ;;
  deploy:base | deploy:kernels | deploy:common | deploy:proto) return 0 ;;
  esac
  return 1
}

# check ROOT OUT: write one line per forbidden arrow under ROOT to OUT;
# exit status 0 when there is none.
check() {
  root=$1 out=$2
  : > "$out"
  (cd "$root" && find base kernels common proto pserver trainer deploy tests \
    -name '*.h' 2> /dev/null) | awk -F/ '{ d = $0; sub("/[^/]*$", "", d); print $NF, d }' \
    > "$tmp/map"
  (cd "$root" && find base kernels common pserver trainer deploy \
    \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) 2> /dev/null) | sort > "$tmp/files"
  while read -r f; do
    dir=${f%/*}
    from=$(layer_of "$dir")
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$root/$f" |
      sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1 \2/' > "$tmp/incs"
    while read -r line name; do
      base=${name##*/}
      case $base in
      config.h) continue ;;
      *.pb-c.h) tdir=proto ;;
      *)
        if [ -f "$root/$dir/$name" ]; then
          tdir=$dir
        else
          tdir=$(awk -v n="$base" '$1 == n { print $2; exit }' "$tmp/map")
        fi
        ;;
      esac
      if [ -z "$tdir" ]; then
        echo "$f:$line: #include \"$name\": no such header in the tree" >> "$out"
        continue
      fi
      to=$(layer_of "$tdir")
      [ "$tdir/$base" = trainer/fl_model.h ] && to=contract
      allowed "$from" "$to" && continue
      case "
$EXCEPTIONS
" in
      *"
$f $base
"*) continue ;;
      esac
      echo "$f:$line: #include \"$name\" ($tdir/): $from/ may not include $to/" >> "$out"
    done < "$tmp/incs"
  done < "$tmp/files"
  [ ! -s "$out" ]
}

fails=0

# 1. The checker on a made-up tree: three forbidden arrows, the rest allowed.
fake=$tmp/fake
mkdir -p "$fake/base" "$fake/kernels" "$fake/common" "$fake/pserver" "$fake/trainer/collective"
printf '#include "fl_b.h"\n' > "$fake/base/fl_b.h"
printf '#include "fl_b.h"\n#include "fl_c.h"\n' > "$fake/kernels/k.c"
printf '#include "fl_k.h"\n' > "$fake/common/fl_c.h"
printf '#include "fl_b.h"\n' > "$fake/kernels/fl_k.h"
printf '#include "fl_p.h"\n' > "$fake/trainer/collective/x.c"
printf '#include "fl_k.h"\n' > "$fake/pserver/fl_p.h"
mkdir -p "$fake/trainer/graph"
printf '#include "fl_model.h"\n#include "fl_t.h"\n' > "$fake/trainer/graph/g.c"
printf '#include "fl_b.h"\n' > "$fake/trainer/fl_model.h"
printf '#include "fl_b.h"\n' > "$fake/trainer/fl_t.h"
if check "$fake" "$tmp/fake.out"; then
  echo "FAIL: the checker found no forbidden arrow in a tree that has three"
  fails=$((fails + 1))
else
  grep -q '^kernels/k.c:2: .*kernels/ may not include common/' "$tmp/fake.out" &&
    grep -q '^trainer/collective/x.c:1: .*collective/ may not include pserver/' "$tmp/fake.out" &&
    grep -q '^trainer/graph/g.c:2: .*graph/ may not include trainer/' "$tmp/fake.out" &&
    [ "$(wc -l < "$tmp/fake.out")" -eq 3 ] || {
    echo "FAIL: the checker's findings on the made-up tree are wrong:"
    cat "$tmp/fake.out"
    fails=$((fails + 1))
  }
fi

# 2. The real tree.
if ! check "$S" "$tmp/real.out"; then
  echo "FAIL: forbidden include arrows (see docs/DESIGN.md section 7):"
  cat "$tmp/real.out"
  fails=$((fails + 1))
fi
n=$(wc -l < "$tmp/files")
[ "$n" -gt 50 ] || { echo "FAIL: only $n source files found under $S"; fails=$((fails + 1)); }

[ "$fails" -eq 0 ] || exit 1
echo "PASS: $n source files, every include arrow allowed"
