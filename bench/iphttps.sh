#!/usr/bin/env bash
# IP-HTTPS throughput and CPU efficiency: gate64 (`serve` with [iphttps] + `connect iphttps`)
# vs a plain TLS tunnel (stunnel4 client + server) carrying the same iperf3 flows, on the
# standard namespace lab of gate64-testkit's Topology (docs: teredo-iphttps.md §3):
#
#   tcli  198.51.100.10 ── tsrv  198.51.100.1 (gate64 serve :443 | stunnel server :443)
#                          tsrv  2001:db8:100:1::1 ── tcorp ::2 (iperf3 -s)
#
#   gate64:  iperf3 -c tcorp in tcli -> TUN gate64c -> `gate64 connect iphttps` -> TLS/TCP
#            -> `gate64 serve` -> TUN gate64 -> kernel forwarding -> tcorp
#   stunnel: iperf3 -c 127.0.0.1 in tcli -> stunnel client -> TLS/TCP -> stunnel server
#            -> TCP -> tcorp:5201
#
# Both use the lab certificates of `gate64 certs` (ECDSA P-256); TLS version and cipher are
# whatever each pair negotiates (TLS 1.3 + AES-256-GCM with Debian's OpenSSL and rustls; the
# stunnel log line is shown). For each setup it runs iperf3 TCP with 1 and 4 flows and measures
# the CPU seconds (utime + stime of all threads, /proc/<pid>/stat) during each run of
#   - the server side: every process in tsrv (only gate64 serve, or only stunnel), with the
#     kernel NAPI threads of tsrv's devices (gate64's TUN);
#   - the client side: the tunnel client in tcli (gate64 connect, or stunnel; iperf3
#     excluded), with the NAPI threads of tcli's devices.
# Everything shares the same cores, so the client side competes with the server for CPU.
# Other kernel forwarding, TUN and softirq time is not attributed to anyone.
#
# Socket buffers: the tunnels are TCP connections, and neither gate64 nor stunnel sets a
# buffer on them, so both get the kernel's TCP autotuning (net.ipv4.tcp_rmem/tcp_wmem; the
# net.core.*mem_* sysctls do not apply to it). The host's values are left as they are; the
# table at the end shows every socket of both sides.
#
# usage: sudo bench/iphttps.sh           (from the repo root; builds gate64 in release mode)
# env:   RUNS=3        runs per cell, the median of those that succeed is reported; a failed
#                      run shows in the runs column and makes the exit status 1
#        DURATION=10   seconds per iperf3 run
#        FLOWS="1 4"   iperf3 -P values
#        DIRS="up down"  up = client -> tcorp, down = tcorp -> client (iperf3 -R)
#        SETUPS="gate64 stunnel"
#        SEND_QUEUE_BYTES=n  gate64's iphttps.send_queue_bytes (default: gate64's default)
#        GATE64_BIN=path  use this binary and skip the build
#        KEEP_LOGS=1   keep the temporary directory with configs, logs and iperf3 JSON
#        IPERF3=iperf3 the iperf3 client of the runs (IPERF3=/bin/false: every run fails)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

RUNS=${RUNS:-3}
DURATION=${DURATION:-10}
FLOWS=${FLOWS:-"1 4"}
DIRS=${DIRS:-"up down"}
SETUPS=${SETUPS:-"gate64 stunnel"}

require_root
require_tools "apt-get install iperf3 iproute2 iputils-ping" ip ss iperf3 ping awk
STUNNEL=""
if [[ " $SETUPS " == *" stunnel "* ]]; then
    STUNNEL=$(command -v stunnel4 || command -v stunnel || true)
    [ -n "$STUNNEL" ] || {
        echo "missing stunnel (apt-get install stunnel4), or run with SETUPS=gate64" >&2
        exit 1
    }
fi

WORK=$(mktemp -d /tmp/gate64-bench-iphttps.XXXXXX)
CORP_PREFIX=2001:db8:100::/48
IPHTTPS_PREFIX=2001:db8:1::/48
TLS_PORT=443

install_cleanup

# ---------------------------------------------------------------- topology

client_ready() {
    ip -n "$CLI" -6 addr show dev gate64c 2>/dev/null | grep 'inet6 2001:db8:1:' | grep -vq tentative &&
        ip -n "$CLI" -6 route show "$CORP_PREFIX" | grep -q 'dev gate64c'
}

