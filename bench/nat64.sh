#!/usr/bin/env bash
# NAT64 throughput: gate64's stateful NAT64 vs TAYGA (Debian `tayga`), same topology, same run:
#
#   tn6  2001:db8:6::2 ── tnr (translator)  2001:db8:6::1 | 10.44.0.1 ── tn4  10.44.0.2
#        (iperf3 -c 2001:db8:64::a2c:2)      Pref64 2001:db8:64::/96       (iperf3 -s, IPv4 only)
#
# Both translators are TUN-based userspace programs: the kernel in tnr routes Pref64 and the
# IPv4 pool into their TUN device and forwards what they write back. gate64 runs `serve` with
# Teredo off and `[nat64]` on (route_prefix = true); TAYGA runs with a dynamic pool. For each
# it runs iperf3 TCP from tn6 to the IPv4-only host with 1 and 4 flows, both directions, and
# counts the translator's CPU seconds (utime + stime of every process in tnr, with the kernel
# NAPI threads of tnr's devices: gate64's TUN runs threaded NAPI, TAYGA's has none).
#
# Socket buffers: both translators move packets through their TUN only (gate64 sets no
# socket buffer on this path, TAYGA has no socket), and the iperf3 endpoints are the same
# for both, so the host's socket buffer sysctls are left as they are; the table at the end
# shows the translators' sockets.
#
# usage: sudo bench/nat64.sh            (from the repo root; builds gate64 in release mode)
# env:   RUNS=3        runs per cell, the median of those that succeed is reported; a failed
#                      run shows in the runs column and makes the exit status 1
#        DURATION=10   seconds per iperf3 run
#        FLOWS="1 4"   iperf3 -P values
#        DIRS="up down"  up = IPv6 client -> IPv4 host, down = the reverse (iperf3 -R)
#        SETUPS="gate64 tayga"
#        WORKERS=2     gate64 [server] workers
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
SETUPS=${SETUPS:-"gate64 tayga"}
WORKERS=${WORKERS:-2}

N6=g64-bn6-$$-0
NR=g64-bnr-$$-0
N4=g64-bn4-$$-0
NAMESPACES=("$N6" "$NR" "$N4")
# run_iperf3 (bench/lib.sh) runs the client in $CLI.
CLI=$N6
TARGET=2001:db8:64::a2c:2

require_root
require_tools "apt-get install tayga iperf3 iproute2" ip ss iperf3 tayga awk

WORK=$(mktemp -d /tmp/gate64-bench-nat64.XXXXXX)
install_cleanup

setup_nat64_lab() {
    make_namespaces
    ip link add name v6 netns "$NR" type veth peer name vr netns "$N6"
    ip link add name v4 netns "$NR" type veth peer name vr netns "$N4"
    ip -n "$NR" link set v6 up
    ip -n "$NR" link set v4 up
    ip -n "$N6" link set vr up
    ip -n "$N4" link set vr up
    ip -n "$NR" addr add 2001:db8:6::1/64 dev v6 nodad
    ip -n "$NR" addr add 10.44.0.1/24 dev v4
    ip -n "$N6" addr add 2001:db8:6::2/64 dev vr nodad
    ip -n "$N6" -6 route add default via 2001:db8:6::1
    ip -n "$N4" addr add 10.44.0.2/24 dev vr
    ip -n "$N4" route add default via 10.44.0.1
    ip netns exec "$NR" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/forwarding;
                               echo 1 > /proc/sys/net/ipv4/ip_forward'
}

start_gate64() {
    cat >"$WORK/gate64.toml" <<EOF
[server]
workers = $WORKERS
[teredo]
enabled = false
[corpnet]
tun = "$GATE64_TUN"
ipv6_prefixes = ["2001:db8:100::/48"]
address6 = "2001:db8:100::1"
mtu = 1500
[ipsec]
require = false
[nat64]
prefix = "2001:db8:64::/96"
pool4 = ["198.19.0.1"]
route_prefix = true
[metrics]
listen = "127.0.0.1:9164"
[log]
level = "info"
EOF
    start_bg "$NR" gate64 "$GATE64_BIN" serve --config "$WORK/gate64.toml"
    wait_for 15 tcp_listening "$NR" 9164 &&
        wait_for 5 sh -c "ip -n $NR route show 198.19.0.1 | grep -q $GATE64_TUN"
}

start_tayga() {
    mkdir -p "$WORK/tayga"
    cat >"$WORK/tayga.conf" <<EOF
tun-device nat64
ipv4-addr 198.19.1.1
prefix 2001:db8:64::/96
dynamic-pool 198.19.0.0/24
data-dir $WORK/tayga
EOF
    ip netns exec "$NR" tayga -c "$WORK/tayga.conf" --mktun >"$WORK/tayga-mktun.log" 2>&1
    ip -n "$NR" link set nat64 up
    ip -n "$NR" route add 198.19.0.0/24 dev nat64
    ip -n "$NR" route add 198.19.1.1 dev nat64
    ip -n "$NR" -6 route add 2001:db8:64::/96 dev nat64
    # -d: foreground, log to stderr.
    start_bg "$NR" tayga tayga -d -c "$WORK/tayga.conf"
    wait_for 5 sh -c "ip netns pids $NR | grep -q ."
}

