#!/usr/bin/env bash
# GRE site-to-site throughput and CPU efficiency: gate64's GRE against Open
# vSwitch's userspace GRE (datapath_type=netdev, L3 GRE with key 42), in one run, each engine
# at both ends of the tunnel:
#
#   gresite  172.16.0.5 (iperf3 -c)      gregw                              grelan
#            GRE endpoint 203.0.113.2 ── GRE endpoint 203.0.113.1 ── 10.64.0.1 ── 10.64.0.5 (iperf3 -s)
#
#   gate64:  `gate64 serve` in gresite and gregw, [[gre.tunnel]] key 42; the site host is
#            172.16.0.5 on gresite's loopback, routed into gate64's tenant TUN.
#   ovs:     ovsdb-server + ovs-vswitchd in gresite and gregw (every file in the work dir),
#            the recipe of ../shared/docs/interop-ovs-gre.md: br-phy holds the underlay,
#            br-int an L3 GRE port plus the site port (gresite: internal port `site`; gregw:
#            the veth to grelan), flows decap()/mod_dl_dst between them.
#
# The underlay (outer) links have the MTU of each UNDERLAY_MTU in turn (1500, Ethernet's,
# then 9000, jumbo frames); the inner MTU is that minus 28 on both sides for both engines
# (1472 at 1500: 20 IPv4 + 4 GRE + 4 key; Open vSwitch does not fragment tunnel packets;
# gate64's routes carry that mtu). For each setup it runs iperf3
# TCP from the site host to grelan with FLOWS parallel flows, in both directions, and
# measures the whole machine's CPU seconds (/proc/stat: user + nice + system + irq + softirq
# + steal over every core) during each run, and the CPU seconds of the GRE processes (gate64
# or ovs-vswitchd) of both endpoints with the kernel NAPI threads of their devices. Reported:
# Mbit/s, machine CPU s, Mbit/s per machine CPU second, endpoint CPU s (and its NAPI part),
# Mbit/s per endpoint core; the median of the runs that succeeded, efficiencies taken per run.
#
# Socket buffers: gate64 forces 4 MiB on its raw GRE sockets (8 MiB after the kernel's
# doubling); Open vSwitch's userspace datapath reads and writes the veths through packet
# sockets. The host's socket buffer sysctls are set for the run so that a socket that sets
# nothing gets the same 8 MiB (bench/lib.sh match_sockbufs; restored on exit), and the table
# at the end shows every socket's buffers.
#
# usage: sudo bench/gre.sh            (from the repo root; builds gate64 in release mode)
# env:   RUNS=3          runs per cell, the median of those that succeed is reported; a
#                        failed run shows in the runs column and makes the exit status 1
#        DURATION=10     seconds per iperf3 run
#        FLOWS="1 8"     iperf3 -P values (one flow, many flows)
#        DIRS="up down"  up = site -> grelan, down = grelan -> site (iperf3 -R)
#        SETUPS="gate64 ovs"
#        GATE64_BIN=path use this binary and skip the build
#        GRE_WORKERS=0   gate64's `[server] workers` at both ends: its GRE threads and TUN
#                        queues (0 = one per core; binaries before the multi-queue GRE data
#                        path ran GRE on one thread whatever it said)
#        GRE_OUTER_PATH= gate64's `[gre] outer_path` at both ends: "packet" (whole frames on
#                        a packet socket) or "raw" (the raw IP socket, its default); unset:
#                        the binary's default
#        KEEP_LOGS=1     keep the temporary directory with configs, logs and iperf3 JSON
#        SOCKBUF=bytes   the socket buffer gate64 asks for on its GRE sockets (default: its
#                        4 MiB); host rmem_max/wmem_max = SOCKBUF, rmem_default/wmem_default
#                        = 2 x SOCKBUF for the run; 0: leave the host's values
#        IPERF3=iperf3   the iperf3 client of the runs (IPERF3=/bin/false: every run fails)
#        UNDERLAY_MTU="1500 9000"
#                        MTUs of the outer links and the gateway's LAN link, each measured
#                        in turn (9000: jumbo frames, as data-centre interconnects run them;
#                        the LAN host's link and the tunnels' inner MTU are 28 less)
#        GW_LAN_GRO=1    gate64 setup only: GRO on the gateway's LAN-side veth (l0), as a NIC
#                        has it, so the LAN host's segments reach gate64's TUN coalesced
#                        (off by default: both engines then see the same per-segment input)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

