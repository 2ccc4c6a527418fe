#!/usr/bin/env bash
# IP-HTTPS throughput and CPU efficiency: gate64 (`serve` with [iphttps] + `connect iphttps`),
# without and with IPsec, vs a plain TLS tunnel (stunnel4 client + server) and vs OpenVPN in
# TCP mode, carrying the same iperf3 flows, on the standard namespace lab of gate64-testkit's
# Topology (docs: teredo-iphttps.md §3):
#
#   tcli  198.51.100.10 ── tsrv  198.51.100.1 (gate64 serve :443 | stunnel server :443
#                                              | openvpn server :1194)
#                          tsrv  2001:db8:100:1::1 ── tcorp ::2 (iperf3 -s)
#
#   gate64:  iperf3 -c tcorp in tcli -> TUN gate64c -> `gate64 connect iphttps` -> TLS/TCP
#            -> `gate64 serve` -> TUN gate64 -> kernel forwarding -> tcorp
#   stunnel: iperf3 -c 127.0.0.1 in tcli -> stunnel client -> TLS/TCP -> stunnel server
#            -> TCP -> tcorp:5201
#   openvpn: iperf3 -c tcorp in tcli -> TUN ovpnc -> openvpn client -> TLS-keyed AES-256-GCM
#            packets over TCP -> openvpn server -> TUN ovpns -> kernel forwarding -> tcorp
#
# The setups (SETUPS, in this order by default):
#   gate64       `connect iphttps --no-ipsec`, gate64 with `[ipsec] require = false`: the
#                packets cross TLS in the clear
#   gate64-esp   `connect iphttps` with IPsec (its two tunnels; the iperf3 flows ride the
#                infrastructure one, narrowed to tcorp's /128): ESP AES-256-GCM inside TLS
#   gate64-gmac  the same with `[ipsec] iphttps_integrity_only = true`: the client offers
#                AES-256-GMAC first and gate64 takes it, ESP integrity only inside TLS
#   stunnel      the byte-stream relay
#   openvpn      Debian's OpenVPN 2.6, point to point in TLS mode over one TCP connection
#                (--proto tcp-server / tcp-client), --cipher AES-256-GCM, a TUN at each end
#                with MTU 1280 like IP-HTTPS's, the certificates of `gate64 certs`
#                (server.pem, client.pem), single-threaded as OpenVPN is
#
# Every setup uses the lab certificates of `gate64 certs` (ECDSA P-256); TLS version and
# cipher are whatever each pair negotiates (TLS 1.3 + AES-256-GCM with Debian's OpenSSL and
# rustls; stunnel's and OpenVPN's log lines are shown, and gate64's child SA ciphers from
# `gate64 status --json`). For each setup it runs iperf3 TCP with 1 and 4 flows and measures
# the CPU seconds (utime + stime of all threads, /proc/<pid>/stat) during each run of
#   - the server side: every process in tsrv (only gate64 serve, stunnel or openvpn), with
#     the kernel NAPI threads of tsrv's devices (gate64's TUN);
#   - the client side: the tunnel client in tcli (gate64 connect, stunnel or openvpn; iperf3
#     excluded), with the NAPI threads of tcli's devices;
#   - the whole machine: busy time of all CPUs from /proc/stat (user, nice, system, irq,
#     softirq, steal), which includes iperf3, kernel forwarding and whatever else the host
#     runs meanwhile. The load average before and after each setup is printed beside it.
# Everything shares the same cores, so the client side competes with the server for CPU.
#
# Socket buffers: the tunnels are TCP connections, and none of gate64, stunnel or OpenVPN
# (2.6 sets none unless --sndbuf/--rcvbuf are given) sets a buffer on them, so all get the
# kernel's TCP autotuning (net.ipv4.tcp_rmem/tcp_wmem; the net.core.*mem_* sysctls do not
# apply to it). The host's values are left as they are; the table at the end shows every
# socket of every setup.
#
# Aims: every gate64 setup >= 1.00 x stunnel's Mbit/s; every gate64 setup >= 10 x OpenVPN's
# Mbit/s per server CPU-second.
#
# usage: sudo bench/iphttps.sh           (from the repo root; builds gate64 in release mode)
# env:   RUNS=3        runs per cell, the median of those that succeed is reported; a failed
#                      run shows in the runs column and makes the exit status 1
#        DURATION=10   seconds per iperf3 run
#        FLOWS="1 4"   iperf3 -P values
#        DIRS="up down"  up = client -> tcorp, down = tcorp -> client (iperf3 -R)
#        SETUPS="gate64 gate64-esp gate64-gmac stunnel openvpn"
#        SEND_QUEUE_BYTES=n  gate64's iphttps.send_queue_bytes (default: gate64's default)
#        TUN_NAPI=true gate64's corpnet.tun_napi (default: gate64's default, false)
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
SETUPS=${SETUPS:-"gate64 gate64-esp gate64-gmac stunnel openvpn"}

