#!/usr/bin/env bash
# DNS64 queries per second: gate64's DNS64 vs Unbound's dns64 module, in one run, in one
# network namespace on its loopback:
#
#   dnsperf ──► gate64 serve   [dns64] [::1]:5301 ──────┐
#   dnsperf ──► unbound        dns64 module [::1]:5302 ─┴─► upstream unbound 127.0.0.1:5300
#
# The DNS64s listen on ::1: dnsperf 2.10 turns 127.0.0.1 into ::ffff:127.0.0.1 on a V6ONLY
# socket (ENETUNREACH) as soon as the namespace has a global IPv6 address, which gate64's
# TUN device brings.
#
# The upstream is a second Unbound serving a redirect zone: every name under corp.example has
# only an A record (198.51.100.10) and an SOA, so every AAAA query is synthesized (AAAA NODATA,
# then A). Both DNS64s use two threads (gate64: one UDP thread per core; Unbound: num-threads
# 2 with so-reuseport) and the prefix 64:ff9b::/96.
#
# Two workloads per setup, dnsperf with CLIENTS sockets and OUTSTANDING queries in flight:
#   cached    1,000 names asked over and over (after a warm-up pass): the answer cache;
#   uncached  names never asked before (random labels under the redirect zone): every query
#             costs two upstream queries.
# Reported per cell: QPS, average latency, lost queries and the CPU seconds of the DNS64
# process (utime + stime, all threads), all from the run with the median QPS among those that
# succeeded (a dnsperf run that fails is left out, shown in the runs column, and makes the exit
# status 1), and gate64/unbound.
#
# Socket buffers: gate64 asks for a 4 MiB receive buffer on its UDP listeners (plain SO_RCVBUF,
# capped at rmem_max, doubled by the kernel) and sets no send buffer; Unbound sets neither
# (so-rcvbuf and so-sndbuf default to 0, the system's). The host's sysctls are set for the run
# (bench/lib.sh match_sockbufs; restored on exit) so that both listeners hold the same 8 MiB
# receive buffer and every socket that sets nothing the same send buffer; the table at the
# end shows both DNS64s' sockets.
#
# usage: sudo bench/dns64.sh            (from the repo root; builds gate64 in release mode)
# env:   RUNS=3           runs per cell, the median of those that succeed is reported
#        DURATION=10      seconds per dnsperf run
#        CLIENTS=8        dnsperf -c
#        OUTSTANDING=500  dnsperf -q
#        SETUPS="gate64 unbound"
#        GATE64_BIN=path  use this binary and skip the build
#        KEEP_LOGS=1      keep the temporary directory with configs and logs
#        SOCKBUF=bytes    the receive buffer gate64 asks for on its DNS64 listeners (default:
#                         its 4 MiB); host rmem_max/wmem_max = SOCKBUF, rmem_default/
#                         wmem_default = 2 x SOCKBUF for the run; 0: leave the host's values
#        DNSPERF=dnsperf  the dnsperf of the measured runs (DNSPERF=/bin/false: every run fails)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

RUNS=${RUNS:-3}
DURATION=${DURATION:-10}
CLIENTS=${CLIENTS:-8}
OUTSTANDING=${OUTSTANDING:-500}
SETUPS=${SETUPS:-"gate64 unbound"}
DNSPERF=${DNSPERF:-dnsperf}

NS=g64-bdns-$$-0
NAMESPACES=("$NS")

require_root
require_tools "apt-get install unbound dnsperf dnsutils iproute2" ip ss unbound dnsperf dig awk

WORK=$(mktemp -d /tmp/gate64-bench-dns64.XXXXXX)
install_cleanup
match_sockbufs "${SOCKBUF:-$GATE64_SOCKBUF_DNS64}"

UPSTREAM_PORT=5300
declare -A PORT=([gate64]=5301 [unbound]=5302)

# pid_ticks PID: clock ticks (utime + stime, all threads) of one process.
pid_ticks() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $12 + $13}'; }

udp_bound() { ip netns exec "$NS" ss -Hnuln | awk '{print $4}' | grep -Fqx "$1"; }

