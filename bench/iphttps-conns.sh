#!/usr/bin/env bash
# IP-HTTPS connection scale: how many concurrent IP-HTTPS links one gate64 holds, how fast it
# accepts new ones, and what each costs in memory.
#
#   tcli  198.51.100.10.. (iphttps-load) ── tsrv  198.51.100.1:443 (gate64 serve, [iphttps])
#
# gate64 serves IP-HTTPS only (Teredo disabled) with `[limits] max_iphttps_connections =
# 20000` and the default `max_tls_handshakes`; the prefix pool is a /48 (65536 /64s).
# `iphttps-load` (gate64-testkit) opens COUNT connections (TLS + POST + 200) and holds them.
# The script reads gate64's VmRSS (/proc/<pid>/status) before any connection and while all
# are held, scrapes gate64_clients{transport="iphttps"} from /metrics while held, and prints
# connections held, new connections per second, and memory per connection =
# (RSS_held - RSS_idle) / held.
#
# usage: sudo bench/iphttps-conns.sh        (from the repo root; builds in release mode)
# env:   COUNT=10000        connections to open
#        CONCURRENCY=256    connection attempts in flight (iphttps-load --concurrency)
#        RATE=0             new connections per second at most, 0 = unlimited
#        SOURCES=1          client source addresses 198.51.100.10.. (spread ephemeral ports)
#        WORKERS=2          gate64 [server] workers
#        LOG_LEVEL=warn     gate64 log level (info logs two lines per connection)
#        SETTLE=3           seconds to wait after the last connection before measuring
#        NOFILE=1048576     ulimit -n (soft and hard) for gate64 and iphttps-load
#        GATE64_BIN=path LOAD_BIN=path   use these binaries and skip the build
#        KEEP_LOGS=1        keep the temporary directory with config, certificates and logs
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

COUNT=${COUNT:-10000}
CONCURRENCY=${CONCURRENCY:-256}
RATE=${RATE:-0}
SOURCES=${SOURCES:-1}
WORKERS=${WORKERS:-2}
LOG_LEVEL=${LOG_LEVEL:-warn}
SETTLE=${SETTLE:-3}
NOFILE=${NOFILE:-1048576}

require_root
require_tools "apt-get install iproute2 curl gawk" ip ss curl awk

NAMESPACES=("$CLI" "$SRV") # no tcorp
TERM_WAIT_TICKS=50
WORK=$(mktemp -d /tmp/gate64-bench-iphttps.XXXXXX)
METRICS=http://127.0.0.1:9164/metrics

install_cleanup

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
metrics() { ip netns exec "$SRV" curl -fsS --max-time 5 "$METRICS"; }
# metric NAME LABELS: the value of one sample (labels as in the exposition, e.g.
# 'transport="iphttps"'), or 0.
metric() {
    metrics | awk -v want="$1{$2}" '$1 == want { v = $2 } END { print v + 0 }'
}

# ---------------------------------------------------------------- binaries

