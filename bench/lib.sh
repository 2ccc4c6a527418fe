# Shared by the bench/*.sh scripts; source it from the repo root after `set -euo pipefail`:
#
#   . bench/lib.sh
#
# It only defines variables and functions. The scripts pick what they use: the namespace
# names, teardown/cleanup and the EXIT trap, the three-namespace lab of gate64-testkit's
# Topology, the release build of gate64, host socket buffers matched to gate64's
# (match_sockbufs) and the effective buffers of each process's sockets (print_sockbufs),
# CPU-seconds accounting from /proc, the iperf3 helpers and the record of failed runs
# (run_failed, exit_status).
#
# Failed runs: a run that fails (iperf3, dnsperf) is recorded with run_failed, left out of
# its cell's median, and the cell's runs column shows how many runs succeeded ("2/3 ok", or
# FAILED for none); exit_status, called last, lists the failures and exits 1 if there was one.
# IPERF3 names the iperf3 client the measured runs use (iperf3 servers always run `iperf3`),
# so a failure is easy to produce:
#
#   sudo IPERF3=/bin/false bench/teredo.sh     -> every cell FAILED, exit status 1

# Names follow gate64-testkit's g64-<tag>-<pid>-<n> scheme, so a test run also removes them
# if the script is killed with SIGKILL. A script without tcorp sets NAMESPACES itself.
CLI=g64-bcli-$$-0
SRV=g64-bsrv-$$-0
CORP=g64-bcorp-$$-0
NAMESPACES=("$CLI" "$SRV" "$CORP")
CLK_TCK=$(getconf CLK_TCK)

# gate64's corporate TUN in the benches: a name of this run's own, because napi_ticks finds
# a device's NAPI threads by name alone (napi/DEV-N), and a device of the same name in any
# other namespace on the machine would otherwise be counted, or vanish between two samples.
GATE64_TUN="g64b$$"
SERVER_IP=198.51.100.1
CORP_HOST=2001:db8:100:1::2
# kill_ns_procs waits this many tenths of a second after SIGTERM before SIGKILL.
TERM_WAIT_TICKS=30
# "key=value" of host sysctls changed by save_sysctl, restored by cleanup.
SAVED_SYSCTL=()
# The iperf3 client of the measured runs (see the top of this file).
IPERF3=${IPERF3:-iperf3}

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

