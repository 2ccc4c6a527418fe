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
. bench/lib.sh

RUNS=${RUNS:-3}
DURATION=${DURATION:-10}
FLOWS=${FLOWS:-"1 4"}
DIRS=${DIRS:-"up down"}
SETUPS=${SETUPS:-"gate64 miredo"}

require_root
require_tools "apt-get install miredo miredo-server iperf3 iproute2 iputils-ping" \
    ip ss iperf3 miredo miredo-server ping awk

WORK=$(mktemp -d /tmp/gate64-bench-teredo.XXXXXX)

# Socket buffers: the default receive buffer (208 KiB) of the Teredo *client's* socket (Debian
# miredo sets none) overflows at these rates on a zero-latency veth, and the TCP flow then
# measures the client's drops rather than the relay. The bench raises the host defaults for
# its run (every process alike: miredo client, miredo relay and gate64) and restores them.
# SOCKBUF=0 keeps the host's values.
raise_sockbufs "${SOCKBUF:-4194304}"

install_cleanup

# ---------------------------------------------------------------- topology


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
[ipsec]
require = false
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
    wait_for 15 teredo_client_ready || { log "client did not qualify within 15 s"; return 1; }
    wait_for 5 tcp_listening "$CORP" 5201 || { log "iperf3 -s not listening"; return 1; }
    # First packets go through the Teredo connectivity test and bubbles; get that done.
    ip netns exec "$CLI" ping -6 -n -c 3 -i 0.2 -W 3 "$CORP_HOST" >"$WORK/ping.log" 2>&1 || {
        log "ping through the relay failed: $(cat "$WORK/ping.log")"
        return 1
    }
}

# ---------------------------------------------------------------- measurement

# Clock ticks (utime + stime, all threads) of every process in the server namespace.
relay_ticks() { ns_ticks "$SRV"; }

RESULTS=()  # "setup flows dir mbps cpu"

measure_setup() {
    local setup=$1 flows dir run json t0 t1 mbps cpu
    for flows in $FLOWS; do
        for dir in $DIRS; do
            local mbps_runs="" cpu_runs=""
            for run in $(seq "$RUNS"); do
                json="$WORK/$setup-P$flows-$dir-$run.json"
                t0=$(relay_ticks)
                run_iperf3 "$setup P$flows $dir run $run" "$CORP_HOST" "$flows" "$dir" "$json" ||
                    continue
                t1=$(relay_ticks)
                mbps=$(received_mbps "$json")
                cpu=$(secs $((t1 - t0)))
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
    build_gate64
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