if [ -z "${GATE64_BIN:-}" ] || [ -z "${LOAD_BIN:-}" ]; then
    log "building gate64 and iphttps-load (release)..."
    cargo build --release -p gate64 -p gate64-testkit --bins >&2
    TARGET=$(cargo metadata --format-version 1 --no-deps |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
    GATE64_BIN=${GATE64_BIN:-$TARGET/release/gate64}
    LOAD_BIN=${LOAD_BIN:-$TARGET/release/iphttps-load}
fi
for b in "$GATE64_BIN" "$LOAD_BIN"; do
    [ -x "$b" ] || { log "missing binary $b"; exit 1; }
done

# ---------------------------------------------------------------- topology

for ns in "${NAMESPACES[@]}"; do
    ip netns add "$ns"
    ip -n "$ns" link set lo up
done
ip link add name vcli netns "$SRV" type veth peer name vsrv netns "$CLI"
ip -n "$SRV" link set vcli up
ip -n "$CLI" link set vsrv up
ip -n "$SRV" addr add 198.51.100.1/24 dev vcli
BIND=()
for i in $(seq 0 $((SOURCES - 1))); do
    ip -n "$CLI" addr add "198.51.100.$((10 + i))/24" dev vsrv
    BIND+=("198.51.100.$((10 + i))")
done
ip -n "$CLI" route add default via 198.51.100.1
# More ephemeral ports per source address (default 32768-60999).
ip netns exec "$CLI" sysctl -qw net.ipv4.ip_local_port_range="1024 65535"
ip netns exec "$SRV" sysctl -qw net.ipv6.conf.all.forwarding=1

# Both processes inherit this shell's limits: one descriptor per connection on each side.
# Raising the hard limit needs CAP_SYS_RESOURCE; without it, go as far as the hard limit.
if ! ulimit -Hn "$NOFILE" 2>/dev/null; then
    log "cannot raise the hard open-files limit to $NOFILE (no CAP_SYS_RESOURCE?);" \
        "using the hard limit $(ulimit -Hn)"
fi
ulimit -n "$(ulimit -Hn)"
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((COUNT + 100)) ]; then
    log "warning: ulimit -n is $(ulimit -n), below COUNT + 100: connections will fail with EMFILE"
fi

# ---------------------------------------------------------------- gate64

CERTS=$WORK/certs
ip netns exec "$SRV" "$GATE64_BIN" certs --out "$CERTS" --server-ip 198.51.100.1 \
    --server-name gate64.lab.example >"$WORK/certs.log" 2>&1
cat >"$WORK/gate64.toml" <<EOF
[server]
workers = $WORKERS

[teredo]
enabled = false

[iphttps]
enabled = true
listen = "198.51.100.1:443"
certificate = "$CERTS/server.pem"
private_key = "$CERTS/server.key"
prefix = "2001:db8:1::/48"
# The load comes from SOURCES addresses (default one): lift the per-source and per-network
# limits, which would otherwise refuse all but 1024 connections (32 in their handshake) per
# address and 128 handshakes per /24.
max_handshakes_per_source = 1024
max_handshakes_per_network = 1024
max_connections_per_source = 1000000

[corpnet]
tun = "$GATE64_TUN"
ipv6_prefixes = ["2001:db8:100::/48"]
address6 = "2001:db8:100::1"
[ipsec]
require = false

[metrics]
listen = "127.0.0.1:9164"

[limits]
max_iphttps_connections = 20000

[log]
level = "$LOG_LEVEL"
EOF
# `ip netns exec` execs gate64 in place: $! is gate64's pid.
ip netns exec "$SRV" "$GATE64_BIN" serve --config "$WORK/gate64.toml" \
    >"$WORK/gate64.log" 2>&1 &
GATE_PID=$!
if ! wait_for 15 tcp_listening "$SRV" 443 || ! wait_for 5 metrics; then
    log "gate64 did not come up; log:"
    cat "$WORK/gate64.log" >&2
    exit 1
fi
sleep 1
RSS_IDLE=$(rss_kib "$GATE_PID")
BACKLOG=$(ip netns exec "$SRV" ss -Hntl 'sport = :443' | awk '{ print $3 }')
log "gate64 pid $GATE_PID up: VmRSS $RSS_IDLE KiB idle, listen backlog $BACKLOG," \
    "nofile $(awk '/Max open files/ { print $4 }' "/proc/$GATE_PID/limits")"

# ---------------------------------------------------------------- load

# Accept-queue overflows (TcpExtListenOverflows / ListenDrops) on the server side: the
# listener's backlog is what tokio's TcpListener::bind asks for, capped by somaxconn.
listen_drops() {
    ip netns exec "$SRV" awk '/^TcpExt:/ { if (!h) { split($0, k); h = 1 } else {
        for (i = 2; i <= NF; i++) if (k[i] == "ListenOverflows" || k[i] == "ListenDrops")
            printf "%s=%s ", k[i], $i } }' /proc/net/netstat
}
LISTEN_BEFORE=$(listen_drops)
BIND_ARG=$(IFS=,; echo "${BIND[*]}")
ip netns exec "$CLI" "$LOAD_BIN" --url https://198.51.100.1/IPHTTPS --ca "$CERTS/ca.pem" \
    --count "$COUNT" --concurrency "$CONCURRENCY" --rate "$RATE" --hold-secs 0 \
    --bind "$BIND_ARG" >"$WORK/load.out" 2>"$WORK/load.err" &