make_certs() {
    [ -f "$WORK/certs/server.pem" ] && return 0
    "$GATE64_BIN" certs --out "$WORK/certs" --server-ip "$SERVER_IP" \
        --server-name gate64.lab.example >/dev/null
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
ipv6_prefixes = ["$CORP_PREFIX"]
address6 = "2001:db8:100::1"
[ipsec]
require = false
[iphttps]
enabled = true
listen = "$SERVER_IP:$TLS_PORT"
certificate = "$WORK/certs/server.pem"
private_key = "$WORK/certs/server.key"
prefix = "$IPHTTPS_PREFIX"
${SEND_QUEUE_BYTES:+send_queue_bytes = $SEND_QUEUE_BYTES}
[metrics]
listen = "127.0.0.1:9164"
[log]
level = "info"
EOF
    start_bg "$SRV" gate64 "$GATE64_BIN" serve --config "$WORK/gate64.toml"
    wait_for 15 tcp_listening "$SRV" "$TLS_PORT" && wait_for 5 tcp_listening "$SRV" 9164 || {
        log "gate64 did not listen on $SERVER_IP:$TLS_PORT; its log:"
        cat "$WORK/gate64.log" >&2
        return 1
    }
    start_bg "$CLI" gate64-connect "$GATE64_BIN" connect iphttps --no-ipsec \
        --server "https://$SERVER_IP/IPHTTPS" --ca "$WORK/certs/ca.pem" --route "$CORP_PREFIX"
    wait_for 15 client_ready || { log "gate64 connect: no link within 15 s"; return 1; }
    IPERF_TARGET=$CORP_HOST
}

start_stunnel() {
    # Server in tsrv: TLS on 198.51.100.1:443 -> TCP to tcorp's iperf3.
    cat >"$WORK/stunnel-srv.conf" <<EOF
foreground = yes
pid =
debug = notice
[iperf]
accept = $SERVER_IP:$TLS_PORT
connect = $CORP_HOST:5201
cert = $WORK/certs/server.pem
key = $WORK/certs/server.key
EOF
    # Client in tcli: 127.0.0.1:5201 -> TLS to the server, verifying it against the lab CA.
    cat >"$WORK/stunnel-cli.conf" <<EOF
foreground = yes
pid =
debug = info
[iperf]
client = yes
accept = 127.0.0.1:5201
connect = $SERVER_IP:$TLS_PORT
CAfile = $WORK/certs/ca.pem
verifyChain = yes
checkIP = $SERVER_IP
EOF
    start_bg "$SRV" stunnel-srv "$STUNNEL" "$WORK/stunnel-srv.conf"
    start_bg "$CLI" stunnel-cli "$STUNNEL" "$WORK/stunnel-cli.conf"
    wait_for 10 tcp_listening "$SRV" "$TLS_PORT" && wait_for 10 tcp_listening "$CLI" 5201 || {
        log "stunnel did not start; logs:"
        cat "$WORK"/stunnel-*.log >&2
        return 1
    }
    IPERF_TARGET=127.0.0.1
}

start_iperf_server() {
    start_bg "$CORP" iperf3-server iperf3 -s
    wait_for 5 tcp_listening "$CORP" 5201 || { log "iperf3 -s not listening"; return 1; }
}

# ---------------------------------------------------------------- measurement

client_ticks() { ns_ticks "$CLI" iperf3; }

RESULTS=() # "setup flows dir ok mbps server_cpu server_napi eff client_cpu" (medians of the ok runs)

measure_setup() {
    local setup=$1 flows dir run json p0 p1 n0 n1 c0 c1 mbps scpu snapi ccpu ok
    for flows in $FLOWS; do
        for dir in $DIRS; do
            local mbps_runs="" scpu_runs="" snapi_runs="" eff_runs="" ccpu_runs=""
            ok=0
            for run in $(seq "$RUNS"); do
                json="$WORK/$setup-P$flows-$dir-$run.json"
                p0=$(proc_ticks "$SRV")
                n0=$(napi_ticks "$SRV")
                c0=$(client_ticks)
                run_iperf3 "$setup P$flows $dir run $run" "$IPERF_TARGET" "$flows" "$dir" "$json" ||
                    { run_failed "$setup -P $flows $dir run $run: iperf3 failed"; continue; }
                p1=$(proc_ticks "$SRV")
                n1=$(napi_ticks "$SRV")
                c1=$(client_ticks)
                mbps=$(received_mbps "$json")
                scpu=$(secs $((p1 - p0 + n1 - n0)))
                snapi=$(secs $((n1 - n0)))
                ccpu=$(secs $((c1 - c0)))
                ok=$((ok + 1))
                log "  $setup -P $flows $dir run $run: $mbps Mbit/s, server CPU $scpu s (NAPI $snapi s), client CPU $ccpu s"
                if [ "$setup" = gate64 ]; then
                    # Cumulative drop counters, so a loss-limited run shows why.
                    log "    drops so far: $(ip netns exec "$SRV" curl -s 127.0.0.1:9164/metrics |
                        awk '/^gate64_drops_total/ && $2 != 0 {sub(/gate64_drops_total/, ""); printf "%s ", $0}')"
                fi
                mbps_runs+="$mbps"$'\n'
                scpu_runs+="$scpu"$'\n'
                snapi_runs+="$snapi"$'\n'
                ccpu_runs+="$ccpu"$'\n'
                # Per run (Mbit/s and server CPU of the same run), then the median.
                eff_runs+="$(quotient "$mbps" "$scpu")"$'\n'
            done
            RESULTS+=("$setup $flows $dir $ok $(median_of "$mbps_runs") $(median_of "$scpu_runs") $(median_of "$snapi_runs") $(median_of "$eff_runs") $(median_of "$ccpu_runs")")
        done
    done
}

