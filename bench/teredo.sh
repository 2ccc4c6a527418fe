#!/usr/bin/env bash
# Teredo relay throughput and CPU efficiency: gate64 vs Miredo's own server + relay, on the
# standard namespace lab of gate64-testkit's Topology (docs: teredo-iphttps.md §3):
#
#   tcli  198.51.100.10 (Debian miredo client) ── tsrv  192.0.2.1, 192.0.2.2, 198.51.100.1
#                                                 tsrv  2001:db8:100:1::1 ── tcorp ::2 (iperf3 -s)
#
# For each setup (a) `gate64 serve`, (b) miredo-server + miredo cone relay, it runs iperf3 TCP
# from tcli to tcorp with 1 and 4 flows, in both directions, and measures the CPU seconds of
# every process in tsrv (the relay; utime + stime of all threads, from /proc/<pid>/stat) during
# each run. Kernel forwarding and softirq time are not attributed to either relay.
#
# usage: sudo bench/teredo.sh            (from the repo root; builds gate64 in release mode)
# env:   RUNS=3        runs per cell, the median is reported (1 or 3 are sensible)
#        DURATION=10   seconds per iperf3 run
#        FLOWS="1 4"   iperf3 -P values
#        DIRS="up down"  up = client -> tcorp, down = tcorp -> client (iperf3 -R)
#        SETUPS="gate64 miredo"
#        GATE64_BIN=path  use this binary and skip the build
#        KEEP_LOGS=1   keep the temporary directory with configs, logs and iperf3 JSON
#        SOCKBUF=4194304  host default socket buffer sizes during the run (0: leave as is)
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
DURATION=${DURATION:-10}
FLOWS=${FLOWS:-"1 4"}
DIRS=${DIRS:-"up down"}
SETUPS=${SETUPS:-"gate64 miredo"}

if [ "$(id -u)" -ne 0 ]; then
    echo "needs root for network namespaces: sudo $0" >&2
    exit 1
fi
for tool in ip ss iperf3 miredo miredo-server ping awk; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "missing $tool (apt-get install miredo miredo-server iperf3 iproute2 iputils-ping)" >&2
        exit 1
    }
done

# Names follow gate64-testkit's g64-<tag>-<pid>-<n> scheme, so a test run also removes them
# if this script is killed with SIGKILL.
CLI=g64-bcli-$$-0
SRV=g64-bsrv-$$-0
CORP=g64-bcorp-$$-0
NAMESPACES=("$CLI" "$SRV" "$CORP")
WORK=$(mktemp -d /tmp/gate64-bench-teredo.XXXXXX)
CLK_TCK=$(getconf CLK_TCK)
CORP_HOST=2001:db8:100:1::2

log() { printf '%s\n' "$*" >&2; }

kill_ns_procs() {
    local ns=$1 pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] && return 0
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 30); do
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

# Socket buffers: the default receive buffer (208 KiB) of the Teredo *client's* socket (Debian
# miredo sets none) overflows at these rates on a zero-latency veth, and the TCP flow then
# measures the client's drops rather than the relay. The bench raises the host defaults for
# its run (every process alike: miredo client, miredo relay and gate64) and restores them.
# SOCKBUF=0 keeps the host's values.
SOCKBUF=${SOCKBUF:-4194304}
SAVED_SYSCTL=()
if [ "$SOCKBUF" != 0 ]; then
    for k in net.core.rmem_default net.core.wmem_default net.core.rmem_max net.core.wmem_max; do
        SAVED_SYSCTL+=("$k=$(sysctl -n "$k")")
    done
    sysctl -qw net.core.rmem_default="$SOCKBUF" net.core.wmem_default="$SOCKBUF" \
        net.core.rmem_max="$SOCKBUF" net.core.wmem_max="$SOCKBUF"
fi

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
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- topology

