#!/usr/bin/env bash
# Teredo relay throughput and CPU efficiency: gate64 vs Miredo's own server + relay, on the
# standard namespace lab of gate64-testkit's Topology (docs: teredo-iphttps.md §3):
#
#   tcli  198.51.100.10 (Debian miredo client) ── tsrv  192.0.2.1, 192.0.2.2, 198.51.100.1
#                                                 tsrv  2001:db8:100:1::1 ── tcorp ::2 (iperf3 -s)
#
# For each setup (a) `gate64 serve`, (b) miredo-server + miredo cone relay, it runs iperf3 TCP
# from tcli to tcorp with 1 and 4 flows, in both directions, and measures the CPU seconds of
# every process in tsrv (the relay; utime + stime of all threads, from /proc/<pid>/stat) with
# the kernel NAPI threads of tsrv's devices (gate64's TUN) during each run. Other kernel
# forwarding and softirq time are not attributed to either relay.
#
# With CLIENTS=N (N > 1) it runs N Debian miredo clients at once, each in its own namespace
# behind a bridge in tsrv (198.51.100.10, .11, ...), each with one iperf3 flow to its own
# iperf3 server in tcorp; the cell's Mbit/s is their sum (many clients, one flow
# each, not one client's flows). Whole-machine CPU (/proc/stat, softirq included) is printed
# beside the relay's own.
#
# usage: sudo bench/teredo.sh            (from the repo root; builds gate64 in release mode)
# env:   CLIENTS=1     Teredo clients at once (each one flow when > 1; FLOWS is then ignored)
#        RUNS=3        runs per cell, the median of those that succeed is reported (1 or 3
#                      are sensible); a failed run shows in the runs column, exit status 1
#        DURATION=10   seconds per iperf3 run
#        FLOWS="1 4"   iperf3 -P values
#        DIRS="up down"  up = client -> tcorp, down = tcorp -> client (iperf3 -R)
#        SETUPS="gate64 miredo"
#        GATE64_BIN=path  use this binary and skip the build
#        KEEP_LOGS=1   keep the temporary directory with configs, logs and iperf3 JSON
#        SOCKBUF=bytes the socket buffer gate64 asks for on its Teredo sockets (default: its
#                      4 MiB); host rmem_max/wmem_max = SOCKBUF, rmem_default/wmem_default =
#                      2 x SOCKBUF for the run (bench/lib.sh match_sockbufs); 0: leave as is
#        IPERF3=iperf3 the iperf3 client of the runs (IPERF3=/bin/false: every run fails)
#        GRO=0         1: the relay's veths towards the clients (vcli, vcli1, ...) get a NIC's
#                      receive path, a NAPI thread each and GRO (bench/lib.sh rx_gro), in
#                      both setups; the NAPI threads count as the relay's CPU (NAPI s).
#                      gate64's Teredo sockets then take each client's datagrams coalesced
#                      (UDP GRO); Miredo's sockets do not ask for it
#        TUN_NAPI=true gate64's corpnet.tun_napi (default: gate64's default, false): its TUN
#                      hands writes to NAPI kernel threads, counted as the relay's (NAPI s)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

RUNS=${RUNS:-3}
DURATION=${DURATION:-10}
FLOWS=${FLOWS:-"1 4"}
DIRS=${DIRS:-"up down"}
SETUPS=${SETUPS:-"gate64 miredo"}
CLIENTS=${CLIENTS:-1}
GRO=${GRO:-0}
[ "$CLIENTS" -ge 1 ] 2>/dev/null || { echo "CLIENTS must be a positive integer" >&2; exit 1; }
# Client namespaces: $CLI is the first; the others hang off a bridge in $SRV.
CLIS=("$CLI")
for i in $(seq 1 $((CLIENTS - 1))); do
    CLIS+=("g64-bcli-$$-$i")
done
NAMESPACES=("${CLIS[@]}" "$SRV" "$CORP")
if [ "$CLIENTS" -gt 1 ]; then
    FLOWS=1
fi

require_root
require_tools "apt-get install miredo miredo-server iperf3 iproute2 iputils-ping" \
    ip ss iperf3 miredo miredo-server ping awk

WORK=$(mktemp -d /tmp/gate64-bench-teredo.XXXXXX)
install_cleanup

# Socket buffers: gate64 forces 4 MiB on its Teredo sockets (8 MiB after the kernel's
# doubling); Miredo's server, relay and client set none and get rmem_default/wmem_default.
# match_sockbufs sets those defaults to the same 8 MiB for the run (restored on exit), so both
# relays' sockets hold the same buffers, and the client (the same in both setups) does not
# overflow the 208 KiB default at these rates on a zero-latency veth, which would make the TCP
# flow measure the client's drops rather than the relay. The table at the end shows every
# socket's buffers. SOCKBUF=0 keeps the host's values.
match_sockbufs "${SOCKBUF:-$GATE64_SOCKBUF_TEREDO}"

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
tun = "$GATE64_TUN"
ipv6_prefixes = ["2001:db8:100::/48"]
address6 = "2001:db8:100::1"
${TUN_NAPI:+tun_napi = $TUN_NAPI}
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