LOAD_PID=$!
# Generous: 10,000 connections take seconds; a stuck run ends at the per-attempt timeout.
established_line() { grep -q '^established=' "$WORK/load.out"; }
if ! wait_for $((120 + COUNT / 100)) established_line; then
    log "iphttps-load did not finish its attempts; its output:"
    tail -5 "$WORK/load.err" "$WORK/load.out" >&2
    exit 1
fi
sleep "$SETTLE"
RSS_HELD=$(rss_kib "$GATE_PID")
HWM=$(awk '/^VmHWM:/ { print $2 }' "/proc/$GATE_PID/status")
CLIENTS=$(metric gate64_clients 'transport="iphttps"')
TCP_EST=$(ip netns exec "$SRV" ss -Htn state established 'sport = :443' | wc -l)
HS_OK=$(metric gate64_tls_handshakes_total 'result="ok"')
HS_OTHER=$(metrics | awk '/^gate64_tls_handshakes_total\{/ && !/result="ok"/ { s += $2 }
    END { print s + 0 }')
THREADS=$(awk '/^Threads:/ { print $2 }' "/proc/$GATE_PID/status")
LOAD_LINE=$(grep '^established=' "$WORK/load.out")
LISTEN_AFTER=$(listen_drops)
kill -TERM "$LOAD_PID" 2>/dev/null || true
wait "$LOAD_PID" 2>/dev/null || true
kill -0 "$GATE_PID" 2>/dev/null || { log "gate64 died; log:"; tail -20 "$WORK/gate64.log" >&2; exit 1; }

# ---------------------------------------------------------------- report

field() { printf '%s\n' "$LOAD_LINE" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
ESTABLISHED=$(field established)
FAILED=$(field failed)
CPS=$(field conns_per_sec)
EST_TIME=$(field establish_time)
echo
echo "IP-HTTPS connections: COUNT=$COUNT CONCURRENCY=$CONCURRENCY RATE=$RATE SOURCES=$SOURCES" \
    "WORKERS=$WORKERS (2 cores: iphttps-load and gate64 share them)"
printf '  %-42s %s\n' "established / failed (iphttps-load)" "$ESTABLISHED / $FAILED"
printf '  %-42s %s\n' "connections held (gate64_clients iphttps)" "$CLIENTS"
printf '  %-42s %s\n' "TCP established on :443 (ss)" "$TCP_EST"
printf '  %-42s %s, %s conn/s\n' "time to establish all, new connections/s" "$EST_TIME" "$CPS"
printf '  %-42s %s -> %s (backlog %s)\n' "server accept queue" "${LISTEN_BEFORE:-none}" \
    "${LISTEN_AFTER:-none}" "$BACKLOG"
printf '  %-42s ok %s, other %s\n' "gate64_tls_handshakes_total" "$HS_OK" "$HS_OTHER"
printf '  %-42s %s KiB idle, %s KiB held (peak %s KiB), %s threads\n' "gate64 VmRSS" \
    "$RSS_IDLE" "$RSS_HELD" "$HWM" "$THREADS"
awk -v idle="$RSS_IDLE" -v held="$RSS_HELD" -v n="$CLIENTS" 'BEGIN {
    if (n > 0) printf "  %-42s %.0f bytes (%.1f KiB)\n", "memory per connection", \
        (held - idle) * 1024 / n, (held - idle) / n
}'
if grep -q 'failed [0-9]*x' "$WORK/load.out"; then
    echo "  failures:"
    grep 'failed [0-9]*x' "$WORK/load.out" | sed 's/^/  /'
fi
if [ "$CLIENTS" != "$COUNT" ]; then
    log "not all $COUNT connections were held; gate64 log tail:"
    tail -5 "$WORK/gate64.log" >&2
    exit 1
fi