# save_sysctl KEY...: remember the host's current values, for cleanup to restore. A key
# already saved keeps its first value (the host's), so a script may change it more than once.
save_sysctl() {
    local k kv
    for k in "$@"; do
        for kv in "${SAVED_SYSCTL[@]}"; do
            [ "${kv%%=*}" = "$k" ] && continue 2
        done
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

# rx_gro NS DEV...: the receive path of a NIC on the veths DEV of namespace NS, which veths
# lack by default: a NAPI thread of their own (napi/DEV-N, which napi_ticks counts) and GRO,
# with rx-udp-gro-forwarding so that UDP from a local sender's socket is eligible. The kernel
# then coalesces a flow's datagrams only for a socket that asked for it (UDP_GRO): gate64's
# Teredo sockets do, Miredo's do not, and theirs arrive one by one as without this.
rx_gro() {
    local ns=$1 dev
    shift
    require_tools "apt-get install ethtool" ethtool
    for dev in "$@"; do
        ip netns exec "$ns" ethtool -K "$dev" gro on rx-udp-gro-forwarding on >/dev/null
        ip netns exec "$ns" sh -c "echo 1 > /sys/class/net/$dev/threaded"
    done
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

# ---------------------------------------------------------------- socket buffers

# What gate64 asks for on its sockets (bytes; the kernel doubles it, see match_sockbufs):
#   Teredo UDP sockets   SOCKET_BUFFER in crates/io/src/lib.rs, SO_RCVBUFFORCE + SO_SNDBUFFORCE
#   GRE raw sockets      SOCKET_BUFFER in crates/io/src/gre.rs, SO_RCVBUFFORCE + SO_SNDBUFFORCE
#   IKE UDP sockets      SOCKET_BUFFER in crates/io/src/ike.rs, SO_RCVBUFFORCE + SO_SNDBUFFORCE
#   DNS64 UDP listeners  udp_socket in crates/io/src/dns64/server.rs: plain SO_RCVBUF (capped
#                        at rmem_max), no send buffer (so wmem_default)
# IP-HTTPS's TCP connections and the TUN-only NAT64 path set no socket buffer. Keep these in
# step with the sources.
GATE64_SOCKBUF_TEREDO=$((4 << 20))
GATE64_SOCKBUF_GRE=$((4 << 20))
GATE64_SOCKBUF_IKE=$((8 << 20))
GATE64_SOCKBUF_DNS64=$((4 << 20))

# match_sockbufs SIZE: for the run (restored by cleanup), net.core.rmem_max and wmem_max =
# SIZE and net.core.rmem_default and wmem_default = 2 x SIZE, where SIZE is what gate64 asks
# for on the sockets the comparison exercises (GATE64_SOCKBUF_*); SIZE 0 leaves the host's
# values. Why these values (socket(7); the kernel's sock_init_data and sock_setsockopt):
#   - setsockopt SO_RCVBUF/SO_SNDBUF stores twice the value asked for (bookkeeping overhead),
#     after capping it at rmem_max/wmem_max; the FORCE variants skip the cap. gate64's
#     sockets therefore hold 2 x SIZE.
#   - A socket that sets nothing starts with rmem_default/wmem_default as they are, not
#     doubled (getsockopt on a fresh UDP socket returns rmem_default). *_default = 2 x SIZE
#     gives a peer that sets nothing (Miredo, charon, Unbound, Open vSwitch's packet
#     sockets) the same 2 x SIZE as gate64.
#   - *_max = SIZE: a peer that asks for SIZE or more with plain SO_RCVBUF/SO_SNDBUF gets
#     2 x SIZE too, never more than gate64; gate64's DNS64, which asks for SIZE without
#     FORCE, gets its 2 x SIZE. (The kernel does not require *_default <= *_max.)
# These sysctls are not per network namespace: the lab's namespaces see the host's values.
# TCP sockets that set no size take net.ipv4.tcp_rmem/tcp_wmem and autotuning instead; this
# does not change them. print_sockbufs shows what each socket got.
match_sockbufs() {
    local size=$1
    [ "$size" != 0 ] || return 0
    case $size in
    "" | *[!0-9]*) echo "socket buffer size '$size' is not a number of bytes" >&2; exit 2 ;;
    esac
    save_sysctl net.core.rmem_default net.core.wmem_default net.core.rmem_max net.core.wmem_max
    sysctl -qw net.core.rmem_max="$size" net.core.wmem_max="$size" \
        net.core.rmem_default=$((2 * size)) net.core.wmem_default=$((2 * size))
    log "== host socket buffers: rmem_max = wmem_max = $size," \
        "rmem_default = wmem_default = $((2 * size))"
}

# print_sockbufs snapshots, for print_sockbuf_table: "LABEL NS COMM PID NETID SOCKET RB TB D"
# per socket, and "LABEL rmem_default wmem_default rmem_max wmem_max" per call.
SOCKBUF_LINES=()
SOCKBUF_HOST=()

# sock_meminfo PID FD: "rcvbuf sndbuf drops" of socket FD of process PID, read through a
# duplicate of the descriptor (pidfd_getfd, Linux 5.6) with SO_MEMINFO: the figures ss -m
# shows as rb, tb and d. For sockets ss prints no skmem for (raw sockets when the kernel's
# raw_diag is not loaded). Needs python3 3.9; prints nothing when that or a call fails.
sock_meminfo() {
    command -v python3 >/dev/null 2>&1 || return 0
    python3 - "$1" "$2" 2>/dev/null <<'PY' || true
import ctypes, os, socket, struct, sys
SYS_PIDFD_GETFD = 438  # the same number on x86_64 and arm64
SO_MEMINFO = 55
libc = ctypes.CDLL(None, use_errno=True)
pidfd = os.pidfd_open(int(sys.argv[1]))
fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, int(sys.argv[2]), 0)
if fd >= 0:
    s = socket.socket(fileno=fd)  # our duplicate; closing it leaves the process's socket open
    m = struct.unpack("9I", s.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, 36))
    print(m[1], m[3], m[8])  # SK_MEMINFO_RCVBUF, SK_MEMINFO_SNDBUF, SK_MEMINFO_DROPS
PY
}

