#!/bin/sh
# A real Slurm on this host: munged, slurmctld and slurmd (Debian's
# slurm-wlm) started as root from a private configuration in a temporary
# directory (one node, 2 CPUs, no cgroups: proctrack/linuxproc, task/none,
# no accounting), then `sbatch --wait` of a batch script that runs
# `srun -n 2 flotilla-trainer` on a short collective job.  The two trainers
# take their place from SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID /
# SLURM_STEP_NODELIST (no FLOTILLA_* place), meet at the first node's
# derived rendezvous (port 20000 + SLURM_JOB_ID mod 10000) and train to
# the end.  Then deploy/slurm/ps.sbatch as shipped (srun --multi-prog:
# 2 pservers + 4 trainers) trains a short PS job to the end on the same
# node, and deploy/slurm/collective.sbatch as shipped (its node and task
# counts overridden on sbatch's command line).  Ports, job ids, the munge socket and every file are this run's
# own, so that two runs side by side do not meet.  Every daemon is killed and the
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
  if [ -n "${SLURM_CONF:-}" ]; then
    # This run's controller only (SLURM_CONF): cancel what is left and give
    # the steps at most 15 s to end before the daemons go.
    timeout 5 scancel --quiet --user=root > /dev/null 2>&1
    for _ in $(seq 1 30); do
      [ -z "$(timeout 5 squeue -h -o %i 2> /dev/null)" ] && break
      sleep 0.5
    done
  fi
  for p in $pids; do kill "$p" 2> /dev/null; done
  sleep 1
  for p in $pids; do kill -9 "$p" 2> /dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
node=$(hostname -s)
# Ports of this run, free ones from the kernel, so that runs side by side
# (CI and a developer) and a system Slurm do not collide: slurmctld's and
# slurmd's; the collective job's rendezvous, which the trainers derive as
# 20000 + SLURM_JOB_ID mod 10000 (so the first job id is chosen to give a
# free one: FirstJobId); two consecutive ones for the PS job's pservers.
# free_ports N CONSECUTIVE LO HI
free_ports() {
  /usr/bin/python3 - "$@" << 'PY'
import random, socket, sys
n, consec, lo, hi = (int(x) for x in sys.argv[1:])
def free(p):
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", p)); return True
    except OSError:
        return False
    finally:
        s.close()
got = []
for _ in range(2000):
    if len(got) == n: break
    if consec:
        p = random.randrange(lo, hi - n)
        if all(free(p + i) for i in range(n)): got = list(range(p, p + n))
    else:
        p = random.randrange(lo, hi)
        if p not in got and free(p): got.append(p)
if len(got) != n: sys.exit(1)
print(" ".join(map(str, got)))
PY
}
ports=$(free_ports 3 0 30000 60000) || skip "no free ports found for slurmctld and slurmd"
set -- $ports
ctld_port=$1 d_port=$2
rdv_port=$(free_ports 1 0 20001 30000) || skip "no free port in 20001-29999 for the rendezvous"
first_job=$((rdv_port - 20000))
ps_port=$(free_ports 2 1 30000 60000) || skip "no two free ports for the pservers"
set -- $ps_port
ps_port=$1

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
FirstJobId=$first_job
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
  echo "--- slurmctld"; tail -n 15 "$tmp/slurmctld.log" "$tmp/slurmctld.out" 2> /dev/null
  echo "--- slurmd"; tail -n 15 "$tmp/slurmd.log" "$tmp/slurmd.out" 2> /dev/null
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
  # The port derived from the job id (FirstJobId was chosen for it).
  grep -q "place from slurm: trainer 1 of 2 .*rendezvous $node:$rdv_port" "$out" ||
    fail "trainer 1's rendezvous is not $node:$rdv_port (20000 + SLURM_JOB_ID $first_job mod 10000)"
  n=$(grep -c "done: 20 steps" "$out")
  [ "$n" = 2 ] || fail "want 2 trainers done with 20 steps, got $n"
fi
[ $fails -eq 0 ] && grep -E "place from slurm|all 2 ranks|done:" "$out"

# PS: deploy/slurm/ps.sbatch as shipped (srun --multi-prog: 2 pservers and
# 4 trainers in one step), on this one node (6 tasks on 2 CPUs: --overcommit).
sed 's/^data:$/data:\n  limit_train: 1024\n  limit_test: 200/; s/^  epochs: .*/  epochs: 2/' \
  "$EX/ps_sync_mlp_fmnist.yaml" > "$tmp/work/ps.yaml"
PATH=$FL_BUILDDIR:$PATH FLOTILLA_PS_PORT=$ps_port \
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

# deploy/slurm/collective.sbatch as shipped, on this one node: its #SBATCH
# lines (2 nodes x 4 tasks x 2 CPUs) overridden on sbatch's command line
# (1 node x 2 tasks x 1 CPU); the token from a file, as the script expects;
# MASTER_PORT exported (the script's documented alternative to the derived
# port), a free one.
sed 's/^  epochs: .*/  epochs: 1/' "$tmp/work/job.yaml" > "$tmp/work/job1.yaml"
printf 'slurm-collective-token\n' > "$tmp/work/token"
chmod 600 "$tmp/work/token"
cport=$(free_ports 1 0 30000 60000) || cport=$((30000 + $$ % 20000))
PATH=$FL_BUILDDIR:$PATH MASTER_PORT=$cport FLOTILLA_TOKEN_FILE=$tmp/work/token \
  FLOTILLA_CHECKPOINT_DIR=$tmp/work/collckpt \
  timeout 120 sbatch --wait --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --time=5 \
  --chdir="$tmp/work" --output="$tmp/work/coll-%j.out" \
  "$FL_SRCDIR/deploy/slurm/collective.sbatch" "$tmp/work/job1.yaml" > coll.sbatch.out 2>&1
rc=$?
collout=$(ls "$tmp"/work/coll-*.out 2> /dev/null | head -1)
[ $rc = 0 ] || fail "collective.sbatch: sbatch --wait exited $rc: $(cat coll.sbatch.out)"
if [ -z "$collout" ]; then
  fail "collective.sbatch: no job output"
else
  n=$(grep -c "place from slurm: trainer [01] of 2 .*rendezvous $node:$cport" "$collout")
  [ "$n" = 2 ] || fail "collective.sbatch: want 2 trainers placed by slurm at $node:$cport, got $n"
  n=$(grep -c "done: [0-9]* steps" "$collout")
  [ "$n" = 2 ] || fail "collective.sbatch: want 2 trainers done, got $n"
fi
if [ $fails -ne 0 ]; then
  [ -n "$out" ] && tail -n 30 "$out"
  [ -n "$psout" ] && tail -n 30 "$psout"
  [ -n "${collout:-}" ] && tail -n 30 "$collout"
  tail -n 15 "$tmp/slurmctld.log" "$tmp/slurmd.log" 2> /dev/null
  exit 1
fi
grep -E "done:" "$psout" "$collout"
echo "PASS: sbatch + srun -n 2 flotilla-trainer (collective), deploy/slurm/ps.sbatch (2 pservers + 4 trainers) and deploy/slurm/collective.sbatch trained to the end under Slurm"