RUNS=${RUNS:-3}
DURATION=${DURATION:-10}
FLOWS=${FLOWS:-"1 8"}
DIRS=${DIRS:-"up down"}
SETUPS=${SETUPS:-"gate64 ovs"}
GRE_WORKERS=${GRE_WORKERS:-0}

SITE=g64-bgsite-$$-0
GW=g64-bggw-$$-0
LAN=g64-bglan-$$-0
NAMESPACES=("$SITE" "$GW" "$LAN")
UNDERLAY_MTUS=${UNDERLAY_MTU:-"1500 9000"}
for mtu in $UNDERLAY_MTUS; do
    case $mtu in
        *[!0-9]*) echo "UNDERLAY_MTU: '$mtu' is not a number of bytes" >&2; exit 2 ;;
    esac
    if [ "$mtu" -lt 1308 ] || [ "$mtu" -gt 65535 ]; then
        echo "UNDERLAY_MTU: $mtu is not in 1308..65535 (the inner MTU, 28 less, is at least 1280)" >&2
        exit 2
    fi
done
UNDERLAY_MTU=1500 INNER_MTU=1472  # set per pass below
GW_MAC=02:00:00:00:00:01

require_root
require_tools "apt-get install openvswitch-switch iperf3 iproute2" \
    ip ss iperf3 ovsdb-tool ovsdb-server ovs-vswitchd ovs-vsctl ovs-ofctl ovs-appctl awk

WORK=$(mktemp -d /tmp/gate64-bench-gre.XXXXXX)
install_cleanup
match_sockbufs "${SOCKBUF:-$GATE64_SOCKBUF_GRE}"

# ---------------------------------------------------------------- topology

base_topology() {
    teardown
    make_namespaces
    ip link add name u0 netns "$GW" type veth peer name wan0 netns "$SITE"
    ip link add name l0 netns "$GW" type veth peer name l1 netns "$LAN"
    for x in "$GW u0" "$GW l0" "$SITE wan0" "$LAN l1"; do
        set -- $x
        ip -n "$1" link set "$2" mtu "$UNDERLAY_MTU" up
    done
    ip -n "$LAN" link set l1 mtu "$INNER_MTU"
    # Open vSwitch's userspace datapath reads veths with AF_PACKET and forwards what it gets:
    # TCP super-packets and segments whose checksum a veth peer left to "hardware". The LAN
    # host segments and checksums in software, for both setups alike.
    offloads_off "$LAN" l1
    ip -n "$LAN" addr add 10.64.0.5/24 dev l1
    for ns in "$GW" "$SITE"; do
        ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 \
            net.ipv4.conf.default.rp_filter=0
    done
}

# offloads_off NS DEV: TX checksum, TSO and GSO off (ethtool -K DEV tx off tso off gso off,
# through the SIOCETHTOOL ioctl, so ethtool need not be installed).
offloads_off() {
    ip netns exec "$1" python3 - "$2" <<'PY'
import ctypes, fcntl, socket, struct, sys
SIOCETHTOOL = 0x8946
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for cmd in (0x17, 0x1f, 0x24):  # ETHTOOL_STXCSUM, ETHTOOL_STSO, ETHTOOL_SGSO
    value = ctypes.create_string_buffer(struct.pack("II", cmd, 0))
    ifr = struct.pack("16sP", sys.argv[1].encode(), ctypes.addressof(value))
    fcntl.ioctl(s, SIOCETHTOOL, ifr)
PY
}

# gro_on NS DEV: GRO on (ethtool -K DEV gro on, through SIOCETHTOOL; on a veth this turns on
# its NAPI receive path, which coalesces TCP segments as a NIC's GRO does).
gro_on() {
    ip netns exec "$1" python3 - "$2" <<'PY'
import ctypes, fcntl, socket, struct, sys
SIOCETHTOOL, ETHTOOL_SGRO = 0x8946, 0x2c
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
value = ctypes.create_string_buffer(struct.pack("II", ETHTOOL_SGRO, 1))
ifr = struct.pack("16sP", sys.argv[1].encode(), ctypes.addressof(value))
fcntl.ioctl(s, SIOCETHTOOL, ifr)
PY
}

# ---------------------------------------------------------------- gate64