RESULTS=() # "setup flows dir ok mbps cpu napi eff" (medians of the runs that succeeded)

measure_setup() {
    local setup=$1 flows dir run json p0 p1 n0 n1 mbps cpu napi ok
    for flows in $FLOWS; do
        for dir in $DIRS; do
            local mbps_runs="" cpu_runs="" napi_runs="" eff_runs=""
            ok=0
            for run in $(seq "$RUNS"); do
                json="$WORK/$setup-P$flows-$dir-$run.json"
                p0=$(proc_ticks "$NR")
                n0=$(napi_ticks "$NR")
                run_iperf3 "$setup P$flows $dir run $run" "$TARGET" "$flows" "$dir" "$json" ||
                    { run_failed "$setup -P $flows $dir run $run: iperf3 failed"; continue; }
                p1=$(proc_ticks "$NR")
                n1=$(napi_ticks "$NR")
                mbps=$(received_mbps "$json")
                cpu=$(secs $((p1 - p0 + n1 - n0)))
                napi=$(secs $((n1 - n0)))
                ok=$((ok + 1))
                log "  $setup -P $flows $dir run $run: $mbps Mbit/s, translator CPU $cpu s (NAPI $napi s)"
                mbps_runs+="$mbps"$'\n'
                cpu_runs+="$cpu"$'\n'
                napi_runs+="$napi"$'\n'
                # Per run (Mbit/s and CPU of the same run), then the median.
                eff_runs+="$(quotient "$mbps" "$cpu")"$'\n'
            done
            RESULTS+=("$setup $flows $dir $ok $(median_of "$mbps_runs") $(median_of "$cpu_runs") $(median_of "$napi_runs") $(median_of "$eff_runs")")
        done
    done
}

run_setup() {
    local setup=$1
    log "== $setup: setting up"
    teardown
    setup_nat64_lab
    case $setup in
    gate64) start_gate64 || { log "gate64 did not start:"; cat "$WORK/gate64.log" >&2; return 1; } ;;
    tayga) start_tayga || { log "tayga did not start:"; cat "$WORK"/tayga*.log >&2; return 1; } ;;
    *) log "unknown setup $setup"; return 1 ;;
    esac
    start_bg "$N4" iperf3-server iperf3 -s
    wait_for 5 tcp_listening "$N4" 5201 || { log "iperf3 -s not listening"; return 1; }
    ip netns exec "$N6" ping -6 -n -c 3 -i 0.2 -W 3 "$TARGET" >"$WORK/ping-$setup.log" 2>&1 || {
        log "$setup: ping through the translator failed: $(cat "$WORK/ping-$setup.log")"
        tail -n 20 "$WORK"/*.log >&2
        return 1
    }
    measure_setup "$setup"
    print_sockbufs "$setup" "$NR"
    teardown
}

if [[ " $SETUPS " == *" gate64 "* ]]; then
    build_gate64
fi

for setup in $SETUPS; do
    run_setup "$setup" || run_failed "$setup: setup failed, no run measured"
done

printf '\nNAT64, iperf3 TCP tn6 -> tn4 (up) / tn4 -> tn6 (down), %s s per run, median of the runs that succeeded\n' \
    "$DURATION"
fmt='%-8s %5s %5s %8s %10s %8s %8s %14s\n'
printf "$fmt" setup flows dir runs "Mbit/s" "CPU s" "NAPI s" "Mbit/s/CPU-s"
for r in "${RESULTS[@]}"; do
    read -r setup flows dir ok mbps cpu napi eff <<<"$r"
    printf "$fmt" "$setup" "$flows" "$dir" "$(runs_cell "$ok")" "$mbps" "$cpu" "$napi" "$(fixed 1 "$eff")"
done

printf '\n%-5s %5s %20s %20s\n' flows dir "gate64/tayga (Mbit/s)" "(Mbit/s per CPU-s)"
for flows in $FLOWS; do
    for dir in $DIRS; do
        gm="" tm="" ge="" te=""
        for r in "${RESULTS[@]}"; do
            read -r setup f d ok mbps cpu napi eff <<<"$r"
            [ "$f" = "$flows" ] && [ "$d" = "$dir" ] || continue
            [ "$setup" = gate64 ] && gm=$mbps && ge=$eff
            [ "$setup" = tayga ] && tm=$mbps && te=$eff
        done
        printf '%-5s %5s %20s %20s\n' "$flows" "$dir" "$(ratio "$gm" "$tm")" "$(ratio "$ge" "$te")"
    done
done
printf '%s\n' "(CPU s = user + system time of the translator process(es) in tnr during the run, with" \
    " the kernel NAPI threads of tnr's devices (gate64's TUN), shown apart as NAPI s; other kernel" \
    " forwarding and softirq work is attributed to neither; Mbit/s/CPU-s and its ratio are" \
    " medians of per-run Mbit/s over that run's CPU s.)"
print_sockbuf_table
exit_status
