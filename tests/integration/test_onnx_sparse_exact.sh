#!/bin/sh
# test_onnx_sparse_exact.sh - what holds exactly, and what only closely, of
# an ONNX model's embeddings trained on the pservers (pserver.sparse_tables),
# on onnx_sparse.py's click model over 48 samples (onnx_sparse_exact.py),
# sync PS, 2 steps of a global batch of 12 (samples in file order; the
# strided shards make T trainers of 12/T samples a step the same batch):
#   1. for each row optimizer (sgd, adagrad, adam, rowwise_adagrad, ftrl):
#      T = 2 trainers on 1 pserver and 3 on 2 (sgd and adam: each T on 1
#      and on 2 pservers), and 1 trainer merging
#      T micro-batches of 12 / T (strategy.gradient_merge, its micro-batch
#      j trainer j's samples: onnx_sparse_exact.py's mT_*.npy) export the
#      same bits, rows and dense weights, pulls pipelined or not (both sum
#      the T means in one order, trainer id or micro-batch, and divide by
#      T in fl_gm_finalize: docs/DESIGN.md section 2, "Sync PS equals one
#      process, bit for bit"); 1 trainer of the global batch without
#      merge is within 1e-5 of them, not bit for bit (it sums a row's
#      samples in one sum, not in T partial sums, which rounds otherwise);
#      the per-step losses the trainers log (each its samples' mean,
#      %.5f), averaged, equal 1 trainer's within that rounding;
#   2. 1 trainer's rows against a reference of each rule (numpy, from
#      docs/DESIGN.md section 5; torch.optim SGD and Adagrad too, and Adam
#      on the rows every step touched) within 1e-5;
#   3. init uniform(R): rows in [-R, R], the same bits run after run and
#      with 1 or 2 trainers, other bits with another train.seed (lr 0: the
#      rows stay as created);
#   4. async and geo modes (async with gradient merge too) run to the end
#      and log a finite AUC;
#   5. a trainer killed (SIGKILL) mid-run, between steps, and restarted
#      with --resume by flotilla-run --max_restart: the run ends and its
#      rows equal an uninterrupted run's bit for bit (the restarted
#      trainer's InitSparse creates only absent rows, and it resumes from
#      its checkpoint at the step the pservers hold);
#   6. a table grows past the initializer's rows: ids the graph does not
#      take modulo V train (rows created by the pservers at their first
#      pull) and are exported; refused: uniform(R) with R < 0.
# Needs /usr/bin/python3 with torch and onnx (skipped without).  Seconds.
# KEEP=1 keeps the temporary directory (jobs, logs, exports).
# shellcheck source=tests/integration/sparse_lib.sh
. "${FL_SRCDIR:?}/tests/integration/sparse_lib.sh"
aux=$FL_SRCDIR/tests/integration/onnx_sparse_exact.py
d=$tmp/data dd=$tmp/data
timeout 120 "$py" "$aux" data "$d" > "$tmp/py.out" 2>&1 ||
  { cat "$tmp/py.out"; echo "FAIL: onnx_sparse_exact.py data"; exit 1; }