unbound_common() { # unbound_common NAME ADDRESS PORT THREADS
    cat <<EOF
server:
    interface: $2@$3
    port: $3
    do-daemonize: no
    username: ""
    chroot: ""
    directory: "$WORK"
    pidfile: "$WORK/$1.pid"
    use-syslog: no
    logfile: ""
    verbosity: 0
    num-threads: $4
    so-reuseport: yes
    access-control: 127.0.0.0/8 allow
    access-control: ::1 allow
remote-control:
    control-enable: no
server:
EOF
}

start_upstream() {
    {
        unbound_common upstream 127.0.0.1 "$UPSTREAM_PORT" 1
        cat <<EOF
    module-config: "iterator"
    local-zone: "corp.example." redirect
    local-data: "corp.example. 3600 IN A 198.51.100.10"
    local-data: "corp.example. 3600 IN SOA ns.corp.example. hostmaster.corp.example. 1 3600 600 86400 300"
EOF
    } >"$WORK/upstream.conf"
    start_bg "$NS" upstream unbound -d -c "$WORK/upstream.conf"
    wait_for 10 udp_bound "127.0.0.1:$UPSTREAM_PORT" || {
        log "upstream unbound did not start: $(cat "$WORK/upstream.log")"
        exit 1
    }
}

start_setup() { # start_setup SETUP: starts it, sets DNS64_PID
    local setup=$1 port=${PORT[$1]}
    case $setup in
    gate64)
        cat >"$WORK/gate64.toml" <<EOF
[server]
workers = 1

[teredo]
enabled = false

[corpnet]
tun = "g64bdns"
ipv6_prefixes = ["2001:db8:100::/48"]
address6 = "2001:db8:100::1"
manage_routes = false

[nat64]
enabled = false
prefix = "64:ff9b::/96"
# 198.51.100.10 is a documentation address, which the Well-Known Prefix refuses otherwise.
allow_private_ipv4 = true

[dns64]
upstream = ["127.0.0.1:$UPSTREAM_PORT"]
listen = ["[::1]:$port"]
serve_on_corp_address = false

[metrics]
enabled = false

[log]
level = "warn"
EOF
        start_bg "$NS" gate64 "$GATE64_BIN" serve --config "$WORK/gate64.toml"
        ;;
    unbound)
        {
            unbound_common unbound-dns64 ::1 "$port" 2
            cat <<EOF
    module-config: "dns64 iterator"
    dns64-prefix: 64:ff9b::/96
    do-not-query-localhost: no
    msg-cache-size: 64m
    rrset-cache-size: 128m
    num-queries-per-thread: 4096
forward-zone:
    name: "."
    forward-addr: 127.0.0.1@$UPSTREAM_PORT
EOF
        } >"$WORK/unbound-dns64.conf"
        start_bg "$NS" unbound unbound -d -c "$WORK/unbound-dns64.conf"
        ;;
    esac
    if ! wait_for 15 udp_bound "[::1]:$port"; then
        log "$setup did not start: $(tail -20 "$WORK/$setup.log")"
        exit 1
    fi
    DNS64_PID=$(ip netns exec "$NS" ss -Hnulp "sport = :$port" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
    local answer
    answer=$(ip netns exec "$NS" dig +short +tries=2 +time=2 @::1 -p "$port" probe.corp.example AAAA)
    if [ "$answer" != "64:ff9b::c633:640a" ]; then
        log "$setup: dig AAAA probe.corp.example gave '$answer', not 64:ff9b::c633:640a"
        exit 1
    fi
}

stop_setup() { # stop_setup SETUP
    local pid=$DNS64_PID
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

# names_file FILE COUNT TAG: COUNT unique AAAA queries under the redirect zone.
names_file() {
    awk -v n="$2" -v tag="$3" -v seed="$RANDOM$$" 'BEGIN {
        srand(seed)
        for (i = 0; i < n; i++) printf "u%x%x-%s-%d.corp.example AAAA\n", int(rand() * 2^31), int(rand() * 2^31), tag, i
    }' >"$1"
}

