# elastic_lib.sh - the set-up the elastic collective tests share (sourced
# by test_elastic.sh, test_elastic_churn.sh and test_elastic_nproc.sh):
# SKIP (77) without Fashion-MNIST or etcd, a temporary directory $tmp
# (NAME in its name) to work in, the nodes' process groups ($groups)
# killed and etcd stopped at exit, fail(), elastic_data (the jobs' data
# section), node, acc and world_change, and one etcd member ($ETCD_EP);
# etcd_lib.sh's wait_line.
# elastic_setup NAME
set -u
RUN=$FL_BUILDDIR/flotilla-run
FM=/usr/share/datasets/fashion-mnist
# killpg SIG PGID: signal a node's whole process group (dash's kill takes no -PGID)
killpg() { /bin/kill -s "$1" -- "-$2"; }
elastic_cleanup() {
  for g in $groups; do killpg KILL "$g" 2> /dev/null; done
  etcd_stop
  [ -n "${FL_KEEP_TMP:-}" ] || rm -rf "$tmp"
}
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# elastic_data N: a job's data section: Fashion-MNIST shuffled, its first
# N training samples and the whole test set (10,000: the binomial spread
# of an accuracy on 2,000 samples, about 0.7 point, exceeds the 0.5 point
# the tests allow between two runs)
elastic_data() {
  cat << YAML
data:
  format: idx
  train_images: $FM/train-images-idx3-ubyte.gz
  train_labels: $FM/train-labels-idx1-ubyte.gz
  test_images: $FM/t10k-images-idx3-ubyte.gz
  test_labels: $FM/t10k-labels-idx1-ubyte.gz
  shuffle: true
  limit_train: $1
  limit_test: 10000
YAML
}
# node JOB N MINMAX PORT [args]: flotilla-run of node 127.0.0.N (job.yaml,
# lease 4 s, settle 1 s, a checkpoint directory of its own) in its own
# process group (killed as a whole, as a node would be); its pid in
# pid.JOB.N, its output in out.JOB.N
node() {
  j=$1 n=$2 mm=$3 p=$4
  shift 4
  FLOTILLA_CHECKPOINT_DIR="$tmp/ck.$j.$n" setsid timeout 150 "$RUN" --nnodes "$mm" \
    --rdzv_backend etcd --rdzv_endpoint "$ETCD_EP" --rdzv_id "$j" \
    --rdzv_conf lease_s=4,settle_s=1 --node_ip "127.0.0.$n" --master_port "$p" \
    --log_dir "$tmp/log.$j.$n" "$@" job.yaml > "$tmp/out.$j.$n" 2>&1 &
  echo $! > "$tmp/pid.$j.$n"
  groups="$groups $!"
}
# acc OUT: the final test accuracy a node's output names
acc() { sed -n 's/.*final test accuracy \([0-9.]*\).*/\1/p' "$1"; }
# world_change FIGURE ROUND MAX LOG...: the seconds the trainer of each LOG
# says its change to round ROUND took (its stop -> training in it),
# printed as FIGURE; fail unless every LOG says it once, under MAX s (no
# collective timeout waited for)
world_change() {
  _f=$1 _r=$2 _max=$3
  shift 3
  _s=""
  for _w in "$@"; do
    _s="$_s $(sed -n "s/.*elastic: round $_r: rank .* the world change took \([0-9.]*\) s.*/\1/p" "$_w")"
  done
  echo "$_f:$_s s (each survivor: its stop -> training in round $_r)"
  echo "$_s" | awk -v n=$# -v m="$_max" '{ ok = NF == n; for (i = 1; i <= NF; i++) if ($i >= m) ok = 0 }
    END { exit !ok }' ||
    fail "$_f: round $_r trained${_s:- never} s after the stop (want < $_max s on all $#: no collective timeout)"
}
elastic_setup() {
  [ -f $FM/train-images-idx3-ubyte.gz ] || { echo "SKIP: $FM not installed"; exit 77; }
  tmp=$(mktemp -d "/tmp/fl_$1.XXXXXX")
  . "$FL_SRCDIR/tests/integration/etcd_lib.sh"
  groups=""
  fails=0
  trap elastic_cleanup EXIT
  cd "$tmp" || exit 1
  etcd_start "$tmp" 127.0.0.1 || exit
}
