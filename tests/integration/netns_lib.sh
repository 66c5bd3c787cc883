# netns_lib.sh - sourced (by bash) by the multi-node tests and benchmarks:
# N "nodes" as network namespaces, each with one address on a private test
# subnet, joined by veth pairs to a bridge that lives in a namespace of its
# own ("switch"), so that no traffic ever reaches the host's network.  Each
# node's link can be shaped: a rate (both directions), a one-way delay and
# a loss rate (on the node's egress), by `tc netem` when the kernel has it;
# without sch_netem the rate is applied by `tc tbf` and the loss by an
# nftables `numgen random` drop rule, and a delay cannot be applied
# (fl_ns_shape says so and returns 3).  Every namespace is deleted on exit
# (trap), whatever happens; the scripts bound every wait.
#
#   fl_ns_setup N        make nodes 0..N-1; FL_NS[i] (namespace), FL_IP[i]
#                        (address), FL_NET (the /24), FL_NS_NETEM (1 when
#                        netem works); returns 77 (printing why) when it
#                        cannot make them
#   fl_ns_shape I RATE DELAY LOSS   e.g. fl_ns_shape 1 1gbit 2ms 1 ("-"
#                        leaves that one out; LOSS in percent)
#   fl_ns_exec I CMD...  run CMD in node I's namespace
#   fl_ns_cut I / fl_ns_heal I      take node I's link down / up again
#   fl_ns_dropped I      packets dropped by node I's nftables loss rule
#   fl_ns_cleanup        delete everything (also run by the EXIT trap)
# Subnet: 10.77.X.0/24 with X from the process id, so that runs side by
# side do not meet.
set -u
FL_NS_TAG=$(($$ % 100000))
FL_NET=10.77.$(($$ % 250 + 1))
FL_NS_SW=flsw$FL_NS_TAG
FL_NS=()
FL_IP=()
FL_NS_NETEM=0
fl_ns_made=""

fl_ns_cleanup() {
  for n in $fl_ns_made; do ip netns del "$n" 2> /dev/null; done
  fl_ns_made=""
}

fl_ns_setup() {
  local n=$1 i err
  err=$(mktemp)
  if [ "$(id -u)" != 0 ]; then
    echo "SKIP: network namespaces need root"
    return 77
  fi
  if ! command -v ip > /dev/null 2>&1; then
    echo "SKIP: no ip command (apt-get install iproute2)"
    return 77
  fi
  if ! { ip netns add $FL_NS_SW && fl_ns_made="$FL_NS_SW" &&
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
    if ! { ip netns add ${FL_NS[i]} && fl_ns_made="$fl_ns_made ${FL_NS[i]}" &&
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

# tbf's bucket: about 1 ms of the rate (tbf's watchdog is an hrtimer, so
# it need not hold a whole HZ tick), at least 64 KiB (one GSO packet);
# a larger one lets messages below it pass at full speed.
fl_ns_burst() {
  case $1 in
    *gbit) echo $((${1%gbit} * 128))kb ;;
    *) echo 64kb ;;
  esac
}

fl_ns_shape() {
  local i=$1 rate=$2 delay=$3 loss=$4 rc=0 sw_dev=p$1
  if [ "$FL_NS_NETEM" = 1 ]; then
    local args=""
    [ "$delay" != - ] && args="$args delay $delay"
    [ "$rate" != - ] && args="$args rate $rate"
    [ "$loss" != - ] && args="$args loss $loss%"
    [ -n "$args" ] && tc -n ${FL_NS[i]} qdisc replace dev eth0 root netem $args limit 100000
    [ "$rate" != - ] &&
      tc -n $FL_NS_SW qdisc replace dev $sw_dev root netem rate $rate limit 100000
    return 0
  fi
  if [ "$rate" != - ]; then
    local b
    b=$(fl_ns_burst "$rate")
    tc -n ${FL_NS[i]} qdisc replace dev eth0 root tbf rate $rate burst $b latency 200ms || return 1
    tc -n $FL_NS_SW qdisc replace dev $sw_dev root tbf rate $rate burst $b latency 200ms || return 1
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
  fi
  if [ "$delay" != - ]; then
    echo "netns_lib: delay $delay not applied: this kernel has no sch_netem (CONFIG_NET_SCH_NETEM)"
    rc=3
  fi
  return $rc
}

# fl_ns_dropped I: packets node I's loss rule dropped so far (nftables only).
fl_ns_dropped() {
  ip netns exec ${FL_NS[$1]} nft list table inet fl_loss 2> /dev/null |
    sed -n 's/.*counter packets \([0-9]*\).*/\1/p' | head -1
}

fl_ns_cut() { ip -n $FL_NS_SW link set p$1 down; }
fl_ns_heal() { ip -n $FL_NS_SW link set p$1 up; }