# run_dnsperf SETUP FILE EXTRA...: one dnsperf ($DNSPERF) run; prints "qps latency_ms lost
# cpu_s", or fails (printing dnsperf's last lines) when dnsperf fails or reports no QPS.
run_dnsperf() {
    local setup=$1 file=$2 out t0 t1 rc=0
    shift 2
    out="$WORK/dnsperf-$setup-$(basename "$file")-$RANDOM.txt"
    t0=$(pid_ticks "$DNS64_PID")
    ip netns exec "$NS" "$DNSPERF" -s ::1 -p "${PORT[$setup]}" -d "$file" \
        -c "$CLIENTS" -q "$OUTSTANDING" -l "$DURATION" "$@" >"$out" 2>&1 || rc=$?
    t1=$(pid_ticks "$DNS64_PID")
    if [ "$rc" != 0 ] || ! grep -q 'Queries per second' "$out"; then
        echo "dnsperf exit status $rc: $(tail -3 "$out" | tr '\n' ' ')"
        return 1
    fi
    awk -v cpu="$(secs $((t1 - t0)))" '
        /Queries per second/ {qps = $4}
        /Average Latency/ {lat = $4 * 1000}
        /Queries lost/ {lost = $3}
        END {printf "%.0f %.3f %s %s\n", qps, lat, lost, cpu}' "$out"
}

build_gate64
log "== gate64: $GATE64_BIN"
log "== dnsperf -c $CLIENTS -q $OUTSTANDING, $DURATION s per run, $RUNS run(s) per cell"

ip netns add "$NS"
ip -n "$NS" link set lo up
start_upstream

awk 'BEGIN {for (i = 0; i < 1000; i++) printf "h%d.corp.example AAAA\n", i}' >"$WORK/cached.txt"

declare -A RESULT
for setup in $SETUPS; do
    start_setup "$setup"
    # Warm the cache: one pass over the cached names.
    ip netns exec "$NS" dnsperf -s ::1 -p "${PORT[$setup]}" -d "$WORK/cached.txt" \
        -n 1 -c "$CLIENTS" -q 100 >/dev/null 2>&1 || true
    for load in cached uncached; do
        rows=()
        for run in $(seq "$RUNS"); do
            row="" rc=0
            if [ "$load" = cached ]; then
                row=$(run_dnsperf "$setup" "$WORK/cached.txt") || rc=$?
            else
                f="$WORK/uncached-$setup-$run.txt"
                # Enough unique names for 150,000 queries per second.
                names_file "$f" $((DURATION * 150000)) "$setup$run"
                row=$(run_dnsperf "$setup" "$f" -n 1) || rc=$?
                rm -f "$f"
            fi
            if [ "$rc" != 0 ]; then
                run_failed "$setup $load run $run: $row"
                continue
            fi
            rows+=("$row")
            log "$setup $load run $run: $row (qps latency_ms lost cpu_s)"
        done
        if [ "${#rows[@]}" -eq 0 ]; then
            RESULT[$setup.$load]="0 nan nan nan nan"
            continue
        fi
        qps=$(printf '%s\n' "${rows[@]}" | awk '{print $1}' | median)
        # The other columns of the run whose QPS is the median.
        RESULT[$setup.$load]="${#rows[@]} $(printf '%s\n' "${rows[@]}" | awk -v q="$qps" '$1 == q {print; exit}')"
    done
    # Effective socket buffers of the DNS64's sockets, after its runs.
    print_sockbufs "$setup" "$NS" "$DNS64_PID"
    stop_setup "$setup"
done

printf '\n%-9s %-9s %8s %10s %12s %8s %8s\n' setup load runs QPS "latency ms" lost "CPU s"
for load in cached uncached; do
    for setup in $SETUPS; do
        read -r ok qps lat lost cpu <<<"${RESULT[$setup.$load]:-0 nan nan nan nan}"
        printf '%-9s %-9s %8s %10s %12s %8s %8s\n' "$setup" "$load" "$(runs_cell "$ok")" "$qps" \
            "$lat" "$lost" "$cpu"
    done
done
if [[ " $SETUPS " == *" gate64 "* && " $SETUPS " == *" unbound "* ]]; then
    for load in cached uncached; do
        read -r _ g _ <<<"${RESULT[gate64.$load]}"
        read -r _ u _ <<<"${RESULT[unbound.$load]}"
        printf 'gate64/unbound %-9s QPS ratio %s\n' "$load" "$(ratio "$g" "$u")"
    done
fi
print_sockbuf_table
exit_status
