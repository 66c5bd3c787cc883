#!/bin/bash
# What an operator meets first, with the
# real programs on 127.0.0.1 (faults_lib.sh), bounded in time:
#   --version of all three programs names the build's features;
#   flotilla-trainer --dump-config - writes the resolved job and nothing
#     else to stdout, and exits without training; the dump loads again and
#     dumps to the same text (a fixed point);
#   a pserver's /metrics holds its own families only (no
#     flotilla_steps_total), /healthz answers 200 and /readyz 200 once it
#     serves; no libmicrohttpd warning about the order of its options;
#   a second pserver on a used address says "address in use", and a
#     trainer with another job's token is told so;
#   flotilla-run's progress line reaches 100% (its records come every
#     log_interval batches) above the final summary;
#   the Dockerfile's stages install what configure requires and what the
#     programs link (checked against this machine's Debian packages), on a
#     pinned base, without an in-tree build's configure output.
. "$FL_SRCDIR/tests/integration/faults_lib.sh"
RUN=$FL_BUILDDIR/flotilla-run

# ------------------------------------------------------------ --version
n=version
f0=$fails
for p in "$TRAINER" "$PSERVER" "$RUN"; do
  name=${p##*/}
  "$p" --version > "$tmp/$n.$name" 2>&1 || fail "$n: $name --version exit $?"
  has "$tmp/$n.$name" "^$name [0-9]" "$n: $name"
  for feat in CUDA NCCL TLS; do has "$tmp/$n.$name" "^  $feat: (yes|no)" "$n: $name"; done
done
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*

# ------------------------------------------------------- --dump-config
n=dump
f0=$fails
cat > "$tmp/$n.yaml" << EOF
model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [32, 16]}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 256, test_samples: 64, seed: 3}
optimizer: {name: lamb, lr: 0.002}
train: {epochs: 1, batch_size: 16, log_interval: 1}
strategy: {gradient_merge: true, gradient_merge_configs: {k_steps: 2}}
EOF
FLOTILLA_MODE=local timeout 30 "$TRAINER" --config "$tmp/$n.yaml" --dump-config - \
  > "$tmp/$n.1.yaml" 2> "$tmp/$n.err"
rc=$?
[ $rc = 0 ] || fail "$n: exit $rc"
head -1 "$tmp/$n.1.yaml" | grep -q '^# Flotilla job' || fail "$n: the dump does not start the output"
hasnt "$tmp/$n.1.yaml" '^\+|^\||\[Epoch' "$n: stdout"
hasnt "$tmp/$n.err" '\[Epoch|training ' "$n: trained"
FLOTILLA_MODE=local timeout 30 "$TRAINER" --config "$tmp/$n.1.yaml" --dump-config "$tmp/$n.2.yaml" \
  > /dev/null 2> "$tmp/$n.err2" || fail "$n: the dump does not load: $(cat "$tmp/$n.err2")"
# the first line names the file it was resolved from
if ! diff <(tail -n +2 "$tmp/$n.1.yaml") <(tail -n +2 "$tmp/$n.2.yaml") > "$tmp/$n.diff"; then
  fail "$n: dump -> load -> dump is not a fixed point"
  cat "$tmp/$n.diff"
fi
has "$tmp/$n.1.yaml" '^  lamb: true' "$n: the resolved strategy"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*

# --------------------------------------- /metrics, /healthz, /readyz
n=http
f0=$fails
cat > "$tmp/$n.yaml" << EOF
model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [16]}
optimizer: {name: sgd, lr: 0.05}
cluster: {mode: ps}
EOF
mport=$(free_port)
PSLIST="127.0.0.1:$(free_port)"
spawn PS0 "$tmp/$n.ps0.log" FLOTILLA_MODE=ps FLOTILLA_ROLE=PSERVER FLOTILLA_PSERVERS_IP_PORT_LIST="$PSLIST" \
  FLOTILLA_PSERVER_ID=0 FLOTILLA_TRAINERS_NUM=1 -- "$PSERVER" --config "$tmp/$n.yaml" \
  --metrics_addr=127.0.0.1:$mport
wait_log "$tmp/$n.ps0.log" '\] serving ' 20 || fail "$n: pserver does not serve"
python3 - "$mport" > "$tmp/$n.scrape" 2>&1 << 'PY' || fail "$n: $(cat "$tmp/$n.scrape")"
import sys, urllib.request, urllib.error
port = int(sys.argv[1])
def get(path):
    try:
        r = urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5)
        return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
st, text = get("/metrics")
assert st == 200, st
assert 'flotilla_info{role="pserver",rank="0",mode="ps-sync"} 1' in text, text
assert "flotilla_live_trainers" in text, text
for other in ("flotilla_steps_total", "flotilla_loss ", "flotilla_push_seconds"):
    assert other not in text, other