# print_sockbufs LABEL NS [PID...]: the effective buffers of every UDP, TCP, raw and packet
# socket of the processes PID... in NS (every process in NS without PID), from ss -m in NS,
# under LABEL (one word, usually the setup):
# rb = receive buffer, tb = send buffer (bytes as the kernel holds them, after its doubling),
# d = packets the socket dropped since it was opened (a full receive buffer among others).
# Logged now and kept for print_sockbuf_table, which puts gate64's and its peer's sockets in
# one table. Call it with the setup up, after its runs, so d covers them.
print_sockbufs() {
    local label=$1 ns=$2 pids line comm pid fd netid sock rb tb d mi
    shift 2
    if [ $# -gt 0 ]; then pids=" $* "; else pids=" $(ip netns pids "$ns" | tr '\n' ' ') "; fi
    SOCKBUF_HOST+=("$label $(sysctl -n net.core.rmem_default) $(sysctl -n net.core.wmem_default) $(sysctl -n net.core.rmem_max) $(sysctl -n net.core.wmem_max)")
    while read -r comm pid fd netid sock rb tb d; do
        if [ "$rb" = - ]; then
            mi=$(sock_meminfo "$pid" "$fd")
            [ -z "$mi" ] || read -r rb tb d <<<"$mi"
        fi
        line="$label $ns $comm $pid $netid $sock $rb $tb $d"
        SOCKBUF_LINES+=("$line")
        log "  socket buffers: $line"
    done < <(ip netns exec "$ns" ss -HOnamp -uatw0 2>/dev/null | awk -v pids="$pids" '
        {
            if (!match($0, /users:\(\(.*\)\)/)) next
            users = substr($0, RSTART, RLENGTH)
            # The first user of the socket that is one of PIDS: ("comm",pid=N,fd=M).
            found = 0
            while (match(users, /\("[^"]*",pid=[0-9]+,fd=[0-9]+\)/)) {
                u = substr(users, RSTART + 1, RLENGTH - 2)
                users = substr(users, RSTART + RLENGTH)
                n = split(u, f, ",")
                comm = f[1]; gsub(/"/, "", comm); gsub(/[^A-Za-z0-9_.:\/-]/, "_", comm)
                pid = substr(f[n - 1], 5); fd = substr(f[n], 4)
                if (index(pids, " " pid " ")) { found = 1; break }
            }
            if (!found) next
            sock = $5
            if ($2 == "ESTAB") sock = sock ">" $6
            rb = "-"; tb = "-"; d = "-"
            if (match($0, /skmem:\([^)]*\)/)) {
                n = split(substr($0, RSTART + 6, RLENGTH - 7), m, ",")
                for (i = 1; i <= n; i++) {
                    if (m[i] ~ /^rb[0-9]+$/) rb = substr(m[i], 3)
                    else if (m[i] ~ /^tb[0-9]+$/) tb = substr(m[i], 3)
                    else if (m[i] ~ /^d[0-9]+$/) d = substr(m[i], 2)
                }
            }
            print comm, pid, fd, $1, sock, rb, tb, d
        }')
}

# print_sockbuf_table: every print_sockbufs snapshot of the run, in one table.
print_sockbuf_table() {
    [ "${#SOCKBUF_HOST[@]}" -gt 0 ] || return 0
    local h line label r_def w_def r_max w_max l ns comm pid netid sock rb tb d
    printf '\nSocket buffers (ss -m after the runs; rb = receive, tb = send buffer in bytes as the\n'
    printf ' kernel holds them, after its doubling; d = packets the socket dropped; - = not shown)\n'
    for h in "${SOCKBUF_HOST[@]}"; do
        read -r label r_def w_def r_max w_max <<<"$h"
        printf '%s: host rmem_default %s, wmem_default %s, rmem_max %s, wmem_max %s\n' \
            "$label" "$r_def" "$w_def" "$r_max" "$w_max"
        printf '  %-34s %-6s %-42s %10s %10s %8s\n' "process[pid] netns" proto socket rb tb d
        for line in "${SOCKBUF_LINES[@]}"; do
            read -r l ns comm pid netid sock rb tb d <<<"$line"
            [ "$l" = "$label" ] || continue
            printf '  %-34s %-6s %-42s %10s %10s %8s\n' "$comm[$pid] $ns" "$netid" "$sock" \
                "$rb" "$tb" "$d"
        done
    done
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

# proc_ticks NS [EXCLUDE_COMM]: clock ticks (utime + stime, all threads) of every process in
# NS, except those whose comm is EXCLUDE_COMM. Kernel threads are in no namespace: see
# napi_ticks.
proc_ticks() {
    local ns=$1 skip=${2:-} pid total=0 t
    for pid in $(ip netns pids "$ns"); do
        if [ -n "$skip" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$skip" ]; then
            continue
        fi
        # Fields after "pid (comm) ": state is 1, utime 12, stime 13.
        t=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{print $12 + $13}') || t=0
        total=$((total + ${t:-0}))
    done
    echo "$total"
}

# ns_ticks NS [EXCLUDE_COMM]: proc_ticks NS [EXCLUDE_COMM] plus napi_ticks NS.
ns_ticks() { echo $(($(proc_ticks "$@") + $(napi_ticks "$1"))); }

# napi_ticks NS...: clock ticks of the kernel's NAPI threads (napi/DEV-N) of the devices of
# the namespaces NS..., each thread once. gate64's corporate TUN runs threaded NAPI: the
# forwarding that a plain TUN (Miredo's, TAYGA's) does inside the engine's own write runs
# there, so it is counted with the engine's CPU. (A thread's name carries only the device's
# name, and a device of the same name in another namespace would be counted too: the
# benches name gate64's TUN after their own process, GATE64_TUN.)
napi_ticks() {
    local ns total=0 t devs=" " comm dev
    for ns in "$@"; do
        devs+="$(ip netns exec "$ns" ls /sys/class/net 2>/dev/null | tr '\n' ' ')"
    done
    for comm in /proc/[0-9]*/comm; do
        { read -r dev <"$comm"; } 2>/dev/null || continue
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

# run_iperf3 LABEL TARGET FLOWS DIR JSON: one iperf3 TCP run ($IPERF3) of DURATION s from tcli
# to TARGET (DIR down: -R), JSON output to the file JSON; logs "LABEL: iperf3 failed" and
# returns 1 on failure (the caller records it with run_failed).
run_iperf3() {
    local label=$1 target=$2 flows=$3 dir=$4 json=$5
    local rev=()
    [ "$dir" = down ] && rev=(-R)
    if ! ip netns exec "$CLI" timeout $((DURATION + 30)) "$IPERF3" -c "$target" \
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

# median: the median of the numbers on stdin, one a line ("inf" sorts last); nan for none.
median() { sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]; else print "nan"}'; }

# median_of LIST: median of LIST, numbers one a line (as the scripts collect a cell's runs).
median_of() { printf '%s' "$1" | median; }

# ratio A B: A / B with two decimals, or n/a unless both are numbers and B is above 0 (a cell
# that failed has nan, an efficiency without CPU inf).
ratio() {
    case "$1 $2" in *[!0-9.\ ]* | " "* | *" ") echo n/a; return ;; esac
    awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}'
}

# quotient A B: A / B with six decimals; inf when B is not above 0. Efficiencies are taken per
# run with it (Mbit/s and CPU of the same run) before their median is quoted: the median
# Mbit/s and the median CPU may come from different runs.
quotient() { awk -v a="$1" -v b="$2" 'BEGIN {if (b + 0 > 0) printf "%.6f", a / b; else print "inf"}'; }

# fixed DECIMALS X: X rounded to DECIMALS places; inf, nan and n/a as they are.
fixed() {
    case $2 in
    inf | nan | n/a | "") echo "${2:-nan}" ;;
    *) awk -v d="$1" -v x="$2" 'BEGIN {printf "%.*f", d, x}' ;;
    esac
}

# ---------------------------------------------------------------- failed runs

# "SCRIPT: WHAT" of every failure run_failed recorded, for exit_status.
FAILURES=()

# run_failed WHAT: record one failed run (WHAT names setup, cell and run number) or setup
# (WHAT says so). The caller leaves the run out of its cell and counts the cell's successes
# for runs_cell.
run_failed() {
    FAILURES+=("${0##*/}: $*")
    log "FAILED: $*"
}

# runs_cell OK: the runs column of a cell of RUNS runs of which OK succeeded: "3/3 ok",
# "2/3 ok", or FAILED when none did (the cell's figures are then nan).
runs_cell() { if [ "$1" -gt 0 ]; then echo "$1/$RUNS ok"; else echo FAILED; fi; }

# exit_status [CODE]: list the failures run_failed recorded, then exit with CODE if it is
# not 0, else 1 if anything failed, else 0. The scripts call it last, after their tables.
exit_status() {
    local code=${1:-0}
    if [ "${#FAILURES[@]}" -gt 0 ]; then
        printf '
%s failure(s), left out of the medians above:
' "${#FAILURES[@]}"
        printf '  %s\n' "${FAILURES[@]}"
        [ "$code" != 0 ] || code=1
    fi
    exit "$code"
}