# opt NAME: the row optimizer's map (the hyperparameters of onnx_sparse_exact.py's HP)
opt() {
  case $1 in
    sgd) echo "{name: sgd, lr: 0.3}" ;;
    adagrad) echo "{name: adagrad, lr: 0.3, epsilon: 1e-10}" ;;
    adam) echo "{name: adam, lr: 0.05, beta1: 0.9, beta2: 0.999, epsilon: 1e-8}" ;;
    rowwise_adagrad) echo "{name: rowwise_adagrad, lr: 0.3, epsilon: 1e-8}" ;;
    ftrl) echo "{name: ftrl, lr: 0.3, l1: 0.01, l2: 0.02, beta: 0.5, lr_power: -0.5}" ;;
  esac
}
# job NAME BATCH OPT [INIT [EXTRA [MODEL [EPOCHS MAX_STEPS]]]]: the click
# model's job (click_job), 2 steps; its tables ($tables, else both) by OPT
# (sgd lr 0 for "zero"), init INIT (from_model), EXTRA appended; its
# training set the files $d/${pre}*.npy (pre: empty, the samples in file
# order)
job() {
  jo=$(opt "$3")
  [ "$3" = zero ] && jo="{name: sgd, lr: 0}"
  ji=${4:-from_model}
  jt=${tables:-"emb.weight: {optimizer: $jo, init: $ji, padding_id: 0},
    bag.weight: {optimizer: $jo, init: $ji}"}
  model=${6:-model} epochs=${7:-1} max_steps=${8:-2}
  click_job "$1" "$2" "$jt" "${5:-}"
}
# run NAME TRAINERS SERVERS [ARGS]: the job through flotilla-run
run() {
  rn=$1 rt=$2 rs=$3
  shift 3
  if ! timeout 60 "$RUN" --log_dir "$tmp/$rn.log" --mode ps --server_num "$rs" \
      --nproc_per_node "$rt" "$@" "$tmp/$rn.yaml" > "$tmp/$rn.out" 2>&1; then
    tail -n 5 "$tmp/$rn.out" "$tmp/$rn.log"/* 2> /dev/null
    fail "$rn: flotilla-run failed"
    return 1
  fi
}
# same A B WHAT, near NAME OPT WHAT, range NAME R WHAT: checks for the end
checks=$tmp/checks
: > "$checks"
same() { echo "same $tmp/$1.onnx $tmp/$2.onnx $3" >> "$checks"; }
near() { echo "ref $tmp/$1.onnx $2 2 12 $3" >> "$checks"; }
# losses NAME: per step, the mean of the losses the trainers logged (each
# its own samples' mean, %.5f)
losses() {
  sed -n 's/^\[Epoch 0, batch \([0-9]*\)\] loss: \([0-9.]*\),.*/\1 \2/p' "$tmp/$1.log"/workerlog.* |
    awk '{ s[$1] += $2; n[$1]++ } END { for (k = 0; k in n; k++) printf "%.6f ", s[k] / n[k] }'
}
# same_losses A B: the same number of steps, each within 2e-5 (the logs' rounding)
same_losses() {
  echo "$1 | $2" | awk '{ n = index($0, "|"); na = split(substr($0, 1, n - 1), a, " ");
    nb = split(substr($0, n + 1), b, " "); if (na != nb || na == 0) exit 1;
    for (i = 1; i <= na; i++) { d = a[i] - b[i]; if (d > 2e-5 || d < -2e-5) exit 1 } }'
}

# 1, 2: each optimizer, 1 trainer of 12, 2 of 6 and 3 of 4 a step, and 1
# trainer merging 2 of 6 and 3 of 4
for o in sgd adagrad adam rowwise_adagrad ftrl; do
  job "$o.1" 12 "$o" && run "$o.1" 1 1 && near "$o.1" "$o" "$o: 1 trainer against the reference"
  for t in 2 3; do
    # 2 trainers on 1 pserver, 3 on 2 (and, for sgd and adam, on the other
    # count too: the same bits whichever pserver holds a row)
    ps=$((t - 1))
    job "$o.$t.${ps}ps" $((12 / t)) "$o" && run "$o.$t.${ps}ps" $t $ps
    if [ "$o" = sgd ] || [ "$o" = adam ]; then
      qs=$((3 - ps))
      job "$o.$t.${qs}ps" $((12 / t)) "$o" && run "$o.$t.${qs}ps" $t $qs
      echo "bits $tmp/$o.$t.1ps.onnx $tmp/$o.$t.2ps.onnx $o: $t trainers on 1 and 2 pservers" >> "$checks"
    fi
    pre=m${t}_
    job "$o.m$t" $((12 / t)) "$o" from_model \
      "strategy: {gradient_merge: true, gradient_merge_configs: {k_steps: $t}}" && run "$o.m$t" 1 1
    pre=
    {
      echo "bits $tmp/$o.m$t.onnx $tmp/$o.$t.${ps}ps.onnx $o: 1 trainer merging $t micro-batches and $t trainers on $ps pserver$([ $ps = 1 ] || echo s)"
      echo "close $tmp/$o.1.onnx $tmp/$o.$t.${ps}ps.onnx 1e-5 $o: $t trainers and 1 of the global batch without merge"
    } >> "$checks"
    same_losses "$(losses "$o.$t.${ps}ps")" "$(losses "$o.1")" ||
      fail "$o: $t trainers logged the losses $(losses "$o.$t.${ps}ps"), 1 trainer $(losses "$o.1")"
    near "$o.$t.${ps}ps" "$o" "$o: $t trainers against the reference"
  done
