#!/bin/bash
# Authentication, TLS and binding, with the real daemons on loopback
# (faults_lib.sh; ps_probe is the gRPC client):
#   the token is never a flag: flotilla-trainer, flotilla-pserver and
#     flotilla-run refuse --token; while a PS job started by flotilla-run
#     runs, the token (given in FLOTILLA_TOKEN, or the random one
#     flotilla-run makes) is in no process's command line;
#   every call type of the PS service (11 methods) without the token or
#     with a wrong one gets UNAUTHENTICATED (the pserver reads its token
#     from a token file); with it, none does;
#   collective: a rank with a wrong token is refused at the rendezvous
#     (both sides say "wrong token") and the job fails within
#     collective_timeout_s; with the same token it trains; a connection
#     that opens with a data hello carrying a wrong or no token is refused
#     (REJECT "wrong token") and the job goes on;
#   TLS (certificates made with openssl at test time): a pserver with a
#     server certificate, trainers with the CA train through it; a client
#     without the CA, or trusting another CA, is refused; with mutual TLS
#     trainers present client certificates, and a client without one, or
#     with one from another CA, is refused;
#   binding: a pserver given 127.0.0.2 answers there and not on 127.0.0.1,
#     and so does a collective rank's listener.
. "$FL_SRCDIR/tests/integration/faults_lib.sh"
RUN=$FL_BUILDDIR/flotilla-run
TOKEN=k7-$$-Zq9xv3
TIMEOUT=6

# job FILE MODE [EXTRA CLUSTER KEYS]
job() {
  cat > "$1" << EOF
model: {kind: mlp, input_shape: [1, 8, 8], num_classes: 10, hidden: [32]}
data:
  format: synthetic
  synthetic: {kind: image, train_samples: 2048, test_samples: 128, seed: 3}
optimizer: {name: sgd, lr: 0.05}
train: {epochs: 1000, batch_size: 16, seed: 7, log_interval: 20, num_threads: 1, eval: false}
cluster: {mode: $2, heartbeat_timeout_s: 5, collective_timeout_s: $TIMEOUT${3:+, $3}}
strategy: {a_sync: false}
EOF
}

# connect HOST PORT: "open" or "refused" (plain TCP).
connect() {
  python3 -c 'import socket,sys
s = socket.socket(); s.settimeout(3)
try:
    s.connect((sys.argv[1], int(sys.argv[2]))); print("open")
except OSError:
    print("refused")' "$1" "$2"
}

# ------------------------------------------------------ the token is no flag
n=flags
f0=$fails
job "$tmp/$n.yaml" ps
for p in flotilla-trainer flotilla-pserver; do
  for form in "--token=$TOKEN" "--token $TOKEN"; do
    # shellcheck disable=SC2086 # the two forms, word-split
    "$FL_BUILDDIR/$p" --config "$tmp/$n.yaml" $form > "$tmp/$n.out" 2>&1
    rc=$?
    [ "$rc" = 2 ] || fail "$n: $p $form: exit $rc (want 2)"
    has "$tmp/$n.out" "--token" "$n: $p $form"
  done
done
"$RUN" --token "$TOKEN" "$tmp/$n.yaml" > "$tmp/$n.out" 2>&1
rc=$?
[ "$rc" = 2 ] || fail "$n: flotilla-run --token: exit $rc (want 2)"
has "$tmp/$n.out" "--token" "$n: flotilla-run --token"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n"

