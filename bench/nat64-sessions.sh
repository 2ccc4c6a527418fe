#!/usr/bin/env bash
# One million NAT64 sessions held by one gate64, and the memory each costs.
#
# On the standard namespace lab (bench/lib.sh), `nat64-sessions` (gate64-testkit) plays one
# Teredo client in tcli that sends a UDP datagram from each of PORTS source ports to each of
# DESTS IPv4 hosts behind Pref64 (sessions = ports x destinations; EIM gives one mapping per
# source port). tsrv routes those IPv4 hosts to a blackhole, so only gate64's tables see the
# traffic. The script reads gate64_nat64_sessions and gate64's resident memory (VmRSS) before
# and after, and prints bytes per session.
#
# usage: sudo bench/nat64-sessions.sh     (from the repo root; builds in release mode)
# env:   PORTS=1024-63523 (62,500 ports) and DESTS=16: 1,000,000 sessions
#        PPS=50000      datagrams per second (one gate64 worker takes them all)
#        HOLD=10        seconds to wait before reading the tables again (sessions must stay)
#        GATE64_BIN, SESSIONS_BIN  use these binaries and skip the build
#        SOCKBUF=8388608  host default receive buffer during the run (0: leave as is)
#        KEEP_LOGS=1    keep the temporary directory
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

PORTS=${PORTS:-1024-63523}
DESTS=${DESTS:-16}
PPS=${PPS:-50000}
HOLD=${HOLD:-10}

require_root
require_tools "apt-get install iproute2 curl" ip ss curl awk
WORK=$(mktemp -d /tmp/gate64-bench-sessions.XXXXXX)
# gate64 grows its tables while the load runs; a resize of a million-entry table takes long
# enough for the default 208 KiB socket buffer to overflow. Raise the host defaults for the
# run (restored on exit); SOCKBUF=0 leaves them.
SOCKBUF=${SOCKBUF:-8388608}
if [ "$SOCKBUF" != 0 ]; then
    save_sysctl net.core.rmem_default net.core.rmem_max
    sysctl -qw net.core.rmem_default="$SOCKBUF" net.core.rmem_max="$SOCKBUF"
fi
install_cleanup

build_gate64
if [ -z "${SESSIONS_BIN:-}" ]; then
    PATH="$HOME/.cargo/bin:$PATH" cargo build --release -p gate64-testkit --bin nat64-sessions
    SESSIONS_BIN="${CARGO_TARGET_DIR:-target}/release/nat64-sessions"
fi
SESSIONS_BIN=$(realpath "$SESSIONS_BIN")

setup
ip netns exec "$SRV" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'
ip -n "$SRV" route add blackhole 10.99.0.0/16

cat >"$WORK/gate64.toml" <<EOT
[server]
workers = 2
[teredo]
server_addresses = ["192.0.2.1", "192.0.2.2"]
[corpnet]
tun = "$GATE64_TUN"
ipv6_prefixes = ["2001:db8:100::/48"]
address6 = "2001:db8:100::1"
[ipsec]
require = false
[nat64]
prefix = "2001:db8:64::/96"
pool4 = ["198.19.0.0/27"]
[metrics]
listen = "127.0.0.1:9164"
[log]
level = "info"
EOT
start_bg "$SRV" gate64 "$GATE64_BIN" serve --config "$WORK/gate64.toml"
wait_for 15 tcp_listening "$SRV" 9164 || { cat "$WORK/gate64.log" >&2; exit 1; }

gate_pid() {
    local p
    for p in $(ip netns pids "$SRV"); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = gate64 ] && { echo "$p"; return; }
    done
}
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$(gate_pid)/status"; }
metric_sum() { # metric_sum NAME: sum of all series of NAME
    ip netns exec "$SRV" curl -s 127.0.0.1:9164/metrics |
        awk -v n="$1" '$1 ~ "^"n"([{]|$)" {s += $2} END {printf "%.0f", s}'
}

rss0=$(rss_kib)
s0=$(metric_sum gate64_nat64_sessions)
lo=${PORTS%-*}
hi=${PORTS#*-}
want=$(((hi - lo + 1) * DESTS))
log "== opening $want sessions ($PORTS x $DESTS destinations at $PPS pps)"
t0=$(date +%s.%N)
ip netns exec "$CLI" "$SESSIONS_BIN" --ports "$PORTS" --dests "$DESTS" --pps "$PPS" \
    --bind 198.51.100.10:3600 --server 192.0.2.1:3544
t1=$(date +%s.%N)
sleep 2
s1=$(metric_sum gate64_nat64_sessions)
b1=$(metric_sum gate64_nat64_bib_entries)
rss1=$(rss_kib)
log "== holding for $HOLD s"
sleep "$HOLD"
s2=$(metric_sum gate64_nat64_sessions)
drops=$(ip netns exec "$SRV" curl -s 127.0.0.1:9164/metrics | awk '/^gate64_drops_total/ && $2 != 0')
udp_errs=$(ip netns exec "$SRV" awk '/^Udp:/ {if (!h) {split($0, k); h = 1} else {for (i = 2; i <= NF; i++) if (k[i] ~ /Errors$/ && $i != 0) printf "%s=%s ", k[i], $i}}' /proc/net/snmp)

printf '\nNAT64 sessions held by one gate64 (%s source ports x %s destinations from one Teredo client)\n' "$PORTS" "$DESTS"
printf '  sessions requested       %d\n' "$want"
printf '  sessions after the load  %d (BIB entries %d)\n' "$s1" "$b1"
printf '  sessions %2d s later      %d\n' "$HOLD" "$s2"
printf '  load time                %.1f s\n' "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')"
printf '  gate64 RSS               %d KiB -> %d KiB\n' "$rss0" "$rss1"
awk -v r0="$rss0" -v r1="$rss1" -v s0="$s0" -v s1="$s1" 'BEGIN {
    if (s1 > s0) printf "  bytes per session        %.0f\n", (r1 - r0) * 1024 / (s1 - s0) }'
printf '  kernel UDP errors in tsrv: %s\n' "${udp_errs:-none}"
printf '  non-zero drop counters:\n%s\n' "${drops:-  (none)}"
[ "$s2" -ge "$want" ]