done
# merge with sequential pulls (pserver.sparse.pipeline false): the same bits
pre=m3_
job sgd.m3seq 4 sgd from_model \
  "strategy: {gradient_merge: true, gradient_merge_configs: {k_steps: 3}}" &&
  sed -i 's/^pserver: {/pserver: {sparse: {pipeline: false}, /' "$tmp/sgd.m3seq.yaml" &&
  run sgd.m3seq 1 1
pre=
echo "bits $tmp/sgd.m3seq.onnx $tmp/sgd.m3.onnx sgd: merging 3 micro-batches, pulls sequential and pipelined" >> "$checks"

# 3. uniform(0.05), rows not trained: in range, the same bits run after
# run, with 2 trainers, and on 2 pservers
job u1 12 zero "uniform(0.05)" && run u1 1 1
job u1b 12 zero "uniform(0.05)" && run u1b 1 1
job u2 6 zero "uniform(0.05)" && run u2 2 2
echo "range $tmp/u1.onnx 0.05 uniform(0.05): rows in [-0.05, 0.05]" >> "$checks"
same u1 u1b "uniform(0.05): two runs"
same u1 u2 "uniform(0.05): 1 trainer on 1 pserver and 2 on 2"
job u1s 12 zero "uniform(0.05)" && sed -i 's/seed: 1,/seed: 2,/' "$tmp/u1s.yaml" && run u1s 1 1
echo "differ $tmp/u1.onnx $tmp/u1s.onnx uniform(0.05): another train.seed, other rows" >> "$checks"

# 4. async, geo and async with gradient merge, 2 trainers, 3 epochs: to
# the end, a finite AUC, the loss going down (each epoch's mean loss,
# trainer 0's)
# epoch_loss NAME E: the mean logged loss of epoch E
epoch_loss() {
  sed -n "s/^\[Epoch $2, batch [0-9]*\] loss: \([0-9.]*\),.*/\1/p" "$tmp/$1.log/workerlog.0" |
    awk '{ s += $1; n++ } END { if (n) printf "%.6f", s / n }'
}
for m in "async:strategy: {a_sync: true}" "geo:strategy: {a_sync: true, a_sync_configs: {k_steps: 2}}" \
  "async_merge:strategy: {a_sync: true, gradient_merge: true, gradient_merge_configs: {k_steps: 2}}"; do
  n=${m%%:*}
  if ! job "$n" 6 adagrad from_model "${m#*:}" model 3 0 || ! run "$n" 2 2; then continue; fi
  a=$(sed -n 's/^\[Epoch 2\] test auc: \([0-9.]*\),.*/\1/p' "$tmp/$n.log/workerlog.0")
  l0=$(epoch_loss "$n" 0) l2=$(epoch_loss "$n" 2)
  if [ -n "$a" ] && awk -v a="$a" -v x="$l0" -v y="$l2" 'BEGIN { exit !(a >= 0 && a <= 1 && y + 0 < x + 0) }'; then
    echo "ok: $n: test auc $a, mean loss $l0 (epoch 0) then $l2 (epoch 2)"
  else
    fail "$n: test auc '$a', mean loss '$l0' (epoch 0) then '$l2' (epoch 2)"
  fi
done