# The clients past the first: a bridge in $SRV carries the server's addresses, the first
# client's veth and one veth per further client.
setup_more_clients() {
    [ "$CLIENTS" -gt 1 ] || return 0
    ip -n "$SRV" link add brcli type bridge
    ip -n "$SRV" link set brcli up
    ip -n "$SRV" addr flush dev vcli
    ip -n "$SRV" link set vcli master brcli
    ip -n "$SRV" addr add 192.0.2.1/24 dev brcli
    ip -n "$SRV" addr add 192.0.2.2/24 dev brcli
    ip -n "$SRV" addr add "$SERVER_IP/24" dev brcli
    local i
    for i in $(seq 1 $((CLIENTS - 1))); do
        ip link add name "vcli$i" netns "$SRV" type veth peer name vsrv netns "${CLIS[$i]}"
        ip -n "$SRV" link set "vcli$i" master brcli up
        ip -n "${CLIS[$i]}" link set vsrv up
        ip -n "${CLIS[$i]}" addr add "198.51.100.$((10 + i))/24" dev vsrv
        ip -n "${CLIS[$i]}" route add default via "$SERVER_IP"
    done
}

client_ready() { # client_ready NS: its Teredo address and default route are up
    ip -n "$1" -6 addr show dev teredo 2>/dev/null | grep -q 'inet6 2001:0:c000:201:' &&
        ip -n "$1" -6 route show default | grep -q 'dev teredo'
}

start_client_and_iperf() {
    local i ns
    for i in "${!CLIS[@]}"; do
        ns=${CLIS[$i]}
        printf 'RelayType client\nInterfaceName teredo\nServerAddress 192.0.2.1\n%s\n%s\n' \
            "BindAddress 198.51.100.$((10 + i))" 'BindPort 3546' >"$WORK/cli$i.conf"
        start_bg "$ns" "miredo-client$i" miredo -f -c "$WORK/cli$i.conf" -p "$WORK/cli$i.pid"
        start_bg "$CORP" "iperf3-server$i" iperf3 -s -p $((5201 + i))
    done
    for i in "${!CLIS[@]}"; do
        ns=${CLIS[$i]}
        wait_for 15 client_ready "$ns" || { log "client $i did not qualify within 15 s"; return 1; }
        wait_for 5 tcp_listening "$CORP" $((5201 + i)) || { log "iperf3 -s -p $((5201 + i)) not listening"; return 1; }
        # First packets go through the Teredo connectivity test and bubbles; get that done.
        ip netns exec "$ns" ping -6 -n -c 3 -i 0.2 -W 3 "$CORP_HOST" >"$WORK/ping$i.log" 2>&1 || {
            log "client $i: ping through the relay failed: $(cat "$WORK/ping$i.log")"
            return 1
        }
    done
}

# run_clients LABEL DIR JSONPREFIX: one iperf3 flow from every client at once, each to its own
# server; prints the sum of their received Mbit/s (fails when any run failed).
run_clients() {
    local label=$1 dir=$2 prefix=$3 i rev=() pids=() failed=0 total=0 mbps
    [ "$dir" = down ] && rev=(-R)
    for i in "${!CLIS[@]}"; do
        ip netns exec "${CLIS[$i]}" timeout $((DURATION + 30)) "$IPERF3" -c "$CORP_HOST" \
            -p $((5201 + i)) -t "$DURATION" "${rev[@]}" --json --connect-timeout 5000 \
            >"$prefix-c$i.json" 2>&1 &
        pids+=($!)
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || { log "$label: client $i's iperf3 failed: $(grep -m1 '"error"' "$prefix-c$i.json" || true)"; failed=1; }
    done
    [ "$failed" = 0 ] || return 1
    for i in "${!CLIS[@]}"; do
        mbps=$(received_mbps "$prefix-c$i.json")
        total=$(awk -v a="$total" -v b="$mbps" 'BEGIN {printf "%.1f", a + b}')
    done
    echo "$total"
}

# Whole-machine busy clock ticks (/proc/stat: everything but idle and iowait).
machine_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }

# ---------------------------------------------------------------- measurement

# The relay's CPU: every process in the server namespace (utime + stime, all threads) and the
# NAPI threads of its devices (lib.sh napi_ticks), counted apart so the table can show both.
relay_proc_ticks() { proc_ticks "$SRV"; }
relay_napi_ticks() { napi_ticks "$SRV"; }

RESULTS=()  # "setup flows dir ok mbps cpu napi eff machine machine_eff" (medians of the ok runs)

