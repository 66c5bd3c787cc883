#!/bin/sh
# A real Slurm on this host: munged, slurmctld and slurmd (Debian's
# slurm-wlm) started as root from a private configuration in a temporary
# directory (one node, 2 CPUs, no cgroups: proctrack/linuxproc, task/none,
# no accounting), then `sbatch --wait` of a batch script that runs
# `srun -n 2 flotilla-trainer` on a short collective job.  The two trainers
# take their place from SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID /
# SLURM_STEP_NODELIST (no FLOTILLA_* place), meet at the first node's
# derived rendezvous and train to the end.  Then deploy/slurm/ps.sbatch as
# shipped (srun --multi-prog: 2 pservers + 4 trainers) trains a short PS
# job to the end on the same node.  Every daemon is killed and the
# directory removed on exit, whatever happens; the whole is bounded in
# time.  SKIP (77) with the reason when Slurm cannot start here (not root,
# binaries missing, daemons that do not come up).
set -u
TRAINER=$FL_BUILDDIR/flotilla-trainer
EX=$FL_SRCDIR/deploy/examples
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root to run slurmctld, slurmd and munged"
for b in munged mungekey slurmctld slurmd sbatch srun scontrol sinfo; do
  command -v "$b" > /dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || skip "$b not installed (deploy/deps.sh installs slurm-wlm and munge)"
done
PATH=$PATH:/usr/sbin
tmp=$(mktemp -d /tmp/fl_slurm.XXXXXX)
chmod 700 "$tmp"
pids=""
cleanup() {
  [ -n "${SLURM_CONF:-}" ] && timeout 5 scancel --quiet --user=root > /dev/null 2>&1
  for p in $pids; do kill "$p" 2> /dev/null; done
  sleep 1
  for p in $pids; do kill -9 "$p" 2> /dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
node=$(hostname -s)
# Ports of this run: free ones from the kernel, so that parallel runs and a
# system Slurm do not collide.
ports=$(/usr/bin/python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))' 2> /dev/null) || ports="$((16817 + $$ % 1000)) $((17817 + $$ % 1000))"
set -- $ports
ctld_port=$1 d_port=$2

mkdir -p "$tmp/state" "$tmp/spool" "$tmp/munge" "$tmp/work"
chmod 700 "$tmp/munge"
mungekey --create --keyfile="$tmp/munge/munge.key" > "$tmp/mungekey.log" 2>&1 ||
  skip "mungekey cannot make a key: $(cat "$tmp/mungekey.log")"
chmod 600 "$tmp/munge/munge.key"
munged --foreground --force --socket="$tmp/munge/munge.sock" --key-file="$tmp/munge/munge.key" \
  --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munge/munged.log" \
  --seed-file="$tmp/munge/munged.seed" > "$tmp/munged.out" 2>&1 &
pids="$pids $!"

cat > "$tmp/slurm.conf" <<CONF
ClusterName=fltest
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge/munge.sock
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$node NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=fltest Nodes=$node Default=YES MaxTime=10 State=UP OverSubscribe=YES
CONF
export SLURM_CONF="$tmp/slurm.conf"
slurmctld -D -i -f "$SLURM_CONF" > "$tmp/slurmctld.out" 2>&1 &
pids="$pids $!"
slurmd -D -N "$node" -f "$SLURM_CONF" > "$tmp/slurmd.out" 2>&1 &
pids="$pids $!"

# Wait (at most 30 s) for the node to be idle.
up=0
for _ in $(seq 1 60); do
  state=$(timeout 5 sinfo -h -n "$node" -o %t 2> /dev/null)
  case $state in idle*|mix*) up=1; break ;; esac
  sleep 0.5
done
if [ $up = 0 ]; then
  echo "--- slurmctld"; tail -15 "$tmp/slurmctld.log" "$tmp/slurmctld.out" 2> /dev/null
  echo "--- slurmd"; tail -15 "$tmp/slurmd.log" "$tmp/slurmd.out" 2> /dev/null
  skip "Slurm did not come up here within 30 s (node state '${state:-none}'; logs above)"