# 5. sync, 2 trainers on 2 pservers, 100 epochs (400 steps), checkpoints of
# the trainers every 5 steps and of the pservers every 10: trainer 1
# killed (SIGKILL) in epoch 10 while it waits for trainer 0 (stopped) and
# restarted by flotilla-run --max_restart 1 (with --resume) rejoins at the
# pservers' step from its checkpoint, sends the model's rows again
# (InitSparse: created only where absent) and the run ends with the rows
# of an uninterrupted run, bit for bit (a kill inside a step:
# test_sparse_restart.sh)
# trainer_pid PID ID: the pid of trainer ID among the children of PID's
# child (timeout, then flotilla-run)
trainer_pid() {
  fr=$(ps -o pid= --ppid "$1" | tr -d ' ')
  [ -n "$fr" ] || return 1
  for p in $(ps -o pid= --ppid "$fr"); do
    if tr '\0' '\n' 2> /dev/null < "/proc/$p/environ" | grep -qx FLOTILLA_ROLE=TRAINER &&
      tr '\0' '\n' 2> /dev/null < "/proc/$p/environ" | grep -qx "FLOTILLA_TRAINER_ID=$2"; then
      echo "$p"
      return 0
    fi
  done
  return 1
}
# restart_job NAME: the job of part 5
restart_job() {
  job "$1" 6 adam from_model "" model 100 0
  sed -i -e "s|^train: {|train: {checkpoint_dir: $tmp/$1.tck, checkpoint_interval: 5, |" \
    -e "s|^pserver: {|pserver: {checkpoint_dir: $tmp/$1.ck, checkpoint_interval_steps: 10, |" \
    "$tmp/$1.yaml"
}
restart_job rs_base && run rs_base 2 2
restart_job rs
timeout 120 "$RUN" --log_dir "$tmp/rs.log" --mode ps --server_num 2 --nproc_per_node 2 \
  --max_restart 1 "$tmp/rs.yaml" > "$tmp/rs.out" 2>&1 &
rp=$! i=0 victim='' other=
until [ -n "$victim" ] && [ -n "$other" ] || [ $i -ge 500 ]; do
  if ! victim=$(trainer_pid "$rp" 1) || ! other=$(trainer_pid "$rp" 0); then sleep 0.02; fi
  i=$((i + 1))
done
until grep -q '^\[Epoch 10, batch' "$tmp/rs.log/workerlog.1" 2> /dev/null || [ $i -ge 3000 ]; do
  sleep 0.01
  i=$((i + 1))
done
# trainer 0 stopped first, so that trainer 1 waits for it, every push of
# its last step sent, when it is killed
if [ -n "$victim" ] && [ -n "$other" ] && kill -STOP "$other"; then
  sleep 0.3
  kill -KILL "$victim"
  sleep 0.1
  kill -CONT "$other"
else
  fail "rs: trainers 0 and 1 not found"
fi
if ! wait "$rp"; then
  tail -n 20 "$tmp/rs.out"
  fail "rs: flotilla-run failed after trainer 1 was killed"
elif grep -q "trainer 1 was killed by signal 9 .*; restart 1 of 1" "$tmp/rs.out"; then
  grep -h "resumed from\|rejoining" "$tmp/rs.log/workerlog.1"
  sed -n '/restart 1 of 1/,$p' "$tmp/rs.log/workerlog.1" |
    grep -q "emb.weight: rows 0..9 from the model sent to the pservers" ||
    fail "rs: the restarted trainer sent no initial rows (its InitSparse is what is checked)"
  same rs_base rs "a trainer killed in epoch 10 and restarted, against an uninterrupted run"
else
  fail "rs: flotilla-run did not restart trainer 1"
fi

# 6. a table past its initializer's rows; refusals
for init in from_model "uniform(0.1)"; do
  tables="emb.weight: {init: $init}" job oob 12 sgd from_model "" oob
  if run oob 2 1; then
    top=$("$py" -c "import numpy; print(int(numpy.load('$tmp/oob.onnx.emb.weight.ids.npy').max()))")
    if [ "${top:-0}" -ge 10 ]; then
      echo "ok: init $init: the table grew past its 10 rows (largest id $top), exported"
    else
      fail "oob: init $init: no id beyond the initializer's rows in the export (largest ${top:-none})"
    fi
  fi
done
job negative 12 sgd "uniform(-0.1)"
refused negative "expected uniform, uniform(R) with R in \[0, 1000\] or from_model, got .uniform(-0.1)."

timeout 120 "$py" "$aux" check "$d" "$checks" > "$tmp/checks.out" 2>&1
cat "$tmp/checks.out"
grep -q "^ok: " "$tmp/checks.out" || fail "onnx_sparse_exact.py check: no result"
fails=$((fails + $(grep -c "^FAIL" "$tmp/checks.out")))
[ $fails -eq 0 ] || exit 1
echo "PASS: onnx sparse tables, exact"
