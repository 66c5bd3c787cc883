#!/bin/bash
# A network cut between two nodes, with the real daemons: two network
# namespaces ("nodes" A and B, 10.213.x.1 and .2) joined by a veth pair;
# the cut is `ip link set ... down` on A's end, the repair `up` again.
#   collective: rank 0 on A, rank 1 on B; after the cut both exit 1 within
#     collective_timeout_s, each naming the other's address;
#   PServer (sync): the pserver and trainer 0 on A, trainer 1 on B; after
#     the cut the pserver declares trainer 1 dead within
#     heartbeat_timeout_s and trainer 0 trains on, while trainer 1, whose
#     pserver answers nothing, gives up within about twice the timeout
#     naming it (every wait is bounded); once the link is
#     back trainer 1, started again (as flotilla-run --max_restart does),
#     rejoins the running job and every process ends with status 0, both
#     trainers having done every step.  Trainer 0, training alone during the cut, would complete
#     its steps if the cut outlasted them (a loaded machine stretches the
#     waits above), and the pserver would end the job before trainer 1 is
#     back, which then exits 1; and the rejoin itself can take seconds
#     after the repair (TCP retransmission backoff).  So trainer 0 is held
#     (SIGSTOP) from its first progress alone until trainer 1 has registered
#     again.
# Every wait is for something the daemons log, with a bound.
# Needs root and iproute2 (ip netns, veth); SKIP with the reason when the
# namespaces or the veth pair cannot be made.
. "$FL_SRCDIR/tests/integration/faults_lib.sh"
TIMEOUT=6
net=10.213.$(($$ % 250))
nsA=flA$$ nsB=flB$$ vA=flvA$$ vB=flvB$$

if ! command -v ip > /dev/null; then
  echo "SKIP: no ip command (apt-get install iproute2)"
  exit 77
fi
if ! { ip netns add $nsA && fl_netns=$nsA && ip netns add $nsB && fl_netns="$nsA $nsB" &&
  ip link add $vA type veth peer name $vB && ip link set $vA netns $nsA &&
  ip link set $vB netns $nsB && ip -n $nsA addr add $net.1/24 dev $vA &&
  ip -n $nsB addr add $net.2/24 dev $vB && ip -n $nsA link set lo up &&
  ip -n $nsB link set lo up && ip -n $nsA link set $vA up && ip -n $nsB link set $vB up; } \
  2> "$tmp/netns.err"; then
  echo "SKIP: cannot make network namespaces and a veth pair here: $(head -1 "$tmp/netns.err")"
  exit 77
fi
NETNS_OF_HOST_0=$nsA NETNS_OF_HOST_1=$nsB
cut() { ip -n $nsA link set $vA down; }
heal() { ip -n $nsA link set $vA up; }

# ------------------------------------------------------------- collective
n=coll
cat > "$tmp/$n.yaml" << EOF
model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [32]}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 2048, test_samples: 128, seed: 3}
optimizer: {name: sgd, lr: 0.05}
train: {epochs: 1000, batch_size: 16, seed: 7, log_interval: 20, num_threads: 1, eval: false}
cluster: {mode: collective, collective_timeout_s: $TIMEOUT}
EOF
coll_job $n "$tmp/$n.yaml" 2 $net.1 $net.2
wait_log "$tmp/$n.tr1.log" '^\[Epoch 0, batch 40\]' 30 || fail "$n: rank 1 did not train"
cut
t_cut=$SECONDS
for r in 0 1; do
  wait_exit "$(eval echo \$TR$r)" $((TIMEOUT + 25))
  [ "$rc" = 1 ] || fail "$n: rank $r exit $rc (want 1)"
  other=$((1 - r))
  has "$tmp/$n.tr$r.log" "collective rank $r: .*rank $other \($net\.$((other + 1)):[0-9]+\) did not respond within $TIMEOUT.0 s" \
    "$n: rank $r"
done
[ $((SECONDS - t_cut)) -le $((TIMEOUT + 10)) ] ||
  fail "$n: the ranks took $((SECONDS - t_cut)) s to give up (timeout $TIMEOUT s)"
heal
ran=$((ran + 1))
[ $fails = 0 ] && ok "$n" || show "$tmp/$n".*.log

