# netns_lib.sh - sourced (by bash) by the multi-node tests and benchmarks:
# N "nodes" as network namespaces, each with one address on a private test
# subnet, joined by veth pairs to a bridge that lives in a namespace of its
# own ("switch"), so that no traffic ever reaches the host's network.  Each
# node's link can be shaped: a rate (both directions), a one-way delay and
# a loss rate (on the node's egress), by `tc netem` when the kernel has it.
# Without sch_netem the rate is applied by `tc tbf`; a delay (with or
# without a loss) replaces the node's veth pair by netns_wire
# (tests/integration/netns_wire.c: two TAP devices and a process that holds
# the node's outgoing frames DELAY and drops LOSS of them), and a loss
# alone is an nftables `numgen random` drop rule.  fl_ns_shape prints what
# it used.  Every process left in the namespaces is killed and every
# namespace deleted on exit (trap), whatever happens; the scripts bound
# every wait.
#
#   fl_ns_setup N        make nodes 0..N-1; FL_NS[i] (namespace), FL_IP[i]
#                        (address), FL_NET (the /24), FL_NS_NETEM (1 when
#                        netem works); returns 77 (printing why) when it
#                        cannot make them
#   fl_ns_shape I RATE DELAY LOSS   e.g. fl_ns_shape 1 1gbit 2ms 1 ("-"
#                        leaves that one out; DELAY in ms or us, LOSS in
#                        percent); returns 3 when a delay is asked, there is
#                        no netem and no netns_wire (FL_NS_WIRE)
#   fl_ns_exec I CMD...  run CMD in node I's namespace
#   fl_ns_port [N]       a port P, P..P+N-1 free to listen on in any node
#   fl_ns_cut I / fl_ns_heal I      take node I's link down / up again
#   fl_ns_dropped I      packets node I's loss (nftables rule or wire) dropped
#   fl_ns_rtt_ms I J     one TCP handshake's round trip from node I to J, ms
#   fl_ns_cleanup        kill, delete everything (also run by the EXIT trap)
# Names: flsw<TAG> and flnd<TAG>-<i>, TAG from the process id and a random
# number, taken again when a name is in use, so that runs side by side
# (CI and a developer, two builds) never share a namespace; the subnet
# 10.77.X.0/24 lives inside them only.
set -u
FL_NET=10.77.$(($$ % 250 + 1))
FL_NS_TAG=
FL_NS_SW=
FL_NS=()
FL_IP=()
FL_NS_NETEM=0
FL_NS_WIRE=${FL_NS_WIRE:-${FL_BUILDDIR:-.}/tests/integration/netns_wire}
fl_ns_made=""
fl_ns_wires=""
fl_ns_wire_dir=""
declare -A fl_ns_wire_stats=()
declare -A fl_ns_wire_pid=()

fl_ns_cleanup() {
  local n p left t
  # Whatever still runs inside our namespaces (daemons of a failed part, a
  # wire) is ours: TERM, then KILL what is left after at most 3 s.
  for n in $fl_ns_made; do
    for p in $(ip netns pids "$n" 2> /dev/null); do kill -TERM "$p" 2> /dev/null; done
  done
  for p in $fl_ns_wires; do kill -TERM "$p" 2> /dev/null; done
  for ((t = 0; t < 30; t++)); do
    left=""
    for n in $fl_ns_made; do left="$left$(ip netns pids "$n" 2> /dev/null)"; done
    for p in $fl_ns_wires; do kill -0 "$p" 2> /dev/null && left="$left $p"; done
    [ -z "$left" ] && break
    sleep 0.1
  done
  for n in $fl_ns_made; do
    for p in $(ip netns pids "$n" 2> /dev/null); do kill -KILL "$p" 2> /dev/null; done
  done
  for p in $fl_ns_wires; do kill -KILL "$p" 2> /dev/null; done
  for n in $fl_ns_made; do ip netns del "$n" 2> /dev/null; done
  fl_ns_made=""
  fl_ns_wires=""
  [ -n "$fl_ns_wire_dir" ] && rm -rf "$fl_ns_wire_dir"
  fl_ns_wire_dir=""
}

