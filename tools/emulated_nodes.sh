#!/usr/bin/env bash
# Emulated nodes on one machine: each node a network namespace with its own address, joined to
# the root namespace by a veth pair on one bridge, so `ds-launch --launcher netns` runs a job
# across them as across hosts (its agents and workers inside the namespaces, the coordinator in
# the root one on the bridge's address). tc's token bucket (tbf) limits each node's link in
# both directions; `cut` blackholes a node's link (a peer alive but unreachable: packets are
# held and dropped, nothing answers). Needs root and iproute2; touches only its own names and
# the subnet 10.77.<SUBNET>.0/24, never another interface.
#
#   tools/emulated_nodes.sh up dsx 2 1gbit    # namespaces dsx0, dsx1 at 10.77.0.1, .2;
#                                             # the bridge dsxbr at 10.77.0.254
#   tools/emulated_nodes.sh cut dsx 1         # node dsx1's link blackholed
#   tools/emulated_nodes.sh rate dsx 10gbit   # every link's rate changed
#   tools/emulated_nodes.sh down dsx          # everything named dsx* removed
#
# SUBNET (environment, default 0) picks the third octet, for harnesses side by side.
set -euo pipefail

usage() { echo "usage: $0 up NAME N [RATE] | down NAME | cut NAME I | rate NAME RATE" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
cmd=$1 name=$2
subnet=${SUBNET:-0}
[[ $name =~ ^[a-z][a-z0-9]{0,7}$ ]] || { echo "$0: NAME must be 1-8 of [a-z0-9], a letter first" >&2; exit 2; }
bridge=${name}br

# Shapes one device: a tbf at RATE (burst BURST, default 64 KiB; 50 ms of queue), or none for
# "off".
shape() {  # shape NETNS|"" DEV RATE [BURST]
  local ns=$1 dev=$2 rate=$3 burst=${4:-64kb} ipn=()
  [[ -n $ns ]] && ipn=(ip netns exec "$ns")
  "${ipn[@]}" tc qdisc del dev "$dev" root 2>/dev/null || true
  [[ $rate == off ]] && return 0
  "${ipn[@]}" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 50ms
}

nodes() { ip netns list | awk '{print $1}' | grep -E "^${name}[0-9]+$" | sort -V || true; }

case $cmd in
  up)
    [[ $# -ge 3 ]] || usage
    n=$3 rate=${4:-off}
    ip link add "$bridge" type bridge
    ip addr add "10.77.$subnet.254/24" dev "$bridge"
    ip link set "$bridge" up
    for ((i = 0; i < n; i++)); do
      ns=$name$i
      ip netns add "$ns"
      ip link add "${name}v$i" type veth peer name eth0 netns "$ns"
      ip link set "${name}v$i" master "$bridge" up
      ip -n "$ns" addr add "10.77.$subnet.$((i + 1))/24" dev eth0
      ip -n "$ns" link set eth0 up
      ip -n "$ns" link set lo up  # a fresh namespace's loopback is down
      shape "" "${name}v$i" "$rate"
      shape "$ns" eth0 "$rate"
      echo "$ns 10.77.$subnet.$((i + 1))"
    done
    ;;
  down)
    for ns in $(nodes); do ip netns del "$ns"; done
    # The root side of each pair too: a namespace outlives its name while a socket of it lingers
    # (a connection to a cut peer retrying), and with it the pair.
    for dev in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^${name}v[0-9]+$"); do
      ip link del "$dev" 2>/dev/null || true
    done
    ip link del "$bridge" 2>/dev/null || true
    ;;
  cut)
    [[ $# -ge 3 ]] || usage
    # 8 bit/s with a one-packet bucket: past the first packet every one waits longer than the
    # queue allows and is dropped.
    shape "" "${name}v$3" 8bit 1600b
    shape "$name$3" eth0 8bit 1600b
    ;;
  rate)
    [[ $# -ge 3 ]] || usage
    for ns in $(nodes); do
      i=${ns#"$name"}
      shape "" "${name}v$i" "$3"
      shape "$ns" eth0 "$3"
    done
    ;;
  *) usage ;;
esac