fi

sed 's/^data:$/data:\n  limit_train: 2048\n  limit_test: 500/' \
  "$EX/collective_mlp_fmnist.yaml" > "$tmp/work/job.yaml"
cat > "$tmp/work/job.sbatch" <<JOB
#!/bin/sh
#SBATCH --job-name=flotilla-collective
#SBATCH --ntasks=2
#SBATCH --time=5
#SBATCH --output=$tmp/work/slurm-%j.out
export FLOTILLA_TOKEN=slurm-test-token
export FLOTILLA_CHECKPOINT_DIR=$tmp/work/ckpt
srun -n 2 --kill-on-bad-exit=1 $TRAINER --config $tmp/work/job.yaml --max-steps 20
JOB
cd "$tmp/work" || exit 1
timeout 180 sbatch --wait --chdir="$tmp/work" job.sbatch > sbatch.out 2>&1
rc=$?
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
out=$(ls "$tmp"/work/slurm-*.out 2> /dev/null | head -1)
[ $rc = 0 ] || fail "sbatch --wait exited $rc: $(cat sbatch.out)"
if [ -z "$out" ]; then
  fail "no job output"
else
  n=$(grep -c "place from slurm: trainer [01] of 2" "$out")
  [ "$n" = 2 ] || fail "want 2 trainers placed by slurm, got $n"
  grep -q "all 2 ranks registered" "$out" || fail "no rendezvous of the 2 ranks"
  n=$(grep -c "done: 20 steps" "$out")
  [ "$n" = 2 ] || fail "want 2 trainers done with 20 steps, got $n"
fi
[ $fails -eq 0 ] && grep -E "place from slurm|all 2 ranks|done:" "$out"

# PS: deploy/slurm/ps.sbatch as shipped (srun --multi-prog: 2 pservers and
# 4 trainers in one step), on this one node (6 tasks on 2 CPUs: --overcommit).
sed 's/^data:$/data:\n  limit_train: 1024\n  limit_test: 200/; s/^  epochs: .*/  epochs: 2/' \
  "$EX/ps_sync_mlp_fmnist.yaml" > "$tmp/work/ps.yaml"
ps_port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2> /dev/null || echo $((21000 + $$ % 1000)))
PATH=$FL_BUILDDIR:$PATH FLOTILLA_SLURM_DIR=$FL_SRCDIR/deploy/slurm FLOTILLA_PS_PORT=$ps_port \
  FLOTILLA_TOKEN=slurm-ps-token FLOTILLA_TOKEN_FILE= FLOTILLA_CHECKPOINT_DIR=$tmp/work/psckpt \
  timeout 120 sbatch --wait --nodes=1 --overcommit --time=5 --chdir="$tmp/work" --output="$tmp/work/ps-%j.out" \
  "$FL_SRCDIR/deploy/slurm/ps.sbatch" "$tmp/work/ps.yaml" > ps.sbatch.out 2>&1
rc=$?
psout=$(ls "$tmp"/work/ps-*.out 2> /dev/null | head -1)
[ $rc = 0 ] || fail "ps.sbatch: sbatch --wait exited $rc: $(cat ps.sbatch.out) $(timeout 5 squeue -h -o '%i %T %r' 2> /dev/null)"
if [ -z "$psout" ]; then
  fail "ps.sbatch: no job output"
else
  n=$(grep -c "done: [0-9]* steps, 2 epochs" "$psout")
  [ "$n" = 4 ] || fail "ps.sbatch: want 4 trainers done with 2 epochs, got $n"
fi
if [ $fails -ne 0 ]; then
  [ -n "$out" ] && tail -30 "$out"
  [ -n "$psout" ] && tail -30 "$psout"
  tail -15 "$tmp/slurmctld.log" "$tmp/slurmd.log" 2> /dev/null
  exit 1
fi
grep -E "done:" "$psout"
echo "PASS: sbatch + srun -n 2 flotilla-trainer (collective) and deploy/slurm/ps.sbatch (2 pservers + 4 trainers) trained to the end under Slurm"