# fl_ns_add NAME: ip netns add, 1 when NAME exists already.
fl_ns_add() {
  local e
  e=$(ip netns add "$1" 2>&1) && return 0
  echo "$e" >&2
  case $e in *[Ee]xists*) return 1 ;; esac
  return 2
}

fl_ns_setup() {
  local n=$1 i err
  if [ "$(id -u)" != 0 ]; then
    echo "SKIP: network namespaces need root"
    return 77
  fi
  if ! command -v ip > /dev/null 2>&1; then
    echo "SKIP: no ip command (apt-get install iproute2)"
    return 77
  fi
  err=$(mktemp)
  # A tag whose switch name is free (at most 20 tries); the node names
  # carry the same tag.
  local try rc
  for ((try = 0; try < 20; try++)); do
    FL_NS_TAG=$(($$ % 100000))r$RANDOM
    FL_NS_SW=flsw$FL_NS_TAG
    fl_ns_add $FL_NS_SW 2> "$err"
    rc=$?
    [ $rc = 1 ] || break
  done
  if ! { [ $rc = 0 ] && fl_ns_made="$FL_NS_SW" &&
    ip -n $FL_NS_SW link add br0 type bridge && ip -n $FL_NS_SW link set br0 up &&
    ip -n $FL_NS_SW link set lo up; } 2> "$err"; then
    echo "SKIP: cannot make a namespace with a bridge here: $(head -1 "$err")"
    rm -f "$err"
    fl_ns_cleanup
    return 77
  fi
  for ((i = 0; i < n; i++)); do
    FL_NS[i]=flnd$FL_NS_TAG-$i
    FL_IP[i]=$FL_NET.$((i + 1))
    if ! { fl_ns_add ${FL_NS[i]} && fl_ns_made="$fl_ns_made ${FL_NS[i]}" &&
      ip -n ${FL_NS[i]} link add eth0 type veth peer name p$i netns $FL_NS_SW &&
      ip -n ${FL_NS[i]} addr add ${FL_IP[i]}/24 dev eth0 &&
      ip -n ${FL_NS[i]} link set lo up && ip -n ${FL_NS[i]} link set eth0 up &&
      ip -n $FL_NS_SW link set p$i master br0 && ip -n $FL_NS_SW link set p$i up; } 2> "$err"; then
      echo "SKIP: cannot make node $i's namespace and veth pair here: $(head -1 "$err")"
      rm -f "$err"
      fl_ns_cleanup
      return 77
    fi
  done
  # Does this kernel have netem?
  if tc -n ${FL_NS[0]} qdisc add dev eth0 root netem delay 0ms 2> /dev/null; then
    FL_NS_NETEM=1
    tc -n ${FL_NS[0]} qdisc del dev eth0 root 2> /dev/null
  fi
  rm -f "$err"
  # Wait (at most 5 s) until node 0 reaches the last node: the bridge
  # forwards once its ports have left the learning state.
  local t
  for ((t = 0; t < 50; t++)); do
    ip netns exec ${FL_NS[0]} bash -c "exec 3<>/dev/tcp/${FL_IP[n - 1]}/9" 2> "$err"
    grep -q -i "refused" "$err" && break
    sleep 0.1
  done
  rm -f "$err"
  return 0
}

fl_ns_exec() {
  local i=$1
  shift
  ip netns exec "${FL_NS[i]}" "$@"
}

# fl_ns_port [N]: a random base port for N consecutive listening ports in
# the nodes, 16384..32767: a fresh namespace has no listener, but the
# kernel hands ports from 32768 up (its ephemeral range) to the node's own
# outgoing connections, and a rank's listen on one of those fails with
# "address already in use".
fl_ns_port() {
  echo $((16384 + RANDOM % (16384 - ${1:-1})))
}