# --------------------------------------- the token is in no command line
# scan_argv TOKEN: while flotilla-run ($RUNPID) runs its job, read every
# process's command line; $seen counts the scans during which the pserver
# and both trainers (its children) were up, $leaks the command lines that
# held the token.  An empty TOKEN: flotilla-run's own, read from the
# environment of one of its trainers (into $gen_token).
scan_argv() {
  seen=0 leaks=0
  tok=$1
  for ((i = 0; i < 400 && seen < 5; i++)); do
    kill -0 "$RUNPID" 2> /dev/null || break
    kids=$(pgrep -P "$RUNPID")
    if [ -z "$tok" ]; then
      for p in $kids; do
        tok=$(tr '\0' '\n' 2> /dev/null < "/proc/$p/environ" | sed -n 's/^FLOTILLA_TOKEN=//p')
        [ -n "$tok" ] && break
      done
      gen_token=$tok
      [ -z "$tok" ] && { sleep 0.05; continue; }
    fi
    for c in /proc/[0-9]*/cmdline; do
      tr '\0' ' ' 2> /dev/null < "$c" | grep -qF -- "$tok" && leaks=$((leaks + 1))
    done
    up=0
    for p in $kids; do
      tr '\0' ' ' 2> /dev/null < "/proc/$p/cmdline" | grep -q 'flotilla-\(trainer\|pserver\) ' &&
        up=$((up + 1))
    done
    [ $up -ge 3 ] && seen=$((seen + 1))
    sleep 0.05
  done
}
n=argv
f0=$fails
job "$tmp/$n.yaml" ps
for how in env generated; do
  gen_token=
  if [ $how = env ]; then
    FLOTILLA_TOKEN=$TOKEN "$RUN" --log_dir "$tmp/$n.$how" --mode ps --server_num 1 \
      --nproc_per_node 2 "$tmp/$n.yaml" -- --max-steps 2000 > "$tmp/$n.$how.out" 2>&1 &
    RUNPID=$!
    scan_argv "$TOKEN"
  else
    "$RUN" --log_dir "$tmp/$n.$how" --mode ps --server_num 1 --nproc_per_node 2 \
      "$tmp/$n.yaml" -- --max-steps 2000 > "$tmp/$n.$how.out" 2>&1 &
    RUNPID=$!
    scan_argv ""
    [ -n "$gen_token" ] || fail "$n: no FLOTILLA_TOKEN in the environment of flotilla-run's trainers"
  fi
  for ((i = 0; i < 1200; i++)); do
    kill -0 $RUNPID 2> /dev/null || break
    sleep 0.1
  done
  kill -TERM $RUNPID 2> /dev/null
  wait $RUNPID
  # (not flotilla-run's status: it can take the pserver's normal exit,
  # once every trainer completed, for a failure when the trainers take
  # longer to exit than the pserver)
  for t in 0 1; do
    has "$tmp/$n.$how/workerlog.$t" '\] done: 2000 steps' "$n ($how token): trainer $t"
  done
  [ $seen -ge 1 ] || fail "$n ($how token): never saw the pserver and both trainers running"
  [ $leaks = 0 ] || fail "$n ($how token): the token is in $leaks command line(s)"
  has "$tmp/$n.$how/serverlog.0" 'token checked on every call' "$n ($how token): pserver"
done
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n (the token in no command line; $seen scans with every daemon up)" ||
  show "$tmp/$n".*.out

# -------------------------------------------- every PS call type checked
n=calls
f0=$fails
job "$tmp/$n.yaml" ps
printf '%s\n' "$TOKEN" > "$tmp/$n.token"
chmod 600 "$tmp/$n.token"
PSLIST=127.0.0.1:$(free_port)
JOB_ENV="FLOTILLA_TOKEN_FILE=$tmp/$n.token" start_pserver $n "$tmp/$n.yaml" 0 1
if wait_log "$tmp/$n.ps0.log" '\] serving .*token checked on every call' 20; then
  for who in none wrong right; do
    case $who in
    none) "$PROBE" calls "$PSLIST" > "$tmp/$n.$who" 2>&1 ;;
    wrong) FLOTILLA_TOKEN=${TOKEN}x "$PROBE" calls "$PSLIST" > "$tmp/$n.$who" 2>&1 ;;
    right) FLOTILLA_TOKEN=$TOKEN "$PROBE" calls "$PSLIST" > "$tmp/$n.$who" 2>&1 ;;
    esac
    total=$(grep -c '^[A-Za-z]* [A-Z_]*$' "$tmp/$n.$who")
    unauth=$(grep -c ' UNAUTHENTICATED$' "$tmp/$n.$who")
    [ "$total" = 11 ] || fail "$n: $who token: $total answers, want 11: $(cat "$tmp/$n.$who")"
    if [ $who = right ]; then
      [ "$unauth" = 0 ] || fail "$n: the right token was refused: $(grep UNAUTH "$tmp/$n.$who")"
    else
      [ "$unauth" = 11 ] ||
        fail "$n: $who token: only $unauth of 11 calls UNAUTHENTICATED: $(cat "$tmp/$n.$who")"
    fi
  done
  has "$tmp/$n.ps0.log" 'rejected a call without the right token' "$n: pserver"