gate64_conf() { # gate64_conf LOCAL REMOTE ROUTE
    cat <<EOF
[server]
workers = $GRE_WORKERS
[corpnet]
tun = "$GATE64_TUN"
[metrics]
enabled = false
${GRE_OUTER_PATH:+[gre]
outer_path = \"$GRE_OUTER_PATH\"}
[[gre.tunnel]]
name = "bench"
local = "$1"
remote = "$2"
key = 42
mtu = $INNER_MTU
routes = ["$3"]
EOF
}

setup_gate64() {
    base_topology
    ip -n "$GW" addr add 203.0.113.1/24 dev u0
    ip -n "$SITE" addr add 203.0.113.2/24 dev wan0
    ip -n "$GW" addr add 10.64.0.1/24 dev l0
    [ -n "${GW_LAN_GRO:-}" ] && gro_on "$GW" l0
    ip -n "$LAN" route add default via 10.64.0.1
    ip -n "$SITE" addr add 172.16.0.5/32 dev lo
    gate64_conf 203.0.113.1 203.0.113.2 172.16.0.0/24 >"$WORK/gw.toml"
    gate64_conf 203.0.113.2 203.0.113.1 10.64.0.0/24 >"$WORK/site.toml"
    start_bg "$GW" gate64-gw "$GATE64_BIN" serve --config "$WORK/gw.toml"
    start_bg "$SITE" gate64-site "$GATE64_BIN" serve --config "$WORK/site.toml"
    wait_for 15 ip -n "$GW" route get 172.16.0.5 oif gre-default ||
        { log "gate64 did not come up in $GW: $(tail -5 "$WORK/gate64-gw.log")"; return 1; }
    wait_for 15 ip -n "$SITE" route get 10.64.0.5 oif gre-default ||
        { log "gate64 did not come up in $SITE: $(tail -5 "$WORK/gate64-site.log")"; return 1; }
    ENGINE_COMM=gate64
}

# ---------------------------------------------------------------- Open vSwitch

ovs() { # ovs NS TOOL ARGS...: an Open vSwitch command with NS's files under $WORK/ovs-NS
    local ns=$1 tool=$2 d="$WORK/ovs-$1"
    shift 2
    ip netns exec "$ns" env OVS_RUNDIR="$d" OVS_LOGDIR="$d" OVS_DBDIR="$d" OVS_SYSCONFDIR="$d" \
        "$tool" "$@"
}
vsctl() { local ns=$1; shift; ovs "$ns" ovs-vsctl --db="unix:$WORK/ovs-$ns/db.sock" --timeout=20 "$@"; }
ofctl() { local ns=$1; shift; ovs "$ns" ovs-ofctl -O OpenFlow15 "$@"; }

ovs_start() { # ovs_start NS
    local ns=$1 d="$WORK/ovs-$1"
    rm -rf "$d"  # an earlier pass's database (its daemons went with teardown)
    mkdir -p "$d"
    ovs "$ns" ovsdb-tool create "$d/conf.db" /usr/share/openvswitch/vswitch.ovsschema
    ovs "$ns" ovsdb-server "$d/conf.db" --remote="punix:$d/db.sock" --pidfile="$d/ovsdb.pid" \
        --detach --log-file="$d/ovsdb.log" --unixctl="$d/ovsdb.ctl"
    vsctl "$ns" --no-wait init
    ovs "$ns" ovs-vswitchd "unix:$d/db.sock" --pidfile="$d/vsd.pid" --detach \
        --log-file="$d/vsd.log" --unixctl="$d/vsd.ctl" 2>/dev/null
}

ovs_gre() { # ovs_gre NS UNDERLAY_PORT LOCAL/24 REMOTE SITE_PORT SITE_PORT_TYPE
    local ns=$1 under=$2 cidr=$3 remote=$4 port=$5 type=$6 mac
    vsctl "$ns" add-br br-phy -- set bridge br-phy datapath_type=netdev -- add-port br-phy "$under" \
        -- set interface br-phy "mtu_request=$UNDERLAY_MTU"
    ip -n "$ns" addr add "$cidr" dev br-phy
    ip -n "$ns" link set br-phy up
    local port_opts=()
    [ "$type" = internal ] && port_opts=(-- set interface "$port" type=internal "mtu_request=$INNER_MTU")
    vsctl "$ns" add-br br-int -- set bridge br-int datapath_type=netdev \
        protocols=OpenFlow10,OpenFlow13,OpenFlow15 \
        -- add-port br-int gre0 -- set interface gre0 type=gre "options:remote_ip=$remote" \
        options:key=42 options:packet_type=legacy_l3 \
        -- add-port br-int "$port" "${port_opts[@]}"
    ip -n "$ns" link set "$port" up
    ovs "$ns" ovs-appctl --target="$WORK/ovs-$ns/vsd.ctl" ovs/route/add "$remote/24" br-phy
    echo "$ns $port"
}

ovs_flows() { # ovs_flows NS PORT DST_MAC
    local ns=$1 port=$2 mac=$3
    ofctl "$ns" del-flows br-int
    ofctl "$ns" add-flow br-int "in_port=$port,ip,actions=decap(),output:gre0"
    ofctl "$ns" add-flow br-int "in_port=$port,arp,actions=LOCAL"
    ofctl "$ns" add-flow br-int \
        "in_port=gre0,ip,actions=mod_dl_dst:$mac,mod_dl_src:$GW_MAC,output:$port"
}

setup_ovs() {
    base_topology
    ovs_start "$SITE"
    ovs_start "$GW"
    ovs_gre "$SITE" wan0 203.0.113.2/24 203.0.113.1 site internal >/dev/null
    ip -n "$SITE" addr add 172.16.0.5/24 dev site
    ip -n "$SITE" neigh replace 172.16.0.1 lladdr "$GW_MAC" dev site
    ip -n "$SITE" route add 10.64.0.0/24 via 172.16.0.1 dev site
    ovs_flows "$SITE" site "$(ip netns exec "$SITE" cat /sys/class/net/site/address)"
    ovs_gre "$GW" u0 203.0.113.1/24 203.0.113.2 l0 veth >/dev/null
    ip -n "$LAN" neigh replace 10.64.0.1 lladdr "$GW_MAC" dev l1
    ip -n "$LAN" route add default via 10.64.0.1 dev l1 onlink
    ovs_flows "$GW" l0 "$(ip netns exec "$LAN" cat /sys/class/net/l1/address)"
    wait_for 20 ip netns exec "$SITE" ping -c 1 -W 1 -I 172.16.0.5 10.64.0.5 ||
        { log "Open vSwitch path does not carry a ping"; return 1; }
    ENGINE_COMM=ovs-vswitchd
}

# ---------------------------------------------------------------- measurement

# machine_ticks: non-idle clock ticks of every core (/proc/stat "cpu" line).
machine_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }

