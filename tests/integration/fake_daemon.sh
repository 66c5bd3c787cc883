#!/bin/sh
# fake_daemon.sh - a stand-in for flotilla-trainer / flotilla-pserver in the
# tests of flotilla-run's supervisor (start, logs, failure, restart,
# signals), so they do not depend on training.  Its behaviour comes from
# FAKE_MODE; it records its arguments and FLOTILLA_* environment in
# $FAKE_DIR/<role>.<id>.env.
#   FAKE_MODE=ok       trainers print progress lines and exit 0; pservers
#                      wait for SIGTERM and exit 0
#   FAKE_MODE=fail     trainer 1 prints an error and exits 3; the others
#                      wait for SIGTERM
#   FAKE_MODE=restart  trainer 1 fails unless started with --resume, the
#                      others wait for SIGTERM unless started with --resume
#   FAKE_MODE=hang     trainer 1 exits 4; the others ignore SIGTERM
#   FAKE_MODE=wait     everybody waits for SIGTERM
#   FAKE_MODE=cascade  trainer 1 logs an error, ignores SIGTERM and exits 3
#                      0.3 s later; meanwhile trainer 0 logs that rank 1
#                      aborted and exits 1 first; the others wait for SIGTERM
#   FAKE_MODE=twokill  trainer 1 SIGKILLs trainer 2 and itself at once (as an
#                      OOM killer would); the others wait for SIGTERM
#   FAKE_MODE=pskill   pserver 0 SIGKILLs itself; the others wait for SIGTERM
set -u
role=${FLOTILLA_ROLE:-TRAINER}
if [ "$role" = PSERVER ]; then id=${FLOTILLA_PSERVER_ID:-0}; else id=${FLOTILLA_TRAINER_ID:-0}; fi
resume=no
for a in "$@"; do [ "$a" = --resume ] && resume=yes; done
{
  echo "args: $*"
  env | grep '^FLOTILLA_' | sort
} > "$FAKE_DIR/$role.$id.env"
echo "fake $role $id starting (resume: $resume)"

wait_for_term() {
  trap 'echo "fake $role $id: SIGTERM"; exit 0' TERM
  i=0
  while [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
  echo "fake $role $id: nobody stopped me"
  exit 9
}

if [ "$role" = PSERVER ]; then
  if [ "${FAKE_MODE:-ok}" = pskill ] && [ "$id" = 0 ]; then
    sleep 0.3
    echo "fake pserver 0: serving"
    kill -KILL $$
  fi
  wait_for_term
fi
case "${FAKE_MODE:-ok}" in
  ok)
    echo "training fake: 2 epochs of 4 steps (1 x 10 samples, rank $id of ${FLOTILLA_TRAINERS_NUM:-1}), x"
    for e in 0 1; do
      for b in 0 1 2 3; do
        echo "[Epoch $e, batch $b] loss: 2.$((9 - b)), acc1: 0.$((e * 4 + b + 1))"
        sleep 0.05
      done
      echo "[Epoch $e] test loss: 1.$((5 - e)), acc1: 0.$((6 + e))"
    done
    exit 0 ;;
  fail)
    if [ "$id" = 1 ]; then
      sleep 0.3
      echo "E [trainer 1] data: cannot open /nonexistent/train-images: No such file" >&2
      exit 3
    fi
    wait_for_term ;;
  restart)
    if [ "$id" = 1 ] && [ "$resume" = no ]; then
      sleep 0.2
      echo "E [trainer 1] crashed on purpose" >&2
      exit 5
    fi
    if [ "$resume" = yes ]; then
      echo "fake trainer $id resumed"
      echo "[Epoch 0, batch 0] loss: 1.0, acc1: 0.5"
      exit 0
    fi
    wait_for_term ;;
  wait | pskill)
    wait_for_term ;;
  cascade)
    case $id in
      1)
        trap '' TERM
        sleep 0.3
        echo "E [trainer 1] data: cannot open /nonexistent/part-1: No such file" >&2
        sleep 0.3
        exit 3 ;;
      0)
        sleep 0.45
        echo "E [trainer 0] collective rank 0: rank 1 (127.0.0.1:1) aborted: its training loop stopped before the end of the run" >&2
        exit 1 ;;
    esac
    wait_for_term ;;
  twokill)
    if [ "$id" = 2 ]; then echo $$ > "$FAKE_DIR/trainer2.pid"; fi
    if [ "$id" = 1 ]; then
      i=0
      while [ ! -s "$FAKE_DIR/trainer2.pid" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
      sleep 0.2
      trap "" TERM
      echo "fake trainer 1: going down with trainer 2"
      kill -KILL "$(cat "$FAKE_DIR/trainer2.pid")" $$
    fi
    wait_for_term ;;
  hang)
    if [ "$id" = 1 ]; then sleep 0.3; exit 4; fi
    trap 'echo "fake trainer $id: ignoring SIGTERM"' TERM
    i=0
    while [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    exit 9 ;;
esac