measure_setup() {
    local setup=$1 flows dir run json p0 p1 n0 n1 m0 m1 mbps cpu napi machine cell ok
    for flows in $FLOWS; do
        for dir in $DIRS; do
            local mbps_runs="" cpu_runs="" napi_runs="" eff_runs="" machine_runs="" meff_runs=""
            cell="$setup -P $flows x $CLIENTS client(s) $dir"
            ok=0
            for run in $(seq "$RUNS"); do
                json="$WORK/$setup-P$flows-$dir-$run.json"
                p0=$(relay_proc_ticks)
                n0=$(relay_napi_ticks)
                m0=$(machine_ticks)
                if [ "$CLIENTS" -gt 1 ]; then
                    mbps=$(run_clients "$setup $CLIENTS clients $dir run $run" "$dir" "${json%.json}") ||
                        { run_failed "$cell run $run: iperf3 failed"; continue; }
                else
                    run_iperf3 "$setup P$flows $dir run $run" "$CORP_HOST" "$flows" "$dir" "$json" ||
                        { run_failed "$cell run $run: iperf3 failed"; continue; }
                    mbps=$(received_mbps "$json")
                fi
                p1=$(relay_proc_ticks)
                n1=$(relay_napi_ticks)
                m1=$(machine_ticks)
                cpu=$(secs $((p1 - p0 + n1 - n0)))
                napi=$(secs $((n1 - n0)))
                machine=$(secs $((m1 - m0)))
                ok=$((ok + 1))
                log "  $cell run $run: $mbps Mbit/s, relay CPU $cpu s (NAPI $napi s), machine CPU $machine s"
                mbps_runs+="$mbps"$'\n'
                cpu_runs+="$cpu"$'\n'
                napi_runs+="$napi"$'\n'
                machine_runs+="$machine"$'\n'
                # Efficiencies per run (Mbit/s and CPU of the same run), then their median.
                eff_runs+="$(quotient "$mbps" "$cpu")"$'\n'
                meff_runs+="$(quotient "$mbps" "$machine")"$'\n'
            done
            RESULTS+=("$setup $flows $dir $ok $(median_of "$mbps_runs") $(median_of "$cpu_runs") $(median_of "$napi_runs") $(median_of "$eff_runs") $(median_of "$machine_runs") $(median_of "$meff_runs")")
        done
    done
}

run_setup() {
    local setup=$1
    log "== $setup: setting up"
    teardown
    setup
    setup_more_clients
    if [ "$GRO" = 1 ]; then
        local devs=(vcli) i
        for i in $(seq 1 $((CLIENTS - 1))); do devs+=("vcli$i"); done
        rx_gro "$SRV" "${devs[@]}"
    fi
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
    # Effective socket buffers of the relay (every process in tsrv) and of the first client.
    print_sockbufs "$setup" "$SRV"
    print_sockbufs "$setup" "$CLI"
    teardown
}

# ---------------------------------------------------------------- main

if [[ " $SETUPS " == *" gate64 "* ]]; then
    build_gate64
fi

for setup in $SETUPS; do
    run_setup "$setup" || run_failed "$setup: setup failed, no run measured"
done

printf '\nTeredo relay, iperf3 TCP tcli -> tcorp (up) / tcorp -> tcli (down), %s client(s), %s s per run, GRO=%s, median of the runs that succeeded\n' \
    "$CLIENTS" "$DURATION" "$GRO"
fmt='%-8s %5s %5s %8s %10s %8s %8s %14s %10s\n'
printf "$fmt" setup flows dir runs "Mbit/s" "CPU s" "NAPI s" "Mbit/s/CPU-s" "machine s"
for r in "${RESULTS[@]}"; do
    read -r setup flows dir ok mbps cpu napi eff machine meff <<<"$r"
    printf "$fmt" "$setup" "$flows" "$dir" "$(runs_cell "$ok")" "$mbps" "$cpu" "$napi" \
        "$(fixed 1 "$eff")" "$machine"
done

printf '\n%-5s %5s %22s %10s %22s\n' flows dir "gate64/miredo (eff.)" "(Mbit/s)" "(per machine CPU-s)"
for flows in $FLOWS; do
    for dir in $DIRS; do
        g="" m="" gt="" mt="" gm="" mm=""
        for r in "${RESULTS[@]}"; do
            read -r setup f d ok mbps cpu napi eff machine meff <<<"$r"
            [ "$f" = "$flows" ] && [ "$d" = "$dir" ] || continue
            [ "$setup" = gate64 ] && g=$eff gt=$mbps gm=$meff
            [ "$setup" = miredo ] && m=$eff mt=$mbps mm=$meff
        done
        printf '%-5s %5s %22s %10s %22s\n' "$flows" "$dir" "$(ratio "$g" "$m")" "$(ratio "$gt" "$mt")" "$(ratio "$gm" "$mm")"
    done
done
printf '%s\n' "(CPU s = user + system time of all relay processes in tsrv during the run, with the" \
    " kernel NAPI threads of tsrv's devices (gate64's TUN), shown apart as NAPI s; other kernel" \
    " forwarding and softirq is attributed to neither; Mbit/s/CPU-s and the efficiency ratios" \
    " are medians of per-run Mbit/s over that run's CPU s; machine s = whole-machine busy time" \
    " from /proc/stat, softirq included, over the same run.)"
print_sockbuf_table
exit_status