require_root
require_tools "apt-get install iperf3 iproute2 iputils-ping" ip ss iperf3 ping awk
STUNNEL=""
if [[ " $SETUPS " == *" stunnel "* ]]; then
    STUNNEL=$(command -v stunnel4 || command -v stunnel || true)
    [ -n "$STUNNEL" ] || {
        echo "missing stunnel (apt-get install stunnel4), or leave stunnel out of SETUPS" >&2
        exit 1
    }
fi
OPENVPN=""
if [[ " $SETUPS " == *" openvpn "* ]]; then
    OPENVPN=$(command -v openvpn || true)
    [ -n "$OPENVPN" ] || {
        echo "missing openvpn (apt-get install openvpn), or leave openvpn out of SETUPS" >&2
        exit 1
    }
fi

WORK=$(mktemp -d /tmp/gate64-bench-iphttps.XXXXXX)
CORP_PREFIX=2001:db8:100::/48
IPHTTPS_PREFIX=2001:db8:1::/48
TLS_PORT=443
# gate64's IKE endpoint with IPsec (its corpnet.address6, on its TUN) and the pool of inner
# addresses it hands out; tcorp's default route via tsrv brings the pool back.
IKE_ENDPOINT=2001:db8:100::1
POOL6=fd00:c1::100/120
OPENVPN_PORT=1194

install_cleanup

# ---------------------------------------------------------------- topology

client_ready() {
    ip -n "$CLI" -6 addr show dev gate64c 2>/dev/null | grep 'inet6 2001:db8:1:' | grep -vq tentative &&
        ip -n "$CLI" -6 route show "$CORP_PREFIX" | grep -q 'dev gate64c'
}

corp_reachable() { ip netns exec "$CLI" ping -6 -n -c 1 -W 1 "$CORP_HOST"; }

make_certs() {
    [ -f "$WORK/certs/server.pem" ] && return 0
    # The IKE endpoint's address goes into ipsec.pem, the identity the IPsec client asks for.
    "$GATE64_BIN" certs --out "$WORK/certs" --server-ip "$SERVER_IP" \
        --server-ip "$IKE_ENDPOINT" --server-name gate64.lab.example >/dev/null
}

# start_gate64 MODE: MODE none (--no-ipsec), esp (IPsec, AES-256-GCM child SAs) or gmac
# (IPsec with [ipsec] iphttps_integrity_only: AES-256-GMAC child SAs).
start_gate64() {
    local mode=$1 ipsec client_ipsec=()
    case $mode in
    none)
        ipsec="require = false"
        client_ipsec=(--no-ipsec --route "$CORP_PREFIX")
        ;;
    esp | gmac)
        ipsec="certificate = \"$WORK/certs/ipsec.pem\"