else
  fail "$n: the pserver did not start"
fi
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n (11 methods)" || show "$tmp/$n".*

# ------------------------------------------------ collective rendezvous
n=rdv
f0=$fails
job "$tmp/$n.yaml" collective
EPLIST=127.0.0.1:$(free_port),127.0.0.1:$(free_port)
for r in 0 1; do
  tok=$TOKEN
  [ $r = 1 ] && tok=not-$TOKEN
  spawn TR$r "$tmp/$n.tr$r.log" FLOTILLA_MODE=collective FLOTILLA_TRAINER_ID=$r FLOTILLA_TRAINERS_NUM=2 \
    FLOTILLA_TRAINER_ENDPOINTS=$EPLIST FLOTILLA_TOKEN=$tok -- "$TRAINER" --config "$tmp/$n.yaml"
done
t0=$SECONDS
for r in 0 1; do
  wait_exit "$(eval echo \$TR$r)" $((TIMEOUT + 25))
  [ "$rc" = 1 ] || fail "$n: rank $r exit $rc with mismatched tokens (want 1)"
done
[ $((SECONDS - t0)) -le $((TIMEOUT + 15)) ] || fail "$n: took $((SECONDS - t0)) s to fail"
has "$tmp/$n.tr0.log" 'refused connection from 127\.0\.0\.1:[0-9]+ \(claiming rank 1\): wrong token' \
  "$n: rank 0"
has "$tmp/$n.tr1.log" 'wrong token' "$n: rank 1"
hasnt "$tmp/$n.tr0.log" '^\[Epoch' "$n: rank 0"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n (wrong token refused)" || show "$tmp/$n".*.log

# ------------------------------- the TCP handshake of a running job
# A frame is {u32 type, u32 len} + payload; a data hello (type 4) is
# u32 magic "FLCO", u32 version 1, i32 rank, i32 world, u64 session,
# u32 tag, u32 ring, u16 port, u16 host_len, u16 token_len, host, token
# (trainer/collective/reduce.c).  The answer to a refusal is REJECT (3).
n=handshake
f0=$fails
job "$tmp/$n.yaml" collective
JOB_ENV="FLOTILLA_TOKEN=$TOKEN" coll_job $n "$tmp/$n.yaml" 2 127.0.0.1
wait_log "$tmp/$n.tr0.log" '^\[Epoch 0, batch 20\]' 30 || fail "$n: the job did not start"
rank0=${EPLIST%%,*}
for tok in "wrong-$TOKEN" ""; do
  python3 - "${rank0%:*}" "${rank0#*:}" "$tok" > "$tmp/$n.intruder" 2>&1 << 'PY'
import socket, struct, sys
host, port, token = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
hello = struct.pack("<IIiiQIIHHH", 0x4f434c46, 1, 1, 2, 0, 0, 0, 0, 0, len(token)) + token
s = socket.create_connection((host, port), timeout=5)
s.sendall(struct.pack("<II", 4, len(hello)) + hello)
head = b""
while len(head) < 8:
    b = s.recv(8 - len(head))
    if not b:
        break
    head += b