assert get("/healthz")[0] == 200
assert get("/readyz")[0] == 200
PY
hasnt "$tmp/$n.ps0.log" 'MHD_OPTION_EXTERNAL_LOGGER' "$n: pserver"
kill -TERM "$PS0"
wait_exit "$PS0" 20
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*

# ------------------- a second job on the same address
n=inuse
f0=$fails
cat > "$tmp/$n.yaml" << EOF
model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [16]}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 256, test_samples: 64, seed: 3}
optimizer: {name: sgd, lr: 0.05}
train: {epochs: 1, batch_size: 16, log_interval: 100}
cluster: {mode: ps, rpc_timeout_s: 5, heartbeat_timeout_s: 5}
EOF
PSLIST="127.0.0.1:$(free_port)"
spawn PS0 "$tmp/$n.ps0.log" FLOTILLA_MODE=ps FLOTILLA_ROLE=PSERVER FLOTILLA_PSERVERS_IP_PORT_LIST="$PSLIST" \
  FLOTILLA_PSERVER_ID=0 FLOTILLA_TRAINERS_NUM=1 FLOTILLA_TOKEN=first-job -- "$PSERVER" --config "$tmp/$n.yaml"
wait_log "$tmp/$n.ps0.log" '\] serving ' 20 || fail "$n: first pserver does not serve"
spawn PS1 "$tmp/$n.second.log" FLOTILLA_MODE=ps FLOTILLA_ROLE=PSERVER FLOTILLA_PSERVERS_IP_PORT_LIST="$PSLIST" \
  FLOTILLA_PSERVER_ID=0 FLOTILLA_TRAINERS_NUM=1 FLOTILLA_TOKEN=second-job -- "$PSERVER" --config "$tmp/$n.yaml"
wait_exit "$PS1" 20
[ "$rc" = 1 ] || fail "$n: second pserver exit $rc (want 1)"
has "$tmp/$n.second.log" "cannot serve $PSLIST: address in use" "$n: second pserver"
spawn TR0 "$tmp/$n.tr0.log" FLOTILLA_MODE=ps FLOTILLA_ROLE=TRAINER FLOTILLA_PSERVERS_IP_PORT_LIST="$PSLIST" \
  FLOTILLA_TRAINER_ID=0 FLOTILLA_TRAINERS_NUM=1 FLOTILLA_TOKEN=second-job -- "$TRAINER" --config "$tmp/$n.yaml"
wait_exit "$TR0" 30
[ "$rc" = 1 ] || fail "$n: second job's trainer exit $rc (want 1)"
has "$tmp/$n.tr0.log" "pserver 0 \($PSLIST\) refused trainer 0's token .*another job's pserver at this address" "$n: trainer"
kill -TERM "$PS0"
wait_exit "$PS0" 20
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*

