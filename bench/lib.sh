# Shared by the bench/*.sh scripts; source it from the repo root after `set -euo pipefail`:
#
#   . bench/lib.sh
#
# It only defines variables and functions. The scripts pick what they use: the namespace
# names, teardown/cleanup and the EXIT trap, the three-namespace lab of gate64-testkit's
# Topology, the release build of gate64, CPU-seconds accounting from /proc and the iperf3
# helpers.

# Names follow gate64-testkit's g64-<tag>-<pid>-<n> scheme, so a test run also removes them
# if the script is killed with SIGKILL. A script without tcorp sets NAMESPACES itself.
CLI=g64-bcli-$$-0
SRV=g64-bsrv-$$-0
CORP=g64-bcorp-$$-0
NAMESPACES=("$CLI" "$SRV" "$CORP")
CLK_TCK=$(getconf CLK_TCK)
SERVER_IP=198.51.100.1
CORP_HOST=2001:db8:100:1::2
# kill_ns_procs waits this many tenths of a second after SIGTERM before SIGKILL.
TERM_WAIT_TICKS=30
# "key=value" of host sysctls changed by save_sysctl, restored by cleanup.
SAVED_SYSCTL=()

log() { printf '%s\n' "$*" >&2; }

require_root() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "needs root for network namespaces: sudo $0" >&2
        exit 1
    fi
}

# require_tools HINT TOOL...: exit with "missing TOOL (HINT)" unless every TOOL is on PATH.
require_tools() {
    local hint=$1 tool
    shift
    for tool in "$@"; do
        command -v "$tool" >/dev/null 2>&1 || {
            echo "missing $tool ($hint)" >&2
            exit 1
        }
    done
}

# ---------------------------------------------------------------- cleanup

kill_ns_procs() {
    local ns=$1 pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] && return 0
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq "$TERM_WAIT_TICKS"); do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [ -z "$pids" ] && return 0
        sleep 0.1
    done
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
}

teardown() {
    local ns
    for ns in "${NAMESPACES[@]}"; do
        if ip netns list | grep -qw "^$ns"; then
            kill_ns_procs "$ns"
            ip netns del "$ns" 2>/dev/null || true
        fi
    done
}

# save_sysctl KEY...: remember the host's current values, for cleanup to restore.
save_sysctl() {
    local k
    for k in "$@"; do
        SAVED_SYSCTL+=("$k=$(sysctl -n "$k")")
    done
}

# Needs WORK (the temporary directory) set before install_cleanup.
cleanup() {
    for kv in "${SAVED_SYSCTL[@]}"; do
        sysctl -qw "$kv" || true
    done
    teardown
    wait 2>/dev/null || true
    if [ -n "${KEEP_LOGS:-}" ]; then
        log "logs kept in $WORK"
    else
        rm -rf "$WORK"
    fi
}

install_cleanup() {
    trap cleanup EXIT
    trap 'exit 130' INT TERM
}

# ---------------------------------------------------------------- topology

# The standard lab (docs: teredo-iphttps.md §3):
#   tcli  198.51.100.10 ── tsrv  192.0.2.1, 192.0.2.2, 198.51.100.1
#                          tsrv  2001:db8:100:1::1 ── tcorp ::2
# make_namespaces: every namespace of NAMESPACES, with lo up and IPv6 DAD off (addresses are
# usable at once).
make_namespaces() {
    local ns
    for ns in "${NAMESPACES[@]}"; do
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip netns exec "$ns" sh -c 'echo 0 > /proc/sys/net/ipv6/conf/all/accept_dad;
                                   echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad'
    done
}

setup() {
    make_namespaces
    ip link add name vcli netns "$SRV" type veth peer name vsrv netns "$CLI"
    ip link add name vcorp netns "$SRV" type veth peer name vsrv netns "$CORP"
    ip -n "$SRV" link set vcli up
    ip -n "$SRV" link set vcorp up
    ip -n "$CLI" link set vsrv up
    ip -n "$CORP" link set vsrv up
    ip -n "$SRV" addr add 192.0.2.1/24 dev vcli
    ip -n "$SRV" addr add 192.0.2.2/24 dev vcli
    ip -n "$SRV" addr add "$SERVER_IP/24" dev vcli
    ip -n "$SRV" addr add 2001:db8:100:1::1/64 dev vcorp nodad
    ip netns exec "$SRV" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/forwarding'
    ip -n "$CLI" addr add 198.51.100.10/24 dev vsrv
    ip -n "$CLI" route add default via "$SERVER_IP"
    ip -n "$CORP" addr add "$CORP_HOST/64" dev vsrv nodad
    ip -n "$CORP" -6 route add default via 2001:db8:100:1::1
}

# wait_for SECS CMD...: poll CMD every 0.1 s.
wait_for() {
    local secs=$1 i
    shift
    for i in $(seq $((secs * 10))); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}

tcp_listening() { [ -n "$(ip netns exec "$1" ss -Hntl "sport = :$2")" ]; }
udp_bound() { ip netns exec "$1" ss -Hnuln | awk '{print $4}' | grep -qxF "$2"; }

# raise_sockbufs SIZE: the host's default and maximum socket buffers for the run (restored on
# exit by the cleanup trap); 0 keeps the host's values. Every process of both setups gets the
# same buffers, so a comparison stays fair.
raise_sockbufs() {
    [ "$1" != 0 ] || return 0
    save_sysctl net.core.rmem_default net.core.wmem_default net.core.rmem_max net.core.wmem_max
    sysctl -qw net.core.rmem_default="$1" net.core.wmem_default="$1" \
        net.core.rmem_max="$1" net.core.wmem_max="$1"
}