if len(head) == 8:
    kind, n = struct.unpack("<II", head)
    print("answer", kind, s.recv(n).decode(errors="replace"))
else:
    print("closed")
PY
  has "$tmp/$n.intruder" '^answer 3 wrong token$' "$n: intruder with token '$tok'"
done
# the job trains on
before=$(grep -c '^\[Epoch' "$tmp/$n.tr0.log")
sleep 0.5
[ "$(grep -c '^\[Epoch' "$tmp/$n.tr0.log")" -gt "$before" ] || fail "$n: no progress after the intruders"
running "$TR0" && running "$TR1" || fail "$n: a rank ended after the intruders"
[ "$(grep -c 'refused connection from 127\.0\.0\.1:[0-9]* (claiming rank 1): wrong token' \
  "$tmp/$n.tr0.log")" = 2 ] || fail "$n: rank 0 did not log both refusals"
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n (data hellos with a wrong and no token refused; the job trains on)" ||
  show "$tmp/$n".*

# ---------------------------------------------------------------- TLS
n=tls
if command -v openssl > /dev/null; then
  f0=$fails
  pki=$tmp/pki
  mkdir -p "$pki"
  # cert NAME CN ISSUER EXTENSIONS: an EC key and a certificate signed by ISSUER
  cert() {
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$pki/$1.key" \
      -subj "/CN=$2" -out "$pki/$1.csr" 2>> "$pki/log" &&
      printf "$4" > "$pki/$1.ext" &&
      openssl x509 -req -in "$pki/$1.csr" -CA "$pki/$3.crt" -CAkey "$pki/$3.key" -CAcreateserial \
        -days 2 -extfile "$pki/$1.ext" -out "$pki/$1.crt" 2>> "$pki/log"
  }
  for ca in ca rogue; do
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$pki/$ca.key" \
      -subj "/CN=flotilla test $ca" -days 2 -out "$pki/$ca.crt" 2>> "$pki/log" ||
      fail "$n: openssl could not make a CA: $(tail -n 3 "$pki/log")"
  done
  cert server 127.0.0.1 ca 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' &&
    cert client trainer ca 'extendedKeyUsage=clientAuth\n' &&
    cert intruder intruder rogue 'extendedKeyUsage=clientAuth\n' ||
    fail "$n: openssl could not make the certificates: $(tail -n 3 "$pki/log")"
  for mutual in false true; do
    m=$n.$mutual
    tls="tls: {cert: $pki/server.crt, key: $pki/server.key, ca: $pki/ca.crt, mutual: $mutual}"
    job "$tmp/$m.yaml" ps "$tls"
    sed -i 's/epochs: 1000/epochs: 2/' "$tmp/$m.yaml"
    # the trainers' copy: their own certificate (used with mutual TLS)
    sed -e 's|/server\.crt|/client.crt|; s|/server\.key|/client.key|' "$tmp/$m.yaml" > "$tmp/$m.tr.yaml"
    PSLIST=127.0.0.1:$(free_port)
    start_pserver $m "$tmp/$m.yaml" 0 2
    wait_log "$tmp/$m.ps0.log" '\] serving ' 20 || fail "$m: the pserver did not start"
    want=TLS
    [ $mutual = true ] && want="mutual TLS"
    has "$tmp/$m.ps0.log" "\] serving .*; $want," "$m: pserver"
    # probe WHAT NAME=VALUE...: a Stats call with those settings -> $tmp/$m.WHAT
    probe() {
      _w=$1
      shift
      env FL_PROBE_TIMEOUT=3 "$@" "$PROBE" stats "$PSLIST" > "$tmp/$m.$_w" 2>&1
    }
    probe insecure || true
    probe rogue_ca FL_PROBE_TLS_CA="$pki/rogue.crt" || true
    probe ca FL_PROBE_TLS_CA="$pki/ca.crt"
    probe client FL_PROBE_TLS_CA="$pki/ca.crt" FL_PROBE_TLS_CERT="$pki/client.crt" \
      FL_PROBE_TLS_KEY="$pki/client.key"
    probe intruder FL_PROBE_TLS_CA="$pki/ca.crt" FL_PROBE_TLS_CERT="$pki/intruder.crt" \
      FL_PROBE_TLS_KEY="$pki/intruder.key" || true
    has "$tmp/$m.insecure" '^error: UNAVAILABLE' "$m: a client without TLS"
    has "$tmp/$m.rogue_ca" '^error: UNAVAILABLE' "$m: a client trusting another CA"
    has "$tmp/$m.client" '^step 0$' "$m: a client with the CA and a client certificate"
    if [ $mutual = true ]; then
      has "$tmp/$m.ca" '^error: UNAVAILABLE' "$m: a client without a certificate"
      has "$tmp/$m.intruder" '^error: UNAVAILABLE' "$m: a client certificate of another CA"
      # gRPC's own log line on the server side
      has "$tmp/$m.ps0.log" 'Handshake failed.*peer did not return a certificate' "$m: pserver"
    else
      has "$tmp/$m.ca" '^step 0$' "$m: a client with the CA"
    fi
    start_trainer $m "$tmp/$m.tr.yaml" 0 2
    start_trainer $m "$tmp/$m.tr.yaml" 1 2
    for t in 0 1; do
      wait_exit "$(eval echo \$TR$t)" 60
      [ "$rc" = 0 ] || fail "$m: trainer $t exit $rc"
      has "$tmp/$m.tr$t.log" 'done: 128 steps' "$m: trainer $t"
    done
    wait_exit "$PS0" 20
    [ "$rc" = 0 ] || fail "$m: pserver exit $rc"
  done
  ran=$((ran + 1))
  [ $fails = "$f0" ] && ok "$n (server TLS and mutual TLS; refusals)" || show "$tmp/$n".*