setup() {
    local ns
    for ns in "${NAMESPACES[@]}"; do
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip netns exec "$ns" sh -c 'echo 0 > /proc/sys/net/ipv6/conf/all/accept_dad;
                                   echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad'
    done
    ip link add name vcli netns "$SRV" type veth peer name vsrv netns "$CLI"
    ip link add name vcorp netns "$SRV" type veth peer name vsrv netns "$CORP"
    ip -n "$SRV" link set vcli up
    ip -n "$SRV" link set vcorp up
    ip -n "$CLI" link set vsrv up
    ip -n "$CORP" link set vsrv up
    ip -n "$SRV" addr add 192.0.2.1/24 dev vcli
    ip -n "$SRV" addr add 192.0.2.2/24 dev vcli
    ip -n "$SRV" addr add 198.51.100.1/24 dev vcli
    ip -n "$SRV" addr add 2001:db8:100:1::1/64 dev vcorp nodad
    ip netns exec "$SRV" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/forwarding'
    ip -n "$CLI" addr add 198.51.100.10/24 dev vsrv
    ip -n "$CLI" route add default via 198.51.100.1
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

udp_bound() { ip netns exec "$1" ss -Hnuln | awk '{print $4}' | grep -qx "$2"; }
tcp_listening() { [ -n "$(ip netns exec "$1" ss -Hntl "sport = :$2")" ]; }
client_ready() {
    ip -n "$CLI" -6 addr show dev teredo 2>/dev/null | grep -q 'inet6 2001:0:c000:201:' &&
        ip -n "$CLI" -6 route show default | grep -q 'dev teredo'
}
relay_routed() { ip -n "$SRV" -6 route show 2001::/32 | grep -q 'dev terelay'; }

start_bg() { # start_bg NS LOGNAME CMD...: background process inside NS, output to a log
    local ns=$1 name=$2
    shift 2
    ip netns exec "$ns" "$@" >"$WORK/$name.log" 2>&1 &
}

start_miredo_pair() {
    printf 'ServerBindAddress 192.0.2.1\nServerBindAddress2 192.0.2.2\n' >"$WORK/srv.conf"
    printf 'RelayType cone\nInterfaceName terelay\nBindAddress 192.0.2.1\nBindPort 3545\n' \
        >"$WORK/relay.conf"
    # Absolute paths: miredo changes to / before reading its configuration.
    start_bg "$SRV" miredo-server miredo-server -f -c "$WORK/srv.conf" -p "$WORK/srv.pid"
    start_bg "$SRV" miredo-relay miredo -f -c "$WORK/relay.conf" -p "$WORK/relay.pid"
    wait_for 10 udp_bound "$SRV" 192.0.2.1:3544 && wait_for 10 relay_routed
}

start_gate64() {
    cat >"$WORK/gate64.toml" <<EOF
[server]
workers = 2
[teredo]
server_addresses = ["192.0.2.1", "192.0.2.2"]
port = 3544
relay = true
[corpnet]
tun = "gate64"
ipv6_prefixes = ["2001:db8:100::/48"]
address6 = "2001:db8:100::1"
allow_without_ipsec = true
[metrics]
listen = "127.0.0.1:9164"
[log]
level = "info"
EOF
    start_bg "$SRV" gate64 "$GATE64_BIN" serve --config "$WORK/gate64.toml"
    wait_for 15 udp_bound "$SRV" 192.0.2.1:3544 && wait_for 5 tcp_listening "$SRV" 9164
}

start_client_and_iperf() {
    printf 'RelayType client\nInterfaceName teredo\nServerAddress 192.0.2.1\n%s\n%s\n' \
        'BindAddress 198.51.100.10' 'BindPort 3546' >"$WORK/cli.conf"
    start_bg "$CLI" miredo-client miredo -f -c "$WORK/cli.conf" -p "$WORK/cli.pid"
    start_bg "$CORP" iperf3-server iperf3 -s
    wait_for 15 client_ready || { log "client did not qualify within 15 s"; return 1; }
    wait_for 5 tcp_listening "$CORP" 5201 || { log "iperf3 -s not listening"; return 1; }
    # First packets go through the Teredo connectivity test and bubbles; get that done.
    ip netns exec "$CLI" ping -6 -n -c 3 -i 0.2 -W 3 "$CORP_HOST" >"$WORK/ping.log" 2>&1 || {
        log "ping through the relay failed: $(cat "$WORK/ping.log")"
        return 1
    }
}

# ---------------------------------------------------------------- measurement

# Clock ticks (utime + stime, all threads) of every process in the server namespace.
relay_ticks() {
    local pid total=0 t
    for pid in $(ip netns pids "$SRV"); do
        # Fields after "pid (comm) ": state is 1, utime 12, stime 13.
        t=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{print $12 + $13}') || t=0
        total=$((total + ${t:-0}))
    done
    echo "$total"
}

# iperf3 JSON -> receiver bits per second (end.sum_received.bits_per_second).
received_bps() {
    awk '/"sum_received"/ {f = 1} f && /"bits_per_second"/ {gsub(/[^0-9.eE+-]/, "", $2); print $2; exit}' "$1"
}

median() { sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]; else print "nan"}'; }

