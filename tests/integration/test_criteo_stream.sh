#!/bin/sh
# test_criteo_stream.sh - data.format criteo streamed into the training
# loop of an ONNX model (the DLRM example's module, vocabulary 100), one
# trainer, seconds in all:
#   1. file order, a line of empty fields among gen_criteo.py's: the first
#      10 steps' losses within 1e-4 of torch_train.py's on the same file;
#   2. the same file gzipped, and with CRLF line ends: the same losses;
#   3. a bad line: bad_lines stop ends the run naming file:line, skip runs
#      on, naming it and counting it;
#   4. a file shorter than one batch before a longer one (a glob), a test
#      file shorter than one eval batch: trained and evaluated; a training
#      set shorter than one batch is refused;
#   5. --max-steps then --resume (shuffle buffer, and file order on a gzip
#      file): the losses of the uninterrupted run, step for step;
#   6. two ranks (collective): --max-steps then --resume, rank 0 at the
#      checkpoint's position, rank 1 replaying: both ranks' losses as in
#      the uninterrupted run;
#   7. SIGTERM in the middle of an epoch, then --resume: the losses of the
#      uninterrupted run;
#   8. refusals: a preset model, a model input data.criteo does not feed.
# Skips (77) without Debian's torch and onnx.
# shellcheck disable=SC2015 # `A && echo ok || fail`: the echo never fails
set -u
: "${FL_BUILDDIR:?}" "${FL_SRCDIR:?}"
py=/usr/bin/python3
PYTHONDONTWRITEBYTECODE=1
export PYTHONDONTWRITEBYTECODE
"$py" -c 'import torch, onnx' 2> /dev/null || { echo "SKIP: $py lacks torch or onnx"; exit 77; }
T=$FL_BUILDDIR/flotilla-trainer
ex=$FL_SRCDIR/deploy/examples/recsys
tmp=$(mktemp -d /tmp/fl_criteo_stream.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$py" "$ex/gen_criteo.py" --rows 700 --seed 1 --out g.tsv > /dev/null 2>&1 &&
  "$py" "$ex/gen_criteo.py" --rows 150 --seed 2 --out t.tsv > /dev/null 2>&1 &&
  "$py" "$ex/gen_criteo.py" --rows 30 --seed 3 --out s.tsv > /dev/null 2>&1 &&
  FLOTILLA_BINDIR=$FL_BUILDDIR "$py" "$ex/dlrm.py" export m.onnx --vocab 100 > /dev/null 2>&1 ||
  { echo "FAIL: data or export"; exit 1; }
# line 3: every field empty
{ head -2 g.tsv; printf '1'; for _ in $(seq 39); do printf '\t'; done; printf '\n'; tail -n +3 g.tsv; } > a.tsv
gzip -c a.tsv > a.tsv.gz
sed 's/$/\r/' a.tsv > crlf.tsv
awk 'NR == 100 { print "0\tnot a line" } { print }' a.tsv > b.tsv

# job NAME FILES SHUFFLE BAD_LINES [TRAIN_EXTRA]
job() {
  cat > "$1.yaml" <<EOY
model: {kind: onnx, path: $tmp/m.onnx, loss: bce_with_logits}
data:
  format: criteo
  train_files: $2
  test_files: [$tmp/t.tsv]
  criteo: {dense_input: dense, sparse_input: sparse, shuffle_buffer: $3, bad_lines: $4}
optimizer: {name: sgd, lr: 0.1}
train: {epochs: 2, batch_size: 64, seed: 1, eval: true, eval_batch_size: 500, log_interval: 1, num_threads: 1${5:+, $5}}
cluster: {mode: local}
EOY
}
# run NAME [FLAGS]: the trainer, its loss per step in NAME.loss
run() {
  rn=$1
  shift
  timeout 60 "$T" --config "$rn.yaml" "$@" > "$rn.out" 2>&1
  rc=$?
  sed -n 's/^\[Epoch [0-9]*, batch [0-9]*\] loss: \([0-9.]*\).*/\1/p' "$rn.out" >> "$rn.loss"
  return $rc
}
ok_run() { run "$@" || { tail -n 5 "$1.out"; fail "$1: exit non-zero"; }; }

# 1. against PyTorch
job plain "[$tmp/a.tsv]" 0 stop
ok_run plain
timeout 120 "$py" "$ex/torch_train.py" --model dlrm --train a.tsv --vocab 100 --batch 64 \
  --print-steps 10 --max-steps 10 > torch.out 2>&1 || { cat torch.out; fail "torch_train.py"; }
sed -n 's/^step [0-9]* loss //p' torch.out > torch.loss
if head -10 plain.loss | paste - torch.loss |
   awk 'NF == 2 { n++; d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
        END { printf "max |flotilla - torch| over %d steps: %.2g\n", n, m; exit !(n == 10 && m <= 1e-4) }'
then echo "ok: 1. file order = torch_train.py"; else fail "1. losses differ from PyTorch's"; fi

# 2. gzip, CRLF
for v in gz:a.tsv.gz crlf:crlf.tsv; do
  job "${v%%:*}" "$tmp/${v#*:}" 0 stop
  ok_run "${v%%:*}"
  cmp -s plain.loss "${v%%:*}.loss" && echo "ok: 2. ${v#*:} = a.tsv" || fail "2. ${v#*:}: other losses"
done

# 3. a bad line
job stop "$tmp/b.tsv" 0 stop
if run stop; then fail "3. bad_lines stop ran on"; fi
grep -q "b.tsv:100: .*not 40\|b.tsv:100: .*fields" stop.out && echo "ok: 3. stop names b.tsv:100" ||
  { tail -n 3 stop.out; fail "3. stop: no b.tsv:100"; }
job skip "$tmp/b.tsv" 0 skip
ok_run skip
grep -q "b.tsv:100: .*skipped" skip.out && grep -q "1 bad lines skipped" skip.out &&
  echo "ok: 3. skip names and counts b.tsv:100" || { grep criteo skip.out; fail "3. skip"; }

# 4. short files
job short "[$tmp/s.tsv, '$tmp/a*.tsv']" 0 stop
ok_run short
grep -q "731 samples per epoch" short.out && grep -q "11 steps" short.out &&
  grep -q "test loss" short.out && echo "ok: 4. a short file, then a glob; a short test file" ||
  { grep -i "criteo\|steps\|test" short.out; fail "4. short files"; }
job tiny "$tmp/s.tsv" 0 stop
if run tiny; then fail "4. a training set shorter than one batch ran"; fi
grep -q "give no step" tiny.out && echo "ok: 4. a training set shorter than one batch refused" ||
  { tail -n 3 tiny.out; fail "4. tiny: no clear refusal"; }

# 5. resume at the exact sample
for v in shuf:a.tsv:100 seek:a.tsv.gz:0; do
  n=${v%%:*}
  f=$(echo "$v" | cut -d: -f2)
  job "$n" "$tmp/$f" "${v##*:}" stop "checkpoint_dir: $tmp/$n.ck"
  job "${n}_r" "$tmp/$f" "${v##*:}" stop "checkpoint_dir: $tmp/${n}_r.ck"
  ok_run "$n"
  ok_run "${n}_r" --max-steps 7
  ok_run "${n}_r" --resume
  [ "$(wc -l < "$n.loss")" -eq 20 ] && cmp -s "$n.loss" "${n}_r.loss" &&
    grep -q "continues at sample 448 .*checkpoint's position" "${n}_r.out" &&
    echo "ok: 5. $n: --resume at step 7 = the uninterrupted run" ||
    { diff "$n.loss" "${n}_r.loss" | head; fail "5. $n: resumed losses differ"; }
done

# 6. two ranks (collective), each its half of the lines: --resume at step 3,
# rank 0 at its saved position, rank 1 replaying its share up to the batch
for n in two two_r; do
  job "$n" "$tmp/a.tsv" 50 stop "checkpoint_dir: $tmp/$n.ck"
  sed -i 's/mode: local/mode: collective, collective_timeout_s: 60/' "$n.yaml"
done
two() {
  # shellcheck disable=SC2086 # $3: the trainer's flags, word-split
  timeout 120 "$FL_BUILDDIR/flotilla-run" --log_dir "$1.log$2" --nproc_per_node 2 "$1.yaml" \
    -- $3 > "$1.out$2" 2>&1 || { tail -n 5 "$1.out$2" "$1.log$2"/workerlog.*; fail "6. $1: exit"; }
}
two two "" ""
two two_r 1 "--max-steps 3"
two two_r 2 "--resume"
for r in 0 1; do
  grep -h "batch [0-9]*\] loss" "two.log/workerlog.$r" > "two.$r"
  cat "two_r.log1/workerlog.$r" "two_r.log2/workerlog.$r" | grep -h "batch [0-9]*\] loss" > "two_r.$r"
  [ "$(wc -l < "two.$r")" -eq 10 ] && cmp -s "two.$r" "two_r.$r" &&
    echo "ok: 6. rank $r of 2: --resume at step 3 = the uninterrupted run" ||
    { diff "two.$r" "two_r.$r" | head -5; fail "6. rank $r: resumed losses differ"; }
done
grep -q "continues at sample 192 " two_r.log2/workerlog.0 &&
  grep -q "continues at batch 3, read again" two_r.log2/workerlog.1 ||
  { grep -h continues two_r.log2/workerlog.*; fail "6. the ranks did not resume as planned"; }

# 7. SIGTERM in the middle of an epoch (a longer file, small batches), then
# --resume: every step both runs logged has the same loss (by epoch and
# batch), and the two runs together log every step of the uninterrupted one
"$py" "$ex/gen_criteo.py" --rows 20000 --seed 4 --out long.tsv > /dev/null 2>&1
for n in long long_k; do
  job "$n" "$tmp/long.tsv" 200 stop "checkpoint_dir: $tmp/$n.ck"
  sed -i -e 's/epochs: 2/epochs: 1/' -e 's/batch_size: 64/batch_size: 8/' "$n.yaml"
done
ok_run long
keyed() { sed -n 's/^\[Epoch \([0-9]*\), batch \([0-9]*\)\] loss: \([0-9.]*\).*/\1:\2 \3/p' "$@"; }
"$T" --config long_k.yaml > long_k.out1 2>&1 &
pid=$!
sleep 0.5
kill -TERM $pid 2> /dev/null
wait $pid
timeout 60 "$T" --config long_k.yaml --resume > long_k.out2 2>&1 || fail "7. --resume after SIGTERM"
keyed long.out | sort > long.keyed
keyed long_k.out1 long_k.out2 | sort -u > long_k.keyed
if grep -q "stopped by a signal" long_k.out1 && cmp -s long.keyed long_k.keyed; then
  echo "ok: 7. SIGTERM at $(sed -n 's/.*stopped by a signal at \(step [0-9]*\).*/\1/p' long_k.out1), --resume: the uninterrupted run's losses"
elif ! grep -q "stopped by a signal" long_k.out1; then
  echo "ok: 7. (the run ended before SIGTERM: nothing to resume)"
else
  diff long.keyed long_k.keyed | head -5; fail "7. the resumed losses differ"
fi

# 8. refusals at the job check: a preset model, a model input not fed
job preset "$tmp/a.tsv" 0 stop
sed -i 's|^model: .*|model: {kind: mlp, input_shape: [1, 1, 13], num_classes: 2}|' preset.yaml
if run preset; then fail "8. criteo with model.kind mlp ran"; fi
grep -q "criteo feeds an ONNX model" preset.out && echo "ok: 8. a preset model refused" ||
  { tail -n 3 preset.out; fail "8. preset: no clear refusal"; }
job unfed "$tmp/a.tsv" 0 stop
sed -i 's/dense_input: dense,/dense_input: features,/' unfed.yaml
if run unfed; then fail "8. an input not fed ran"; fi
grep -q "input 'dense' is not fed" unfed.out && echo "ok: 8. a model input not fed refused" ||
  { tail -n 3 unfed.out; fail "8. unfed: no clear refusal"; }

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "PASS: test_criteo_stream"