# tbf's bucket: about 1 ms of the rate (tbf's watchdog is an hrtimer, so
# it need not hold a whole HZ tick), at least 64 KiB (one GSO packet);
# a larger one lets messages below it pass at full speed.
fl_ns_burst() {
  case $1 in
    *gbit) echo $((${1%gbit} * 128))kb ;;
    *) echo 64kb ;;
  esac
}

# fl_ns_us DELAY: microseconds of "2ms", "500us" or "2" (ms).
fl_ns_us() {
  awk -v d="$1" 'BEGIN { u = 1000; if (d ~ /us$/) u = 1; else if (d ~ /s$/ && d !~ /ms$/) u = 1e6;
    sub(/[a-z]+$/, "", d); printf "%d", d * u + 0.5 }'
}

# fl_ns_wire I DELAY_US LOSS_PPM: node I's veth pair replaced by netns_wire's
# two TAP devices, same names (eth0 in the node, pI on the bridge), same
# address.  0 when the wire runs and the node's end is up.
fl_ns_wire() {
  local i=$1 dus=$2 ppm=$3 t old=${fl_ns_wire_pid[$1]:-}
  [ -x "$FL_NS_WIRE" ] || { echo "netns_lib: no $FL_NS_WIRE (make all builds it)"; return 1; }
  [ -n "$fl_ns_wire_dir" ] || fl_ns_wire_dir=$(mktemp -d /tmp/fl_ns_wire.XXXXXX) || return 1
  if [ -n "$old" ]; then
    kill -TERM "$old" 2> /dev/null
    for ((t = 0; t < 50; t++)); do kill -0 "$old" 2> /dev/null || break; sleep 0.1; done
  fi
  ip -n ${FL_NS[i]} link del eth0 2> /dev/null # a veth pair: pI goes with it
  for ((t = 0; t < 50; t++)); do
    ip -n $FL_NS_SW link show p$i > /dev/null 2>&1 || ip -n ${FL_NS[i]} link show eth0 > /dev/null 2>&1 || break
    sleep 0.1
  done
  local st=$fl_ns_wire_dir/$i
  rm -f "$st"
  "$FL_NS_WIRE" ${FL_NS[i]} eth0 $FL_NS_SW p$i "$dus" "$ppm" $((i + 1)) "$st" 2> "$st.err" &
  fl_ns_wire_pid[$i]=$!
  fl_ns_wires="$fl_ns_wires $!"
  fl_ns_wire_stats[$i]=$st
  for ((t = 0; t < 50; t++)); do [ -s "$st" ] && break; sleep 0.1; done
  [ -s "$st" ] || { echo "netns_lib: netns_wire for node $i did not start: $(cat "$st.err")"; return 1; }
  ip -n ${FL_NS[i]} link set eth0 mtu 1500 &&
    ip -n ${FL_NS[i]} addr add ${FL_IP[i]}/24 dev eth0 &&
    ip -n ${FL_NS[i]} link set eth0 up &&
    ip -n $FL_NS_SW link set p$i mtu 1500 &&
    ip -n $FL_NS_SW link set p$i master br0 && ip -n $FL_NS_SW link set p$i up
}