private_key = \"$WORK/certs/ipsec.key\"
ca = \"$WORK/certs/clients-ca.pem\"
pool6 = \"$POOL6\"
endpoint = \"$IKE_ENDPOINT\"
infrastructure_prefixes = [\"$CORP_HOST/128\"]
intranet_prefixes = [\"$CORP_PREFIX\"]
iphttps_integrity_only = $([ "$mode" = gmac ] && echo true || echo false)"
        client_ipsec=(--ipsec-endpoint "$IKE_ENDPOINT" --ipsec-cert "$WORK/certs/ipsec-client.pem"
            --ipsec-key "$WORK/certs/ipsec-client.key" --ipsec-ca "$WORK/certs/ca.pem"
            --infrastructure-ts "$CORP_HOST/128" --intranet-ts "$CORP_PREFIX")
        ;;
    *) log "unknown gate64 mode $mode"; return 1 ;;
    esac
    cat >"$WORK/gate64.toml" <<EOF
[server]
workers = 2
[teredo]
server_addresses = ["192.0.2.1", "192.0.2.2"]
port = 3544
relay = true
[corpnet]
tun = "$GATE64_TUN"
ipv6_prefixes = ["$CORP_PREFIX"]
address6 = "2001:db8:100::1"
${TUN_NAPI:+tun_napi = $TUN_NAPI}
[ipsec]
$ipsec
[iphttps]
enabled = true
listen = "$SERVER_IP:$TLS_PORT"
certificate = "$WORK/certs/server.pem"
private_key = "$WORK/certs/server.key"
prefix = "$IPHTTPS_PREFIX"
${SEND_QUEUE_BYTES:+send_queue_bytes = $SEND_QUEUE_BYTES}
[control]
socket = "$WORK/control.sock"
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
    start_bg "$CLI" gate64-connect "$GATE64_BIN" connect iphttps \
        --server "https://$SERVER_IP/IPHTTPS" --ca "$WORK/certs/ca.pem" "${client_ipsec[@]}"
    wait_for 15 client_ready || { log "gate64 connect: no link within 15 s"; return 1; }
    if [ "$mode" != none ]; then
        # Both IKE SAs and their child SAs first: the corporate routes come with them.
        wait_for 60 corp_reachable || { log "gate64 connect: no IPsec tunnel within 60 s"; return 1; }
        # The child SAs' ciphers as gate64 reports them (aes256gcm16 / aes256gmac).
        NEGOTIATED_ESP=$(ip netns exec "$SRV" "$GATE64_BIN" status --json --socket "$WORK/control.sock" |
            grep -o '"esp": *"[^"]*"' | sed 's/.*"\([^"]*\)"$/\1/' | sort | uniq -c |
            awk '{printf "%s%s x %s", (NR > 1 ? ", " : ""), $1, $2}' || true)
        log "  gate64 child SAs: $NEGOTIATED_ESP"
        NEGOTIATED+=("$SETUP child SAs: $NEGOTIATED_ESP")
    fi
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

# OpenVPN point to point in TLS mode over TCP (the notes in interop-accounting-revocation.md):
# server in tsrv with TUN ovpns (fd00:88::1), client in tcli with TUN ovpnc (fd00:88::2) and
# the corporate /48 routed into it. tcorp's default route via tsrv brings fd00:88::2 back.
start_openvpn() {
    local common=(--dev-type tun --cipher AES-256-GCM --data-ciphers AES-256-GCM
        --tun-mtu 1280 --ca "$WORK/certs/ca.pem" --verb 3)
    start_bg "$SRV" openvpn-srv "$OPENVPN" "${common[@]}" --dev ovpns --proto tcp-server \
        --tls-server --cert "$WORK/certs/server.pem" --key "$WORK/certs/server.key" --dh none \
        --local "$SERVER_IP" --port "$OPENVPN_PORT" \
        --ifconfig 10.8.0.1 10.8.0.2 --ifconfig-ipv6 fd00:88::1 fd00:88::2
    wait_for 10 tcp_listening "$SRV" "$OPENVPN_PORT" || {
        log "openvpn server did not listen; its log:"
        cat "$WORK/openvpn-srv.log" >&2
        return 1
    }
    start_bg "$CLI" openvpn-cli "$OPENVPN" "${common[@]}" --dev ovpnc --proto tcp-client \
        --tls-client --cert "$WORK/certs/client.pem" --key "$WORK/certs/client.key" \
        --remote "$SERVER_IP" "$OPENVPN_PORT" \
        --ifconfig 10.8.0.2 10.8.0.1 --ifconfig-ipv6 fd00:88::2 fd00:88::1 \
        --route-ipv6 "$CORP_PREFIX"
    wait_for 30 corp_reachable || {
        log "openvpn: no path to tcorp within 30 s; logs:"
        tail -n 30 "$WORK"/openvpn-*.log >&2
        return 1
    }
    local ctrl data
    ctrl=$(grep -m1 -o 'Control Channel: .*' "$WORK/openvpn-cli.log" || true)
    data=$(grep -m1 -o "Data Channel: .*" "$WORK/openvpn-cli.log" || true)
    log "  openvpn: $ctrl; $data"
    NEGOTIATED+=("openvpn: $ctrl; $data")
    IPERF_TARGET=$CORP_HOST
}

start_iperf_server() {
    start_bg "$CORP" iperf3-server iperf3 -s
    wait_for 5 tcp_listening "$CORP" 5201 || { log "iperf3 -s not listening"; return 1; }
}

# ---------------------------------------------------------------- measurement

client_ticks() { ns_ticks "$CLI" iperf3; }

# machine_ticks: busy clock ticks of all CPUs since boot (user nice system irq softirq
# steal of /proc/stat's cpu line; idle and iowait left out).
machine_ticks() { awk '$1 == "cpu" {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# "setup flows dir ok mbps server_cpu server_napi eff client_cpu machine_cpu" (medians of the
# ok runs)
RESULTS=()
# "setup: load average before -> after" of each setup.
LOADS=()

measure_setup() {
    local setup=$1 flows dir run json p0 p1 n0 n1 c0 c1 m0 m1 mbps scpu snapi ccpu mcpu ok
    for flows in $FLOWS; do
        for dir in $DIRS; do
            local mbps_runs="" scpu_runs="" snapi_runs="" eff_runs="" ccpu_runs="" mcpu_runs=""
            ok=0
            for run in $(seq "$RUNS"); do
                json="$WORK/$setup-P$flows-$dir-$run.json"
                p0=$(proc_ticks "$SRV")
                n0=$(napi_ticks "$SRV")
                c0=$(client_ticks)
                m0=$(machine_ticks)
                run_iperf3 "$setup P$flows $dir run $run" "$IPERF_TARGET" "$flows" "$dir" "$json" ||
                    { run_failed "$setup -P $flows $dir run $run: iperf3 failed"; continue; }
                m1=$(machine_ticks)
                p1=$(proc_ticks "$SRV")
                n1=$(napi_ticks "$SRV")
                c1=$(client_ticks)
                mbps=$(received_mbps "$json")
                scpu=$(secs $((p1 - p0 + n1 - n0)))
                snapi=$(secs $((n1 - n0)))
                ccpu=$(secs $((c1 - c0)))
                mcpu=$(secs $((m1 - m0)))
                ok=$((ok + 1))
                log "  $setup -P $flows $dir run $run: $mbps Mbit/s, server CPU $scpu s (NAPI $snapi s), client CPU $ccpu s, machine CPU $mcpu s"
                if [[ $setup == gate64* ]]; then
                    # Cumulative drop counters, so a loss-limited run shows why.
                    log "    drops so far: $(ip netns exec "$SRV" curl -s 127.0.0.1:9164/metrics |
                        awk '/^gate64_drops_total/ && $2 != 0 {sub(/gate64_drops_total/, ""); printf "%s ", $0}')"
                fi
                mbps_runs+="$mbps"$'\n'
                scpu_runs+="$scpu"$'\n'
                snapi_runs+="$snapi"$'\n'
                ccpu_runs+="$ccpu"$'\n'
                mcpu_runs+="$mcpu"$'\n'
                # Per run (Mbit/s and server CPU of the same run), then the median.
                eff_runs+="$(quotient "$mbps" "$scpu")"$'\n'
            done
            RESULTS+=("$setup $flows $dir $ok $(median_of "$mbps_runs") $(median_of "$scpu_runs") $(median_of "$snapi_runs") $(median_of "$eff_runs") $(median_of "$ccpu_runs") $(median_of "$mcpu_runs")")
        done
    done
}

run_setup() {
    local setup=$1 load0
    SETUP=$setup
    log "== $setup: setting up"
    teardown
    setup
    start_iperf_server || return 1
    case $setup in
    gate64) start_gate64 none || { tail -n 30 "$WORK"/gate64*.log >&2; return 1; } ;;
    gate64-esp) start_gate64 esp || { tail -n 30 "$WORK"/gate64*.log >&2; return 1; } ;;
    gate64-gmac) start_gate64 gmac || { tail -n 30 "$WORK"/gate64*.log >&2; return 1; } ;;
    stunnel) start_stunnel || return 1 ;;
    openvpn) start_openvpn || return 1 ;;
    *) log "unknown setup $setup"; return 1 ;;
    esac
    # One short exchange first: the path works (and neighbour entries exist).
    if [ "$setup" != stunnel ]; then
        ip netns exec "$CLI" ping -6 -n -c 3 -i 0.2 -W 3 "$CORP_HOST" >"$WORK/ping.log" 2>&1 || {
            log "ping through $setup failed: $(cat "$WORK/ping.log")"
            tail -n 30 "$WORK"/gate64*.log "$WORK"/openvpn*.log >&2 2>/dev/null
            return 1
        }
    fi
    load0=$(loadavg)
    measure_setup "$setup"
    LOADS+=("$setup: $load0 -> $(loadavg)")
    # Effective socket buffers of the server side (tsrv) and of the tunnel client (the only
    # process left in tcli once the runs are over).
    print_sockbufs "$setup" "$SRV"
    print_sockbufs "$setup" "$CLI"
    if [ "$setup" = stunnel ]; then
        # What the pair negotiated (stunnel logs it per connection at level info).
        local tls
        tls=$(grep -m1 -o 'TLSv1[.0-9]* ciphersuite: [A-Z0-9_-]*' "$WORK/stunnel-cli.log" || true)
        [ -n "$tls" ] && { log "  stunnel negotiated $tls"; NEGOTIATED+=("stunnel: $tls"); }
    fi
    teardown
}