# The Teredo lab of teredo.sh and ipsec.sh: Miredo's server and relay in $SRV on 192.0.2.1/.2,
# and a Teredo client in $CLI.
teredo_client_ready() {
    ip -n "$CLI" -6 addr show dev teredo 2>/dev/null | grep -q 'inet6 2001:0:c000:201:' &&
        ip -n "$CLI" -6 route show default | grep -q 'dev teredo'
}
relay_routed() { ip -n "$SRV" -6 route show 2001::/32 | grep -q 'dev terelay'; }

start_miredo_pair() {
    printf 'ServerBindAddress 192.0.2.1\nServerBindAddress2 192.0.2.2\n' >"$WORK/srv.conf"
    printf 'RelayType cone\nInterfaceName terelay\nBindAddress 192.0.2.1\nBindPort 3545\n' \
        >"$WORK/relay.conf"
    # Absolute paths: miredo changes to / before reading its configuration.
    start_bg "$SRV" miredo-server miredo-server -f -c "$WORK/srv.conf" -p "$WORK/srv.pid"
    start_bg "$SRV" miredo-relay miredo -f -c "$WORK/relay.conf" -p "$WORK/relay.pid"
    wait_for 10 udp_bound "$SRV" 192.0.2.1:3544 && wait_for 10 relay_routed
}

start_bg() { # start_bg NS LOGNAME CMD...: background process inside NS, output to a log
    local ns=$1 name=$2
    shift 2
    ip netns exec "$ns" "$@" >"$WORK/$name.log" 2>&1 &
}

# ---------------------------------------------------------------- build

# Sets GATE64_BIN to an absolute path; builds gate64 in release mode unless it is set.
build_gate64() {
    local user_home
    if [ -z "${GATE64_BIN:-}" ]; then
        log "== building gate64 (release)"
        if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
            # Build as the invoking user so target/ does not end up owned by root.
            user_home=$(getent passwd "$SUDO_USER" | cut -d: -f6)
            sudo -u "$SUDO_USER" env PATH="$user_home/.cargo/bin:$PATH" cargo build --release -p gate64
        else
            PATH="$HOME/.cargo/bin:$PATH" cargo build --release -p gate64
        fi
        GATE64_BIN="${CARGO_TARGET_DIR:-target}/release/gate64"
    fi
    GATE64_BIN=$(realpath "$GATE64_BIN")
}

# ---------------------------------------------------------------- measurement

# ns_ticks NS [EXCLUDE_COMM]: clock ticks (utime + stime, all threads) of every process in NS,
# except those whose comm is EXCLUDE_COMM, plus napi_ticks NS.
ns_ticks() {
    local ns=$1 skip=${2:-} pid total=0 t
    for pid in $(ip netns pids "$ns"); do
        if [ -n "$skip" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$skip" ]; then
            continue
        fi
        # Fields after "pid (comm) ": state is 1, utime 12, stime 13.
        t=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{print $12 + $13}') || t=0
        total=$((total + ${t:-0}))
    done
    echo $((total + $(napi_ticks "$ns")))
}

# napi_ticks NS...: clock ticks of the kernel's NAPI threads (napi/DEV-N) of the devices of
# the namespaces NS..., each thread once. gate64's corporate TUN runs threaded NAPI: the
# forwarding that a plain TUN (Miredo's, TAYGA's) does inside the engine's own write runs
# there, so it is counted with the engine's CPU. (A thread's name carries only the device's
# name: a device of the same name in another namespace would be counted too.)
napi_ticks() {
    local ns total=0 t devs=" " comm dev
    for ns in "$@"; do
        devs+="$(ip netns exec "$ns" ls /sys/class/net 2>/dev/null | tr '\n' ' ')"
    done
    for comm in /proc/[0-9]*/comm; do
        read -r dev <"$comm" 2>/dev/null || continue
        case $dev in napi/*-*) ;; *) continue ;; esac
        dev=${dev#napi/}
        dev=${dev%-*}
        case $devs in *" $dev "*) ;; *) continue ;; esac
        t=$(sed 's/^.*) //' "${comm%comm}stat" 2>/dev/null | awk '{print $12 + $13}') || t=0
        total=$((total + ${t:-0}))
    done
    echo "$total"
}

# secs TICKS: clock ticks -> seconds, two decimals.
secs() { awk -v d="$1" -v hz="$CLK_TCK" 'BEGIN {printf "%.2f", d / hz}'; }

# run_iperf3 LABEL TARGET FLOWS DIR JSON: one iperf3 TCP run of DURATION s from tcli to
# TARGET (DIR down: -R), JSON output to the file JSON; logs "LABEL: iperf3 failed" on failure.
run_iperf3() {
    local label=$1 target=$2 flows=$3 dir=$4 json=$5
    local rev=()
    [ "$dir" = down ] && rev=(-R)
    if ! ip netns exec "$CLI" timeout $((DURATION + 30)) iperf3 -c "$target" \
        -t "$DURATION" -P "$flows" "${rev[@]}" --json --connect-timeout 5000 \
        >"$json" 2>&1; then
        log "$label: iperf3 failed: $(grep -m1 '"error"' "$json" || tail -3 "$json")"
        return 1
    fi
}

# iperf3 JSON -> receiver bits per second (end.sum_received.bits_per_second).
received_bps() {
    awk '/"sum_received"/ {f = 1} f && /"bits_per_second"/ {gsub(/[^0-9.eE+-]/, "", $2); print $2; exit}' "$1"
}

# received_mbps JSON: the same in Mbit/s, one decimal.
received_mbps() { awk -v b="$(received_bps "$1")" 'BEGIN {printf "%.1f", b / 1e6}'; }

median() { sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]; else print "nan"}'; }
