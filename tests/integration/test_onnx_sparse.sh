#!/bin/sh
# test_onnx_sparse.sh - an ONNX model's own embeddings trained on the
# pservers as sparse tables (pserver.sparse_tables), against PyTorch
# (onnx_sparse.py: nn.Embedding with padding_idx 0 and a fixed-bag
# nn.EmbeddingBag of mode sum, both over ids taken modulo the vocabulary in
# the graph, a Linear head, BCE with logits), sync PS, SGD, init from_model:
#   1. 1 pserver, 1 trainer of the whole set: the loss of each of the three
#      steps and the test log loss and AUC after each equal PyTorch's
#      full-batch run within 1e-4;
#   2. the same with 2 trainers of half the set (their losses averaged),
#      and with a softmax head of 3 classes (the test loss and accuracy);
#   3. train.export_onnx: the ONNX model and the tables' .npy files load
#      into the PyTorch module (deploy/examples/recsys/load_sparse_export.py)
#      and score the test set as the trainer logged it last (2 trainers);
#      into a module of a smaller vocabulary they are refused;
#   4. refusals, each naming what is wrong: a table read by a MatMul,
#      sparse_tables in collective mode.
# Needs /usr/bin/python3 with torch and onnx (skipped without).  Seconds.
# shellcheck source=tests/integration/sparse_lib.sh
. "${FL_SRCDIR:?}/tests/integration/sparse_lib.sh"
gen=$FL_SRCDIR/tests/integration/onnx_sparse.py
d=$tmp/data
timeout 120 "$py" "$gen" "$d" > "$tmp/py.out" 2>&1 ||
  { cat "$tmp/py.out"; echo "FAIL: onnx_sparse.py"; exit 1; }

tables="emb.weight: {optimizer: {name: sgd, lr: 0.3}, init: from_model, padding_id: 0},
    bag.weight: {optimizer: {name: sgd, lr: 0.3}, init: from_model}"
# job NAME BATCH MODE [MODEL [TABLES]]: the click model's job over $dd,
# 3 epochs (click_job)
dd=$d loss=bce_with_logits epochs=3
job() {
  mode=$3 model=${4:-model}
  click_job "$1" "$2" "${5:-$tables}"
}

# close A B: |A - B| <= 1e-4 * max(1, |B|)
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b;
  if (m < 1) m = 1; exit !(d <= 1e-4 * m) }'; }

# mean FIELD EPOCH FILES...: the mean over the files of a logged value
mean() {
  f=$1 e=$2
  shift 2
  case $f in
    loss) pat="^\[Epoch $e, batch 0\] loss: \([0-9.]*\),.*" ;;
    logloss) pat="^\[Epoch $e\] test auc: .*, logloss: \([0-9.]*\),.*" ;;
    auc) pat="^\[Epoch $e\] test auc: \([0-9.]*\),.*" ;;
    tloss) pat="^\[Epoch $e\] test loss: \([0-9.]*\),.*" ;;
    acc) pat="^\[Epoch $e\] test loss: .*, acc1: \([0-9.]*\).*" ;;
  esac
  sed -n "s/$pat/\1/p" "$@" | awk '{ s += $1; n++ } END { if (n) printf "%.8f", s / n }'
}

# train NAME TRAINERS [METRICS]: the job through flotilla-run, 1 pserver;
# its losses and test METRICS (logloss auc, or tloss acc) against PyTorch's
train() {
  name=$1 n=$2 m1=${3:-logloss} m2=${4:-auc}
  job "$name" $((16 / n)) ps
  if ! timeout 120 "$RUN" --log_dir "$tmp/$name.log" --mode ps --server_num 1 \
      --nproc_per_node "$n" "$tmp/$name.yaml" > "$tmp/$name.out" 2>&1; then
    tail -n 20 "$tmp/$name.out" "$tmp/$name.log"/workerlog.* 2> /dev/null
    fail "$name: flotilla-run failed"
    return
  fi
  logs=$(ls "$tmp/$name.log"/workerlog.*)
  for e in 0 1 2; do
    # shellcheck disable=SC2046 # the reference line's three numbers: word-split
    set -- $(sed -n "$((e + 1))p" "$dd/ref.txt")
    # shellcheck disable=SC2086 # the worker logs: word-split
    l=$(mean loss $e $logs) ll=$(mean $m1 $e $logs) a=$(mean $m2 $e $logs)
    close "${l:-x}" "$1" || fail "$name: step $e loss $l, PyTorch $1"
    close "${ll:-x}" "$2" || fail "$name: epoch $e test $m1 $ll, PyTorch $2"
    close "${a:-x}" "$3" || fail "$name: epoch $e test $m2 $a, PyTorch $3"
    echo "$name: step $e loss $l (PyTorch $1), test $m1 $ll ($2), $m2 $a ($3)"
  done
  [ "$m1" = logloss ] && [ "$n" -eq 2 ] || return
  if "$py" "$gen" "$d" check "$tmp/$name.onnx" > "$tmp/$name.check" 2>&1; then
    # shellcheck disable=SC2046 # the check's words
    set -- $(cat "$tmp/$name.check")
    # shellcheck disable=SC2086
    ll=$(mean logloss 2 $logs) a=$(mean auc 2 $logs)
    close "$2" "$ll" || fail "$name: the export's test logloss $2, the trainer logged $ll"
    close "$4" "$a" || fail "$name: the export's test auc $4, the trainer logged $a"
    [ "$6" = refused ] || fail "$name: a module of a smaller vocabulary: $6"
    echo "$name: export in PyTorch: test logloss $2, auc $4 (logged $ll, $a); a smaller"\
      "vocabulary $6"
  else
    cat "$tmp/$name.check"
    fail "$name: the export does not load into PyTorch"
  fi
}
train one 1
train two 2
dd=${d}softmax loss=softmax_cross_entropy
train softmax 2 tloss acc
dd=$d loss=bce_with_logits

job matmul 16 ps matmul "w: {init: from_model}"
refused matmul "sparse table w is read by node .*(MatMul), which is neither" ps
job coll 16 collective
refused coll "pserver.sparse_tables: the tables live on the pservers: they need cluster.mode ps" \
  collective
[ $fails -eq 0 ] || exit 1
echo "PASS: onnx sparse tables"