RESULTS=()  # "setup flows dir mbps cpu"

measure_setup() {
    local setup=$1 flows dir run json t0 t1 bps mbps cpu
    for flows in $FLOWS; do
        for dir in $DIRS; do
            local mbps_runs="" cpu_runs=""
            for run in $(seq "$RUNS"); do
                json="$WORK/$setup-P$flows-$dir-$run.json"
                local rev=()
                [ "$dir" = down ] && rev=(-R)
                t0=$(relay_ticks)
                if ! ip netns exec "$CLI" timeout $((DURATION + 30)) iperf3 -c "$CORP_HOST" \
                    -t "$DURATION" -P "$flows" "${rev[@]}" --json --connect-timeout 5000 \
                    >"$json" 2>&1; then
                    log "$setup P$flows $dir run $run: iperf3 failed: $(grep -m1 '"error"' "$json" || tail -3 "$json")"
                    continue
                fi
                t1=$(relay_ticks)
                bps=$(received_bps "$json")
                mbps=$(awk -v b="$bps" 'BEGIN {printf "%.1f", b / 1e6}')
                cpu=$(awk -v d=$((t1 - t0)) -v hz="$CLK_TCK" 'BEGIN {printf "%.2f", d / hz}')
                log "  $setup -P $flows $dir run $run: $mbps Mbit/s, relay CPU $cpu s"
                mbps_runs+="$mbps"$'\n'
                cpu_runs+="$cpu"$'\n'
            done
            [ -z "$mbps_runs" ] && continue
            RESULTS+=("$setup $flows $dir $(printf '%s' "$mbps_runs" | median) $(printf '%s' "$cpu_runs" | median)")
        done
    done
}

run_setup() {
    local setup=$1
    log "== $setup: setting up"
    teardown
    setup
    case $setup in
    gate64) start_gate64 || { log "gate64 did not start; its log:"; cat "$WORK/gate64.log" >&2; return 1; } ;;
    miredo) start_miredo_pair || { log "miredo pair did not start"; cat "$WORK"/miredo-*.log >&2; return 1; } ;;
    *) log "unknown setup $setup"; return 1 ;;
    esac
    start_client_and_iperf || {
        log "$setup: client setup failed; logs:"
        tail -n 30 "$WORK"/*.log >&2
        return 1
    }
    measure_setup "$setup"
    teardown
}

# ---------------------------------------------------------------- main

if [[ " $SETUPS " == *" gate64 "* ]]; then
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
fi

failed=0
for setup in $SETUPS; do
    run_setup "$setup" || failed=1
done

printf '\nTeredo relay, iperf3 TCP tcli -> tcorp (up) / tcorp -> tcli (down), %s s per run, median of %s run(s)\n' \
    "$DURATION" "$RUNS"
printf '%-8s %5s %5s %10s %8s %14s\n' setup flows dir "Mbit/s" "CPU s" "Mbit/s/CPU-s"
for r in "${RESULTS[@]}"; do
    read -r setup flows dir mbps cpu <<<"$r"
    eff=$(awk -v m="$mbps" -v c="$cpu" 'BEGIN {if (c > 0) printf "%.1f", m / c; else print "inf"}')
    printf '%-8s %5s %5s %10s %8s %14s\n' "$setup" "$flows" "$dir" "$mbps" "$cpu" "$eff"
done

printf '\n%-5s %5s %22s\n' flows dir "gate64/miredo (eff.)"
for flows in $FLOWS; do
    for dir in $DIRS; do
        g="" m=""
        for r in "${RESULTS[@]}"; do
            read -r setup f d mbps cpu <<<"$r"
            [ "$f" = "$flows" ] && [ "$d" = "$dir" ] || continue
            e=$(awk -v m="$mbps" -v c="$cpu" 'BEGIN {if (c > 0) printf "%.6f", m / c}')
            [ "$setup" = gate64 ] && g=$e
            [ "$setup" = miredo ] && m=$e
        done
        ratio=$(awk -v g="$g" -v m="$m" 'BEGIN {if (g != "" && m != "" && m > 0) printf "%.2f", g / m; else print "n/a"}')
        printf '%-5s %5s %22s\n' "$flows" "$dir" "$ratio"
    done
done
printf '(CPU s = user + system time of all relay processes in tsrv during the run; kernel\n forwarding and softirq work is not attributed to either.)\n'
exit "$failed"