# result SETUP FLOWS DIR: the RESULTS entry of that cell (empty when the setup did not run).
result() {
    local r s f d
    for r in "${RESULTS[@]}"; do
        read -r s f d _ <<<"$r"
        [ "$s $f $d" = "$1 $2 $3" ] && { echo "$r"; return 0; }
    done
}

# verdict RATIO AIM: met / not met, or n/a without a ratio.
verdict() {
    [ "$1" != n/a ] || { echo n/a; return 0; }
    awk -v r="$1" -v a="$2" 'BEGIN {print (r >= a ? "met" : "NOT MET")}'
}

# ---------------------------------------------------------------- main

build_gate64
make_certs # gate64 certs also serves the stunnel and OpenVPN setups

NEGOTIATED=()
LOAD_START=$(loadavg)
for setup in $SETUPS; do
    run_setup "$setup" || run_failed "$setup: setup failed, no run measured"
done

printf '\nIP-HTTPS vs stunnel and OpenVPN (TCP), iperf3 TCP tcli -> tcorp (up) / tcorp -> tcli (down), %s s per run, median of the runs that succeeded\n' \
    "$DURATION"
printf 'load average (1, 5, 15 min) at the start: %s; per setup, before -> after its runs:\n' "$LOAD_START"
printf '  %s\n' "${LOADS[@]}"
[ "${#NEGOTIATED[@]}" -gt 0 ] && printf '%s\n' "${NEGOTIATED[@]}"
fmt='%-12s %5s %5s %8s %10s %12s %8s %14s %12s %13s\n'
printf "$fmt" setup flows dir runs "Mbit/s" "server CPU s" "NAPI s" "Mbit/s/CPU-s" "client CPU s" "machine CPU s"
for r in "${RESULTS[@]}"; do
    read -r setup flows dir ok mbps scpu snapi eff ccpu mcpu <<<"$r"
    printf "$fmt" "$setup" "$flows" "$dir" "$(runs_cell "$ok")" "$mbps" "$scpu" "$snapi" \
        "$(fixed 1 "$eff")" "$ccpu" "$mcpu"