else
  echo "SKIP: $n (no openssl; apt-get install openssl)"
fi

# -------------------------------------------- only the configured address
n=bind
f0=$fails
job "$tmp/$n.yaml" ps
port=$(free_port 127.0.0.2)
PSLIST=127.0.0.2:$port
start_pserver $n "$tmp/$n.yaml" 0 1
if wait_log "$tmp/$n.ps0.log" '\] serving ' 20; then
  "$PROBE" stats 127.0.0.2:$port > "$tmp/$n.there" 2>&1 || fail "$n: no answer on 127.0.0.2:$port"
  FL_PROBE_TIMEOUT=3 "$PROBE" stats 127.0.0.1:$port > "$tmp/$n.elsewhere" 2>&1 &&
    fail "$n: the pserver of 127.0.0.2:$port answers on 127.0.0.1:$port"
  [ "$(connect 127.0.0.1 $port)" = refused ] || fail "$n: 127.0.0.1:$port accepts connections"
else
  fail "$n: the pserver did not start"
fi
job "$tmp/$n.c.yaml" collective
JOB_ENV="FLOTILLA_TOKEN=$TOKEN" coll_job $n.c "$tmp/$n.c.yaml" 2 127.0.0.2
if wait_log "$tmp/$n.c.tr0.log" '^\[Epoch 0, batch 20\]' 30; then
  for ep in ${EPLIST//,/ }; do
    [ "$(connect 127.0.0.2 "${ep#*:}")" = open ] || fail "$n: rank at $ep does not listen there"
    [ "$(connect 127.0.0.1 "${ep#*:}")" = refused ] || fail "$n: rank at $ep listens on 127.0.0.1"
  done
else
  fail "$n: the collective job did not start"
fi
ran=$((ran + 1))
[ $fails = "$f0" ] && ok "$n" || show "$tmp/$n".*

finish
