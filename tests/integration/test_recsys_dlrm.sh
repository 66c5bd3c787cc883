#!/bin/sh
# test_recsys_dlrm.sh - the DLRM example of deploy/examples/recsys against
# its PyTorch reference: dlrm_sync.yaml with 1 pserver and 1 trainer (its
# 26 EmbeddingBag tables as sparse tables, init from_model, Adagrad on the
# pserver for rows and dense parameters alike), the TSV in file order
# (shuffle_buffer 0): the first 20 steps' losses within 1e-4 of
# torch_train.py's (sparse gradients, torch.optim.Adagrad, one thread),
# and the export scored by eval_export.py with the test log loss the
# trainer logged.  Skips (77) without Debian's torch and onnx.  Seconds.
# shellcheck disable=SC2015 # `A && echo ok || fail`: the echo never fails
set -u
: "${FL_BUILDDIR:?}" "${FL_SRCDIR:?}"
py=/usr/bin/python3
PYTHONDONTWRITEBYTECODE=1
export PYTHONDONTWRITEBYTECODE
"$py" -c 'import torch, onnx' 2> /dev/null || { echo "SKIP: $py lacks torch or onnx"; exit 77; }
ex=$FL_SRCDIR/deploy/examples/recsys
tmp=$(mktemp -d /tmp/fl_recsys_dlrm.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$py" "$ex/gen_criteo.py" --rows 3200 --seed 1 --out all.tsv > /dev/null 2>&1 &&
  head -n 2800 all.tsv > train.tsv && tail -n 400 all.tsv > test.tsv &&
  FLOTILLA_BINDIR=$FL_BUILDDIR timeout 120 "$py" "$ex/dlrm.py" export dlrm.onnx > export.out 2>&1 ||
  { cat export.out; echo "FAIL: data or export"; exit 1; }
sed -e "s|/tmp/flotilla-recsys/|$tmp/|g" -e 's/shuffle_buffer: .*/shuffle_buffer: 0/' \
  -e 's/log_interval: .*/log_interval: 1/' "$ex/dlrm_sync.yaml" > job.yaml
timeout 120 "$FL_BUILDDIR/flotilla-run" --log_dir log --mode ps --server_num 1 --nproc_per_node 1 \
  job.yaml -- --max-steps 20 > run.out 2>&1 ||
  { tail -n 20 run.out log/workerlog.* 2> /dev/null; fail "flotilla-run exited non-zero"; }
sed -n 's/^\[Epoch 0, batch [0-9]*\] loss: \([0-9.]*\).*/\1/p' log/workerlog.0 > flotilla.loss
timeout 120 "$py" "$ex/torch_train.py" --model dlrm --train train.tsv --batch 128 \
  --optimizer adagrad --lr 0.05 --max-steps 20 --print-steps 20 > torch.out 2>&1 ||
  { cat torch.out; fail "torch_train.py"; }
sed -n 's/^step [0-9]* loss //p' torch.out > torch.loss
if paste flotilla.loss torch.loss |
   awk 'NF == 2 { n++; d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
        END { printf "max |flotilla - torch| over %d steps: %.2g\n", n, m; exit !(n == 20 && m <= 1e-4) }'
then echo "ok: the first 20 steps' losses = torch_train.py's"
else paste flotilla.loss torch.loss | head -20; fail "losses differ from PyTorch's"; fi

logged=$(sed -n 's/^\[Epoch 0\] test loss: \([0-9.]*\).*/\1/p' log/workerlog.0)
timeout 120 "$py" "$ex/eval_export.py" --model dlrm --export dlrm_sync_trained.onnx \
  --test test.tsv > eval.out 2>&1 || { cat eval.out; fail "eval_export.py"; }
scored=$(sed -n 's/^logloss: //p' eval.out)
if [ -n "$logged" ] && [ -n "$scored" ] &&
   awk -v a="$logged" -v b="$scored" 'BEGIN { d = a - b; exit !(d < 2e-5 && d > -2e-5) }'; then
  echo "ok: eval_export.py's test log loss $scored = the trainer's $logged ($(grep auc eval.out))"
else
  cat eval.out; fail "eval_export.py log loss '$scored', the trainer logged '$logged'"
fi

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "PASS: test_recsys_dlrm"
