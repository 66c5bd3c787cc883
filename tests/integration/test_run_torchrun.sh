#!/bin/sh
# flotilla-run with torchrun's spellings on 127.0.0.1: two flotilla-run
# processes, `--nnodes 2 --node_rank 0|1 --master_addr --master_port
# --nproc-per-node 1`, each start their share of a collective job; the two
# trainers take their place from the torchrun variables flotilla-run hands
# them (RANK, WORLD_SIZE, MASTER_ADDR, ...), meet at the master's port and
# train to the end.  A contradiction (--master_addr not the first of --ips)
# is refused with exit 2 and a message naming both.  Bounded by timeout.
set -u
RUN=$FL_BUILDDIR/flotilla-run
EX=$FL_SRCDIR/deploy/examples
tmp=$(mktemp -d /tmp/fl_run_torchrun.XXXXXX)
pids=""
cleanup() {
  for p in $pids; do kill "$p" 2> /dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
cd "$tmp" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

sed 's/^data:$/data:\n  limit_train: 2048\n  limit_test: 500/' "$EX/collective_mlp_fmnist.yaml" > job.yaml
# A free port from the kernel (runs side by side must not share one).
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2> /dev/null) ||
  port=$((20000 + $$ % 20000))
export FLOTILLA_TOKEN=torchrun-test-token
for n in 0 1; do
  FLOTILLA_CHECKPOINT_DIR="$tmp/ck$n" timeout 120 "$RUN" --nnodes 2 --node_rank $n \
    --master_addr 127.0.0.1 --master_port $port --nproc-per-node 1 --log_dir "$tmp/log$n" \
    job.yaml -- --max-steps 12 > "$tmp/out$n" 2>&1 &
  pids="$pids $!"
done
rc=0
for p in $pids; do wait "$p" || rc=$?; done
pids=""
[ $rc = 0 ] || fail "a flotilla-run exited $rc"
grep -q "place from torchrun: trainer 0 of 2" "$tmp/log0/workerlog.0" ||
  fail "trainer 0 did not take its place from torchrun's variables"
grep -q "place from torchrun: trainer 1 of 2" "$tmp/log1/workerlog.1" ||
  fail "trainer 1 did not take its place from torchrun's variables"
grep -q "rendezvous 127.0.0.1:$port" "$tmp/log1/workerlog.1" || fail "trainer 1: rendezvous"
grep -q "all 2 ranks registered" "$tmp/log0/workerlog.0" || fail "no rendezvous of 2 ranks"
for n in 0 1; do
  grep -q "done: 12 steps" "$tmp/log$n/workerlog.$n" || fail "trainer $n did not finish 12 steps"
done

# Contradictions are refused before anything starts.
timeout 20 "$RUN" --ips 127.0.0.1,127.0.0.2 --master_addr 127.0.0.2 job.yaml > bad.out 2>&1
[ $? = 2 ] || fail "--master_addr not the first of --ips: want exit 2"
grep -q "master_addr 127.0.0.2: trainer 0 runs on the first of --ips, 127.0.0.1" bad.out ||
  fail "no message naming both addresses: $(cat bad.out)"
timeout 20 "$RUN" --nnodes 2:4 job.yaml > bad2.out 2>&1
[ $? = 2 ] || fail "elastic --nnodes 2:4: want exit 2"
grep -q "elastic" bad2.out || fail "elastic --nnodes: no message"
# elastic options that cannot work are refused before etcd is reached
el="--nnodes 2:3 --rdzv_backend etcd --rdzv_endpoint 127.0.0.1:9 --rdzv_id t"
for bad in "--nnodes 2:3 --rdzv_backend c10d" "--nnodes 3:2 --rdzv_backend etcd" \
  "$el --rdzv_conf lease_s=1" "$el --rdzv_conf nope=3" "$el --ips 127.0.0.1" \
  "--nnodes 2:3 --rdzv_backend etcd --rdzv_id t"; do
  # shellcheck disable=SC2086
  timeout 20 "$RUN" $bad job.yaml > bad3.out 2>&1
  [ $? = 2 ] || fail "$bad: want exit 2"
  grep -q " E " bad3.out || fail "$bad: no error message"
done

if [ $fails -ne 0 ]; then
  for n in 0 1; do echo "--- out$n"; tail -n 20 "$tmp/out$n"; done
  exit 1
fi
echo "PASS: flotilla-run --nnodes/--node_rank/--master_addr/--master_port"