# ------------------------------------------------------------ PServer
n=ps
f0=$fails
# Small blocks: a step is a few dozen calls, so the job outlasts the cut.
cat > "$tmp/$n.yaml" << EOF
model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [32]}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 2048, test_samples: 128, seed: 3}
optimizer: {name: sgd, lr: 0.05}
train: {epochs: 100, batch_size: 16, seed: 7, log_interval: 20, num_threads: 1}
cluster: {mode: ps, heartbeat_timeout_s: 2, rpc_timeout_s: 3}
pserver: {dense_block_size: 100}
strategy: {a_sync: false}
EOF
# below the ephemeral range (32768 up) that the namespace's own outgoing
# connections take ports from
PSLIST=$net.1:$((16384 + RANDOM % 16000))
spawn PS0 "$tmp/$n.ps0.log" FLOTILLA_MODE=ps FLOTILLA_ROLE=PSERVER FLOTILLA_PSERVERS_IP_PORT_LIST=$PSLIST \
  FLOTILLA_PSERVER_ID=0 FLOTILLA_TRAINERS_NUM=2 -- ip netns exec $nsA "$PSERVER" --config "$tmp/$n.yaml"
for t in 0 1; do
  ns=$nsA
  [ $t = 1 ] && ns=$nsB
  spawn TR$t "$tmp/$n.tr$t.log" FLOTILLA_MODE=ps FLOTILLA_ROLE=TRAINER \
    FLOTILLA_PSERVERS_IP_PORT_LIST=$PSLIST FLOTILLA_TRAINER_ID=$t FLOTILLA_TRAINERS_NUM=2 -- \
    ip netns exec $ns "$TRAINER" --config "$tmp/$n.yaml"
done
wait_log "$tmp/$n.tr1.log" '^\[Epoch 0, batch 20\]' 30 || fail "$n: trainer 1 did not train"
cut
wait_log "$tmp/$n.ps0.log" 'trainer 1 declared dead: silent for' 8 ||
  fail "$n: trainer 1 was not declared dead within 8 s of the cut"
# trainer 0 trains on: a new progress line after trainer 1 was declared
# dead; then it is held at once (alone it runs through the job in seconds)
before=$(grep -c '^\[Epoch' "$tmp/$n.tr0.log")
for ((i = 0; i < 100; i++)); do
  [ "$(grep -c '^\[Epoch' "$tmp/$n.tr0.log")" -gt "$before" ] && break
  sleep 0.1
done
[ "$(grep -c '^\[Epoch' "$tmp/$n.tr0.log")" -gt "$before" ] ||
  fail "$n: trainer 0 made no progress during the cut"
kill -STOP "$TR0"
running "$TR0" || fail "$n: trainer 0 ended during the cut (job too short)"
wait_exit "$TR1" 30
[ "$rc" = 1 ] || fail "$n: trainer 1 exit $rc during the cut (want 1)"
has "$tmp/$n.tr1.log" "pserver 0 \($net\.1:[0-9]+\) has answered nothing for [0-9]+ s \(heartbeat_timeout_s 2\)" \
  "$n: trainer 1"
heal
mv "$tmp/$n.tr1.log" "$tmp/$n.tr1.first.log"
spawn TR1 "$tmp/$n.tr1.log" FLOTILLA_MODE=ps FLOTILLA_ROLE=TRAINER \
  FLOTILLA_PSERVERS_IP_PORT_LIST=$PSLIST FLOTILLA_TRAINER_ID=1 FLOTILLA_TRAINERS_NUM=2 -- \
  ip netns exec $nsB "$TRAINER" --config "$tmp/$n.yaml" --resume
wait_log "$tmp/$n.ps0.log" 'trainer 1 registered again after being declared dead' 45 ||
  fail "$n: trainer 1 did not register again within 45 s of the repair"
wait_log "$tmp/$n.tr1.log" 'rejoining the running job at step [0-9]+' 30 ||
  fail "$n: the restarted trainer 1 did not rejoin the running job"
kill -CONT "$TR0"
for t in 0 1; do
  wait_exit "$(eval echo \$TR$t)" 90
  [ "$rc" = 0 ] || fail "$n: trainer $t exit $rc"
  has "$tmp/$n.tr$t.log" 'done: 6400 steps, 100 epochs' "$n: trainer $t"
done
wait_exit "$PS0" 20
[ "$rc" = 0 ] || fail "$n: pserver exit $rc"
has "$tmp/$n.ps0.log" 'every trainer completed' "$n: pserver"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*.log

finish