# engine_proc_ticks: CPU ticks of the GRE processes (gate64 or ovs-vswitchd) at both ends;
# engine_napi_ticks: the NAPI threads of their namespaces' devices, if any (lib.sh
# napi_ticks). The engine's CPU is their sum.
engine_proc_ticks() {
    local t=0 ns pid
    for ns in "$SITE" "$GW"; do
        for pid in $(ip netns pids "$ns"); do
            [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$ENGINE_COMM" ] || continue
            t=$((t + $(sed 's/^.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}')))
        done
    done
    echo "$t"
}
engine_napi_ticks() { napi_ticks "$SITE" "$GW"; }

RESULTS=()  # "underlay_mtu setup flows dir ok mbps machine_cpu eff engine_cpu napi per_end_core"
measure() {
    local setup=$1 flows dir run json m0 m1 e0 e1 n0 n1 t0 t1 rev ok cell
    for flows in $FLOWS; do
        for dir in $DIRS; do
            local mbps_runs="" mcpu_runs="" eff_runs="" ecpu_runs="" napi_runs="" core_runs=""
            cell="$setup MTU $UNDERLAY_MTU -P $flows $dir"
            ok=0
            for run in $(seq "$RUNS"); do
                json="$WORK/$setup-$UNDERLAY_MTU-P$flows-$dir-$run.json"
                rev=()
                [ "$dir" = down ] && rev=(-R)
                m0=$(machine_ticks); e0=$(engine_proc_ticks); n0=$(engine_napi_ticks); t0=$(date +%s.%N)
                if ! ip netns exec "$SITE" timeout $((DURATION + 30)) "$IPERF3" -c 10.64.0.5 \
                    -B 172.16.0.5 -t "$DURATION" -P "$flows" "${rev[@]}" --json \
                    --connect-timeout 5000 >"$json" 2>&1; then
                    log "$cell: iperf3 failed: $(tail -3 "$json")"
                    run_failed "$cell run $run: iperf3 failed"
                    continue
                fi
                m1=$(machine_ticks); e1=$(engine_proc_ticks); n1=$(engine_napi_ticks); t1=$(date +%s.%N)
                local mbps mcpu ecpu napi core
                mbps=$(received_mbps "$json")
                mcpu=$(secs $((m1 - m0)))
                ecpu=$(secs $((e1 - e0 + n1 - n0)))
                napi=$(secs $((n1 - n0)))
                # Mbit/s per core of one tunnel end: the two ends together used ecpu / wall
                # cores on average (NAPI threads included), one end half of that.
                core=$(awk -v m="$mbps" -v e="$ecpu" -v a="$t0" -v b="$t1" \
                    'BEGIN {if (e > 0) printf "%.1f", m * (b - a) * 2 / e; else print "inf"}')
                ok=$((ok + 1))
                log "  $cell run $run: $mbps Mbit/s, machine CPU $mcpu s, $ENGINE_COMM CPU $ecpu s (NAPI $napi s), $core Mbit/s per end-core"
                mbps_runs+="$mbps"$'\n'; mcpu_runs+="$mcpu"$'\n'; ecpu_runs+="$ecpu"$'\n'
                napi_runs+="$napi"$'\n'; core_runs+="$core"$'\n'
                # Per run (Mbit/s and machine CPU of the same run), then the median.
                eff_runs+="$(quotient "$mbps" "$mcpu")"$'\n'
            done
            RESULTS+=("$UNDERLAY_MTU $setup $flows $dir $ok $(median_of "$mbps_runs") $(median_of "$mcpu_runs") $(median_of "$eff_runs") $(median_of "$ecpu_runs") $(median_of "$napi_runs") $(median_of "$core_runs")")
        done
    done
}

for UNDERLAY_MTU in $UNDERLAY_MTUS; do
INNER_MTU=$((UNDERLAY_MTU - 28))
for setup in $SETUPS; do
    log "== $setup, underlay MTU $UNDERLAY_MTU"
    case $setup in
        gate64) build_gate64; up=setup_gate64 ;;
        ovs) up=setup_ovs ;;
        *) log "unknown setup $setup"; exit 1 ;;
    esac
    if ! $up; then
        run_failed "$setup MTU $UNDERLAY_MTU: setup failed, no run measured"
        teardown
        continue
    fi
    start_bg "$LAN" iperf3 iperf3 -s -B 10.64.0.5
    wait_for 5 tcp_listening "$LAN" 5201 || log "iperf3 -s in $LAN not listening"
    measure "$setup"
    # Effective socket buffers of both tunnel ends (gate64, or ovs-vswitchd and ovsdb-server).
    print_sockbufs "$setup/mtu$UNDERLAY_MTU" "$GW"
    print_sockbufs "$setup/mtu$UNDERLAY_MTU" "$SITE"
    if [ "$setup" = ovs ] && [ -n "${KEEP_LOGS:-}" ]; then
        for ns in "$SITE" "$GW"; do
            ovs "$ns" ovs-appctl --target="$WORK/ovs-$ns/vsd.ctl" dpctl/dump-flows \
                >"$WORK/flows-$ns.txt" 2>&1 || true
        done
    fi
    teardown