done

printf '\n%-12s %5s %5s %15s %9s %21s %21s %9s\n' setup flows dir "x stunnel Mbit/s" "aim 1.00" \
    "x stunnel Mbit/s/CPU" "x openvpn Mbit/s/CPU" "aim 10"
for setup in $SETUPS; do
    [[ $setup == gate64* ]] || continue
    for flows in $FLOWS; do
        for dir in $DIRS; do
            read -r _ _ _ _ gm _ _ ge _ <<<"$(result "$setup" "$flows" "$dir")"
            read -r _ _ _ _ sm _ _ se _ <<<"$(result stunnel "$flows" "$dir")"
            read -r _ _ _ _ _ _ _ oe _ <<<"$(result openvpn "$flows" "$dir")"
            tput=$(ratio "$gm" "$sm")
            vs_ovpn=$(ratio "$ge" "$oe")
            printf '%-12s %5s %5s %15s %9s %21s %21s %9s\n' "$setup" "$flows" "$dir" "$tput" \
                "$(verdict "$tput" 1.0)" "$(ratio "$ge" "$se")" "$vs_ovpn" "$(verdict "$vs_ovpn" 10)"
        done
    done
done
printf '%s\n' "(server CPU s = user + system time of every process in tsrv during the run (gate64 serve," \
    " the stunnel server or the OpenVPN server) with the kernel NAPI threads of tsrv's devices" \
    " (gate64's TUN), shown apart as NAPI s; client CPU s = the tunnel client in tcli, iperf3" \
    " excluded, with the NAPI threads of tcli's devices; machine CPU s = busy time of all CPUs," \
    " everything on the host included. Mbit/s/CPU-s and its ratios are medians of per-run" \
    " Mbit/s over that run's server CPU s.)"
print_sockbuf_table
exit_status