run_setup() {
    local setup=$1
    log "== $setup: setting up"
    teardown
    setup
    start_iperf_server || return 1
    case $setup in
    gate64) start_gate64 || { tail -n 30 "$WORK"/gate64*.log >&2; return 1; } ;;
    stunnel) start_stunnel || return 1 ;;
    *) log "unknown setup $setup"; return 1 ;;
    esac
    # One short exchange first: the path works (and, for gate64, neighbour entries exist).
    if [ "$setup" = gate64 ]; then
        ip netns exec "$CLI" ping -6 -n -c 3 -i 0.2 -W 3 "$CORP_HOST" >"$WORK/ping.log" 2>&1 || {
            log "ping through IP-HTTPS failed: $(cat "$WORK/ping.log")"
            tail -n 30 "$WORK"/gate64*.log >&2
            return 1
        }
    fi
    measure_setup "$setup"
    # Effective socket buffers of the server side (tsrv) and of the tunnel client (the only
    # process left in tcli once the runs are over).
    print_sockbufs "$setup" "$SRV"
    print_sockbufs "$setup" "$CLI"
    if [ "$setup" = stunnel ]; then
        # What the pair negotiated (stunnel logs it per connection at level info).
        NEGOTIATED=$(grep -m1 -o 'TLSv1[.0-9]* ciphersuite: [A-Z0-9_-]*' "$WORK/stunnel-cli.log" || true)
        [ -n "$NEGOTIATED" ] && log "  stunnel negotiated $NEGOTIATED"
    fi
    teardown
}

# ---------------------------------------------------------------- main

build_gate64
make_certs # gate64 certs also serves the stunnel setup

NEGOTIATED=""
for setup in $SETUPS; do
    run_setup "$setup" || run_failed "$setup: setup failed, no run measured"
done

printf '\nIP-HTTPS vs stunnel, iperf3 TCP tcli -> tcorp (up) / tcorp -> tcli (down), %s s per run, median of the runs that succeeded\n' \
    "$DURATION"
[ -n "$NEGOTIATED" ] && printf 'stunnel: %s\n' "$NEGOTIATED"
fmt='%-8s %5s %5s %8s %10s %12s %8s %14s %12s\n'
printf "$fmt" setup flows dir runs "Mbit/s" "server CPU s" "NAPI s" "Mbit/s/CPU-s" "client CPU s"
for r in "${RESULTS[@]}"; do
    read -r setup flows dir ok mbps scpu snapi eff ccpu <<<"$r"
    printf "$fmt" "$setup" "$flows" "$dir" "$(runs_cell "$ok")" "$mbps" "$scpu" "$snapi" \
        "$(fixed 1 "$eff")" "$ccpu"
done

printf '\n%-5s %5s %16s %10s %22s\n' flows dir "gate64/stunnel" "bar 0.80" "gate64/stunnel (eff.)"
for flows in $FLOWS; do
    for dir in $DIRS; do
        gm="" sm="" ge="" se=""
        for r in "${RESULTS[@]}"; do
            read -r setup f d ok mbps scpu snapi eff ccpu <<<"$r"
            [ "$f" = "$flows" ] && [ "$d" = "$dir" ] || continue
            [ "$setup" = gate64 ] && { gm=$mbps; ge=$eff; }
            [ "$setup" = stunnel ] && { sm=$mbps; se=$eff; }
        done
        tput=$(ratio "$gm" "$sm")
        verdict=n/a
        [ "$tput" != n/a ] && verdict=$(awk -v r="$tput" 'BEGIN {print (r >= 0.8 ? "met" : "MISSED")}')
        printf '%-5s %5s %16s %10s %22s\n' "$flows" "$dir" "$tput" "$verdict" "$(ratio "$ge" "$se")"
    done
done
printf '%s\n' "(server CPU s = user + system time of every process in tsrv during the run (gate64 serve" \
    " or the stunnel server) with the kernel NAPI threads of tsrv's devices (gate64's TUN), shown" \
    " apart as NAPI s; client CPU s = the tunnel client in tcli, gate64 connect or the stunnel" \
    " client, iperf3 excluded, with the NAPI threads of tcli's devices. All share one machine;" \
    " other kernel forwarding, TUN and softirq work is not attributed to anyone. Mbit/s/CPU-s" \
    " and its ratio are medians of per-run Mbit/s over that run's server CPU s.)"
print_sockbuf_table
exit_status