done
done

echo
echo "GRE, ${DURATION} s iperf3 TCP runs, median of the runs that succeeded; inner MTU = underlay MTU - 28;"
echo "CPU over the whole machine ($(nproc) cores)"
fmt='%5s %-7s %5s %5s %8s %10s %14s %12s %12s %8s %15s %8s\n'
printf "$fmt" MTU setup flows dir runs "Mbit/s" "machine CPU s" "Mbit/s/CPU-s" "engine CPU s" \
    "NAPI s" "Mbit/s/end-core" "/ ovs"
for r in "${RESULTS[@]}"; do
    read -r mtu setup flows dir ok mbps mcpu eff ecpu napi core <<<"$r"
    # gate64's Mbit/s over Open vSwitch's in the same cell, when both ran.
    x=""
    if [ "$setup" = gate64 ]; then
        for o in "${RESULTS[@]}"; do
            read -r omtu osetup oflows odir _ ombps _ <<<"$o"
            if [ "$osetup $omtu $oflows $odir" = "ovs $mtu $flows $dir" ]; then
                x=$(ratio "$mbps" "$ombps")
                [ "$x" = n/a ] || x+=x
            fi
        done
    fi
    printf "$fmt" "$mtu" "$setup" "$flows" "$dir" "$(runs_cell "$ok")" "$mbps" "$mcpu" \
        "$(fixed 1 "$eff")" "$ecpu" "$napi" "$core" "$x"
done
printf '%s\n' "(Mbit/s/CPU-s = Mbit/s divided by the CPU seconds of the whole machine during the run, as" \
    " in bench/teredo.sh; engine CPU s = user + system time of gate64 or ovs-vswitchd at both" \
    " tunnel ends, with the NAPI threads of their devices, shown apart as NAPI s; Mbit/s/end-core" \
    " = Mbit/s divided by the cores one tunnel end used on average (half the engine CPU seconds," \
    " NAPI included, over the run time), with the kernel work done in its threads: the peer's IP" \
    " input, the forwarding to the LAN; both efficiencies are medians of per-run figures;" \
    " / ovs = gate64's Mbit/s over Open vSwitch's in the same cell.)"
print_sockbuf_table
exit_status