# --------------------------------------------------- the Dockerfile's packages
# No Docker engine here: what can be checked without one is that each
# stage installs what the tree needs (the image's configure stopped for
# want of onnx.proto, libonnx-dev), that the base images are pinned and
# that an in-tree build's configure output stays out of the build stage.
# build: the owner of every file configure.ac requires (pkg-config modules,
# onnx.proto, protoc-c); runtime: the owner of every library the installed
# programs and libraries link.  A package counts as installed when listed,
# when a listed package depends on it, or when Debian's base image holds it
# (priority required).  dpkg and apt-cache read this machine's Debian.
n=dockerfile
f0=$fails
df=$FL_SRCDIR/deploy/Dockerfile
if command -v dpkg-query > /dev/null && command -v apt-cache > /dev/null; then
  # the packages after `apt-get install` in stage $1 (build or runtime)
  stage_pkgs() {
    awk -v st="$1" '/^FROM / { cur = ($NF == st) } cur' "$df" |
      sed -n '/apt-get install/,/rm -rf/p' | tr ' \\' '\n\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' |
      grep -vE '^(apt-get|install|rm|no-install-recommends|var|lib|apt|lists)$' | sort -u
  }
  # with_deps PKG...: the packages and their direct dependencies (one call)
  with_deps() {
    { printf '%s\n' "$@"; apt-cache depends "$@" 2> /dev/null | sed -n 's/^ *|\{0,1\}Depends: //p'; } |
      sort -u
  }
  # covered PKG FILE: PKG is in FILE (with_deps) or in the base image
  covered() {
    grep -qx -- "$1" "$2" || [ "$(dpkg-query -W -f='${Priority}' "$1" 2> /dev/null)" = required ]
  }
  owner() { dpkg -S "$1" 2> /dev/null | head -1 | cut -d: -f1; }
  mapfile -t build < <(stage_pkgs build)
  mapfile -t runtime < <(stage_pkgs runtime)
  [ ${#build[@]} -gt 5 ] && [ ${#runtime[@]} -gt 5 ] ||
    fail "$n: cannot read the package lists (build: ${build[*]}; runtime: ${runtime[*]})"
  with_deps "${build[@]}" > "$tmp/$n.build"
  with_deps "${runtime[@]}" > "$tmp/$n.runtime"
  need=()
  for m in $(sed -n 's/^PKG_CHECK_MODULES(\[[A-Z]*\], \[\([a-z0-9_.+-]*\) .*/\1/p' "$FL_SRCDIR/configure.ac"); do
    pc=$(pkg-config --variable=pcfiledir "$m" 2> /dev/null)/$m.pc
    need+=("$m:$(owner "$(readlink -f "$pc")")")
  done
  need+=("onnx.proto:$(owner /usr/include/onnx/onnx.proto)")
  need+=("protoc-c:$(owner "$(readlink -f "$(command -v protoc-c)")")")
  for x in "${need[@]}"; do
    [ -n "${x#*:}" ] || { fail "$n: no Debian package here owns ${x%%:*}"; continue; }
    covered "${x#*:}" "$tmp/$n.build" || fail "$n: the build stage lacks ${x#*:} (for ${x%%:*})"
  done
  for b in flotilla-trainer flotilla-pserver flotilla-run libflotilla.so libflkernels.so; do
    objdump -p "$FL_BUILDDIR/.libs/$b" 2> /dev/null | awk '/NEEDED/ { print $2 }'
  done | sort -u > "$tmp/$n.needed"
  [ -s "$tmp/$n.needed" ] || fail "$n: no NEEDED entries read from $FL_BUILDDIR/.libs"
  san=$(sed -n 's/^SAN_FLAGS = \(-fsanitize.*\)/\1/p' "$FL_BUILDDIR/Makefile" 2> /dev/null)
  while read -r lib; do
    case $lib in libflotilla.* | libflkernels.*) continue ;; esac
    real=$(readlink -f "$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')")
    # a CUDA build links NVIDIA's libraries (not in Debian's archive); the
    # image builds --without-cuda, so they are not the image's to carry
    case $lib:$real in libcuda* | libcublas* | libcudnn* | libnccl* | *:/usr/local/cuda*) continue ;; esac
    # likewise a --enable-sanitizers tree links the sanitizers' runtimes
    # (and libatomic for their instrumented atomics); the image has none
    if [ -n "$san" ]; then
      case $lib in libasan.* | libubsan.* | liblsan.* | libtsan.* | libatomic.*) continue ;; esac
    fi
    pkg=$(owner "$real")
    # merged /usr: dpkg may know the file under /lib or /usr/lib only
    [ -n "$pkg" ] || pkg=$(owner "/lib/${real#/usr/lib/}")
    [ -n "$pkg" ] || pkg=$(owner "/usr/lib/${real#/lib/}")
    [ -n "$pkg" ] || { fail "$n: no Debian package here owns $lib"; continue; }
    covered "$pkg" "$tmp/$n.runtime" || fail "$n: the runtime stage lacks $pkg (for $lib)"
  done < "$tmp/$n.needed"
  has "$df" '^ARG DEBIAN_VERSION=[0-9]+\.[0-9]+$' "$n: Dockerfile (base image pinned to a point release)"
  [ "$(grep -c '^FROM debian:\${DEBIAN_VERSION}' "$df")" = 2 ] || fail "$n: a stage not on the pinned base"
  has "$FL_SRCDIR/deploy/Dockerfile.dockerignore" '^config\.status$' "$n: Dockerfile.dockerignore"
  has "$df" 'rm -f config.status' "$n: Dockerfile (configure output removed before configure)"
  ran=$((ran + 1))
  [ $fails = "$f0" ] && ok "$n (build: ${#need[@]} requirements, runtime: $(wc -l < "$tmp/$n.needed") libraries)" || show "$df"
else
  echo "SKIP: $n (no dpkg-query / apt-cache: not Debian)"
fi

# ------------------------------------------- the progress line ends whole
n=progress
f0=$fails
cat > "$tmp/$n.yaml" << EOF
model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [16]}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 512, test_samples: 64, seed: 3}
optimizer: {name: sgd, lr: 0.05}
train: {epochs: 2, batch_size: 16, log_interval: 7}
EOF
# 32 batches an epoch, logged every 7: the last line logged is batch 28
timeout 120 "$RUN" --log_dir "$tmp/$n" "$tmp/$n.yaml" > "$tmp/$n.out" 2>&1
rc=$?
[ $rc = 0 ] || fail "$n: flotilla-run exit $rc"
has "$tmp/$n.out" '^\[flotilla-run\] epoch 2/2  step 32/32 \(100%\)' "$n"
tail -n 1 "$tmp/$n.out" | grep -q 'job done in' || fail "$n: the summary is not the last line"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*

finish