fl_ns_shape() {
  local i=$1 rate=$2 delay=$3 loss=$4 sw_dev=p$1
  if [ "$FL_NS_NETEM" = 1 ]; then
    local args=""
    [ "$delay" != - ] && args="$args delay $delay"
    [ "$rate" != - ] && args="$args rate $rate"
    [ "$loss" != - ] && args="$args loss $loss%"
    [ -n "$args" ] && tc -n ${FL_NS[i]} qdisc replace dev eth0 root netem $args limit 100000
    [ "$rate" != - ] &&
      tc -n $FL_NS_SW qdisc replace dev $sw_dev root netem rate $rate limit 100000
    echo "netns_lib: node $i: tc netem${args:- (nothing)}"
    return 0
  fi
  local how=""
  if [ "$delay" != - ]; then
    # No netem: the delay (and the loss with it) by the userspace wire.
    local dus ppm=0
    dus=$(fl_ns_us "$delay")
    [ "$loss" != - ] && ppm=$(awk -v l="$loss" 'BEGIN { printf "%d", l * 10000 + 0.5 }')
    if ! fl_ns_wire $i "$dus" "$ppm"; then
      echo "netns_lib: delay $delay not applied: this kernel has no sch_netem (CONFIG_NET_SCH_NETEM) and netns_wire did not start"
      return 3
    fi
    how="netns_wire (no sch_netem): egress delay ${dus} us, loss $ppm ppm"
    loss=-
  fi
  if [ "$rate" != - ]; then
    local b
    b=$(fl_ns_burst "$rate")
    tc -n ${FL_NS[i]} qdisc replace dev eth0 root tbf rate $rate burst $b latency 200ms || return 1
    tc -n $FL_NS_SW qdisc replace dev $sw_dev root tbf rate $rate burst $b latency 200ms || return 1
    how="$how${how:+; }tc tbf rate $rate burst $b"
  fi
  if [ "$loss" != - ]; then
    command -v nft > /dev/null 2>&1 || { echo "netns_lib: no nft for the loss (apt-get install nftables)"; return 1; }
    local per10k
    per10k=$(awk -v l="$loss" 'BEGIN { printf "%d", l * 100 + 0.5 }')
    ip netns exec ${FL_NS[i]} nft -f - << NFT || return 1
table inet fl_loss {
  chain out {
    type filter hook output priority 0; policy accept;
    ip daddr $FL_NET.0/24 numgen random mod 10000 < $per10k counter drop
  }
}
NFT
    how="$how${how:+; }nftables numgen drop of $per10k in 10000 on egress"
  fi
  echo "netns_lib: node $i: ${how:-nothing}"
  return 0
}

# fl_ns_dropped I: packets node I's loss dropped so far (wire or nftables).
fl_ns_dropped() {
  local st=${fl_ns_wire_stats[$1]:-}
  if [ "$FL_NS_NETEM" = 1 ]; then
    tc -s -n ${FL_NS[$1]} qdisc show dev eth0 | sed -n 's/.*dropped \([0-9]*\).*/\1/p' | head -1
    return
  fi
  if [ -n "$st" ] && [ -s "$st" ]; then
    sed -n 's/.* lost \([0-9]*\) .*/\1/p' "$st"
    return
  fi
  ip netns exec ${FL_NS[$1]} nft list table inet fl_loss 2> /dev/null |
    sed -n 's/.*counter packets \([0-9]*\).*/\1/p' | head -1
}

# fl_ns_rtt_ms I J: the fastest of 5 TCP handshakes (SYN, then the RST of
# a closed port) from node I to node J, in ms with 3 decimals; "" when J
# cannot be reached within 5 s.
fl_ns_rtt_ms() {
  ip netns exec ${FL_NS[$1]} timeout 5 bash -c '
    best=""
    for k in 1 2 3 4 5; do
      s=${EPOCHREALTIME/[.,]/}
      { : 3<> /dev/tcp/'${FL_IP[$2]}'/9; } 2> /dev/null
      e=${EPOCHREALTIME/[.,]/}
      d=$((e - s))
      [ -z "$best" ] || [ $d -lt $best ] && best=$d
    done
    printf "%d.%03d\n" $((best / 1000)) $((best % 1000))'
}

fl_ns_cut() { ip -n $FL_NS_SW link set p$1 down; }
# fl_ns_heal I: the link up again, and back only once a TCP handshake from
# another node reaches node I (a refused connection to port 9 answers),
# at most 5 s, so that the next part starts on a working network.
fl_ns_heal() {
  local i=$1 j=$(($1 == 0 ? 1 : 0)) t e=""
  ip -n $FL_NS_SW link set p$i up || return 1
  for ((t = 0; t < 50; t++)); do
    e=$(ip netns exec ${FL_NS[j]} timeout 1 bash -c ": 3<> /dev/tcp/${FL_IP[i]}/9" 2>&1)
    case $e in *refused*) return 0 ;; esac
    sleep 0.1
  done
  echo "netns_lib: node $i unreachable from node $j 5 s after its link came up: $e" >&2
  return 1
}
