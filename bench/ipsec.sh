#!/usr/bin/env bash
# ESP over Teredo: iperf3 TCP through the DirectAccess-style intranet tunnel of a strongSwan
# client, against (a) strongSwan as the responder and (b) gate64 as the responder, on the
# standard namespace lab of gate64-testkit's Topology (docs: interop-strongswan.md,
# teredo-iphttps.md §3):
#
#   tcli  198.51.100.10: miredo client (teredo) + charon initiator (kernel-libipsec, ipsec0)
#     └─ tsrv  192.0.2.1, 192.0.2.2, 198.51.100.1
#         (a) miredo-server + miredo cone relay      (b) gate64 serve (Teredo + IKE + ESP)
#         └─ tcorp 2001:db8:100:1::2: (a) charon responder; iperf3 -s on fd00:c0::1
#
# Both setups use the same client: Debian's miredo plus charon with two connections
# (infrastructure fd00:c0::53/128, intranet fd00:c0::/64, certificates from strongSwan's pki,
# IKE aes256gcm16-prfsha256-ecp256 (IKE_GROUP), ESP $ESP (aes256gcm16 unless set) in UDP 4500). iperf3 runs from tcli to
# fd00:c0::1 (inside the intranet tunnel) with the inner TCP MSS clamped to 1130, so the ESP
# packets of full-sized segments fit the Teredo MTU of 1280 unfragmented (interop-strongswan.md
# pitfall 5; ipsec0's MTU cannot go below IPv6's 1280 minimum, so the clamp is iperf3's -M,
# which also sets the server side's socket).
#
# CLIENT=gate64 puts a cheaper client in tcli for both setups instead: gate64's own client,
# `gate64 connect teredo` (Teredo, IKEv2 and ESP in one user-space process, TUN gate64t),
# qualifying with the setup's Teredo server (miredo-server in (a), gate64 serve in (b)), with
# the same certificates and both tunnels, asking for the same selectors
# (--infrastructure-ts, --intranet-ts). Its proposals are fixed: IKE AES-GCM-16-256 with
# PRF-HMAC-SHA2-256 and ECP-256 (x25519 offered too), ESP AES-GCM-16-256, so it takes the
# default ESP and IKE_GROUP only. It asks for the responder's address in IDr, so (a)'s charon
# responder gets that as its local id. In (a) Miredo's server forwards nothing but echo
# requests: the client sends its packets for the responder to the Miredo relay that answered
# its direct IPv6 connectivity test (RFC 4380 §5.2.9), as Debian's miredo does. The client
# costs less CPU than miredo + charon, so more of the whole machine's CPU goes to the
# responders and the whole-machine ratio says more about them. iperf3 then runs over
# gate64t; the client's UDP socket sets no buffer sizes, so it holds the host's defaults
# like miredo's (the socket buffers rules below are unchanged).
#
# The same client without Teredo (SETUPS native-gate64 native-strongswan, section (d)): charon
# in a LAN namespace behind tcli's nftables masquerade, dialing the responder's public IPv4
# address straight, ESP in UDP 4500 (NAT-T), against gate64's `[ipsec] listen` or a charon
# responder on that address, with the same certificates, proposals and socket buffers; the
# CPU accounting and summary are those below, with their own gate64/strongSwan ratios.
#
# CPU: whole-machine busy time from /proc/stat (user + nice + system + irq + softirq) during
# each run, so kernel work (TUN, UDP, forwarding, softirq) counts for both setups alike. The
# machine may run other work too: the idle baseline printed before each setup shows how much.
# Reported per direction, over the runs that succeeded (a failed run is left out, shown in the
# runs column, and makes the exit status 1): the median Mbit/s and whole-machine CPU-seconds,
# and the median of the runs' efficiencies, megabits moved per whole-machine CPU-second
# (Mbit/s per busy core, so it does not depend on DURATION), each taken within one run.
#
# Socket buffers: gate64 forces 4 MiB on its Teredo sockets, which carry the ESP of these runs
# (gate64 opens ESP from Teredo clients in its dataplane), and 8 MiB on its IKE sockets; the
# kernel doubles both. Miredo and charon set none. For the ESP setups the host's sysctls give
# every socket that sets nothing the Teredo sockets' 8 MiB, so Miredo's relay and charon's
# UDP 4500 socket (which carries strongSwan's ESP) hold what gate64's Teredo sockets hold; for
# the ike-* setups the IKE sockets' 16 MiB (bench/lib.sh match_sockbufs; restored on exit).
# The table at the end shows every socket's buffers.
#
# Logging: both responders log little, so neither pays for its own log lines: gate64 at
# `warn`, charon's file loggers at level 0, strongSwan's audit level (the SAs established),
# without flush_line (which writes out every line as it is logged). Level 0 rather than -1 (silent)
# keeps a record in charon.log of which SAs came up when a run fails; charon's error messages
# are at level 1, so debug a failed run with CHARON_LOGLEVEL=1 GATE64_LOG_LEVEL=info (info is
# where gate64 logs each SA and each failed negotiation). The initiator's swanctl --initiate
# output (initiate-*.log) has its level-1 messages either way.
#
# usage: sudo bench/ipsec.sh            (from the repo root)
# env:   CLIENT=charon  the client of the strongswan and gate64 setups: charon (miredo + charon
#                      with kernel-libipsec) or gate64 (`gate64 connect teredo`, see above;
#                      needs the default ESP and IKE_GROUP). The native-*, ike-* and eap
#                      setups keep their own clients
#        RUNS=5        runs per cell, the median of those that succeed is reported
#        DURATION=10   seconds per iperf3 run
#        DIRS="up down"  up = client -> tcorp, down = tcorp -> client (iperf3 -R)
#        ESP=aes256gcm16  the client's (and strongSwan responder's) esp_proposals, e.g.
#                      aes256-sha256 (AES-CBC + HMAC-SHA2-256-128, what macOS proposes)
#        MSS=1130      inner TCP MSS (iperf3 -M); 0 leaves it to the path. 1110 by default
#                      when ESP is not AES-GCM: AES-CBC's 16-byte IV and 16-byte padding
#                      make its ESP packets up to 20 bytes longer, and 1130 would no longer fit
#                      the Teredo MTU. The native-* setups leave it to the path unless MSS is
#                      set (see (d))
#        SETUPS="strongswan gate64"  add ike-gate64 ike-strongswan for IKE handshakes/s and
#                      SAs held (section (c) below), native-gate64 native-strongswan for ESP
#                      from a client behind a NAT straight to the responder's IPv4 address
#                      (section (d) below), eap for EAP-MSCHAPv2 set-ups per second
#                      through FreeRADIUS, gate64 and a charon responder with eap-radius
#                      taking turns (section (e) below)
#        EAP_CLIENTS=400  set-ups per eap run (users user0001.., one connection each)
#        EAP_SOURCES=8    client namespaces (one charon and source address each)
#        EAP_WINDOW=2     set-ups in flight per client namespace
#        EAP_RADIUS_SOCKETS=N  charon eap-radius's sockets (default EAP_SOURCES x EAP_WINDOW)
#        IKE_CLIENTS=500  emulated clients (2 IKE SAs each) per ike-* setup
#        IKE_WINDOW=16    handshakes in flight;  IKE_SOURCES=32  client source addresses,
#                      each in a /48 of its own (at most 32767)
#        IKE_SOCKETS=1    UDP sockets (ports) per source address, one handshake in flight
#                      each. gate64 verifies at most 2 IKE_AUTH per source (/64) and 4 per
#                      host (/48) at once and drops the rest as lost, which costs ike-load a
#                      2 s retransmission wait each; with every source in its own /48 and
#                      IKE_SOCKETS of 1 or 2 neither cap is reached, and the run measures the
#                      responder. IKE_SOCKETS above 2 measures the per-source cap (warned)
#        IKE_GROUP=ecp256  the IKE key exchange of every setup: ecp256 (ECP-256, group 19)
#                      or modp2048 (MODP-2048, group 14). Both responders are held to it
#                      (charon's proposals, gate64's ike_proposals with modp2048) and
#                      ike-load's first KE payload is of it (--group), so no handshake
#                      drifts to the other group
#        IKE_CERT=ecdsa  the responders' certificate key: ecdsa (P-256) or rsa (RSA-2048);
#                      both sign their IKE_AUTH with it. The CA and the clients' keys stay
#                      ECDSA P-256
#        IKE_LOAD_BIN=path  gate64-testkit's ike-load (default: next to GATE64_BIN)
#        AUTH_THREADS=N  gate64's ipsec.auth_threads (IKE worker threads: IKE_SA_INIT key
#                      exchanges and IKE_AUTH verifications); unset
#                      leaves gate64's default (one per CPU it may use)
#        GATE64_BIN=path  the gate64 binary for the gate64 half (built in release if unset)
#        KEEP_LOGS=1   keep the temporary directory with configs, logs and iperf3 JSON
#        SOCKBUF=bytes one socket buffer size for every setup instead of gate64's own (4 MiB
#                      Teredo for the ESP setups, 8 MiB IKE for ike-*): host rmem_max/wmem_max
#                      = SOCKBUF, rmem_default/wmem_default = 2 x SOCKBUF; 0 leaves the host's
#        DPD_SECS=30   liveness-check interval of both responders: gate64's ipsec.dpd_secs
#                      (its default is 30) and charon's dpd_delay, on every connection
#        CHARON_LOGLEVEL=0   charon's filelog level (-1 silent .. 4); 1 shows its errors
#        GATE64_LOG_LEVEL=warn  gate64's [log] level (RUST_LOG, if set, overrides it)
#        IPERF3=iperf3 the iperf3 client of the runs (IPERF3=/bin/false: every run fails)
#        GRO=0         1: in the ESP-over-Teredo setups, tsrv's veth towards the client (vcli)
#                      gets a NIC's receive path, a NAPI thread and GRO (bench/lib.sh rx_gro),
#                      for both responders; the NAPI thread counts as the responder's. gate64's
#                      Teredo sockets then take the client's datagrams coalesced (UDP GRO);
#                      Miredo's sockets do not ask for it
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
# The native-* setups' client LAN (section (d)); an empty namespace in the other setups.
LAN=g64-blan-$$-0
NAMESPACES+=("$LAN")
# The namespace of the client's charon and iperf3: tcli, or tlan for the native-* setups.
CLIENT_NS=$CLI

RUNS=${RUNS:-5}
DURATION=${DURATION:-10}
DIRS=${DIRS:-"up down"}
ESP=${ESP:-aes256gcm16}
# The native-* setups take MSS only when it is set (section (d)).
NATIVE_MSS=${MSS:-0}
case "$ESP" in
*gcm*) MSS=${MSS:-1130} ;;
*) MSS=${MSS:-1110} ;;
esac
SETUPS=${SETUPS:-"strongswan gate64"}
DPD_SECS=${DPD_SECS:-30}
GRO=${GRO:-0}
AUTH_THREADS=${AUTH_THREADS:-}
CHARON_LOGLEVEL=${CHARON_LOGLEVEL:-0}
GATE64_LOG_LEVEL=${GATE64_LOG_LEVEL:-warn}
case $DPD_SECS in "" | *[!0-9]*) echo "DPD_SECS: '$DPD_SECS' is not a number of seconds" >&2; exit 2 ;; esac
case $AUTH_THREADS in *[!0-9]*) echo "AUTH_THREADS: '$AUTH_THREADS' is not a number" >&2; exit 2 ;; esac
IKE_GROUP=${IKE_GROUP:-ecp256}
IKE_CERT=${IKE_CERT:-ecdsa}
# Each group: charon's IKE proposals (responder and client), ike-load's --group, and
# gate64's ike_proposals (none for ECP-256: gate64's default takes the client's KE group).
case $IKE_GROUP in
ecp256)
    IKE_PROPOSALS=aes256gcm16-prfsha256-ecp256,aes256gcm16-prfsha256-x25519
    IKE_GROUP_ID=19
    GATE64_IKE_PROPOSALS=""
    ;;
modp2048)
    IKE_PROPOSALS=aes256gcm16-prfsha256-modp2048
    IKE_GROUP_ID=14
    GATE64_IKE_PROPOSALS='ike_proposals = ["aes256gcm16-prfsha256-modp2048"]'
    ;;
*) echo "IKE_GROUP: '$IKE_GROUP' is not ecp256 or modp2048" >&2; exit 2 ;;
esac
CLIENT=${CLIENT:-charon}
case $CLIENT in
charon) ;;
gate64)
    if [ "$ESP" != aes256gcm16 ] || [ "$IKE_GROUP" != ecp256 ]; then
        echo "CLIENT=gate64: gate64's client proposes ESP aes256gcm16 and IKE ecp256 only" \
            "(ESP=$ESP IKE_GROUP=$IKE_GROUP)" >&2
        exit 2
    fi
    ;;
*) echo "CLIENT: '$CLIENT' is not charon or gate64" >&2; exit 2 ;;
esac
case $IKE_CERT in
ecdsa) CERT_GEN=(--type ecdsa --size 256) ;;
rsa) CERT_GEN=(--type rsa --size 2048) ;;
*) echo "IKE_CERT: '$IKE_CERT' is not ecdsa or rsa" >&2; exit 2 ;;
esac

require_root
require_tools "apt-get install miredo miredo-server iperf3 iproute2 iputils-ping \
strongswan-swanctl strongswan-pki" ip ss iperf3 miredo miredo-server ping awk swanctl pki
CHARON=/usr/sbin/charon-systemd
[ -x "$CHARON" ] && [ -e /usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so ] || {
    echo "missing charon-systemd or kernel-libipsec (apt-get install charon-systemd" \
        "libstrongswan-standard-plugins libcharon-extra-plugins)" >&2
    exit 1
}

WORK=$(mktemp -d /tmp/gate64-bench-ipsec.XXXXXX)
RESPONDER=2001:db8:100:1::2
# The strongSwan responder's local_addrs (set per setup).
RESP_ADDR=$RESPONDER
# The strongSwan responder's local id, when the client asks for one (CLIENT=gate64); empty:
# its certificate's subject.
RESP_ID=
# The address the client's charon runs IKE with (set per setup).
IKE_PEER=$RESPONDER
INFRA_TS=fd00:c0::53/128
INTRANET_TS=fd00:c0::/64
INFRA_HOST=fd00:c0::53
INTRANET_HOST=fd00:c0::1
POOL6=fd00:c1::100/120
# As in gate64-testkit's strongswan fixture: kernel-libipsec before kernel-netlink.
PLUGINS="random nonce openssl pem pkcs1 pkcs8 pubkey x509 revocation constraints aes sha1 sha2 \
hmac gcm kdf attr kernel-libipsec kernel-netlink socket-default vici"
TOOL_PLUGINS="random nonce openssl pem pkcs1 pkcs8 pubkey x509 sha1 sha2"

install_cleanup

# ---------------------------------------------------------------- Teredo


start_teredo_client() {
    printf 'RelayType client\nInterfaceName teredo\nServerAddress 192.0.2.1\n%s\n%s\n' \
        'BindAddress 198.51.100.10' 'BindPort 3546' >"$WORK/cli.conf"
    start_bg "$CLI" miredo-client miredo -f -c "$WORK/cli.conf" -p "$WORK/cli.pid"
    wait_for 15 teredo_client_ready || { log "client did not qualify within 15 s"; return 1; }
    # The connectivity test and bubbles (teredo-iphttps.md §1.7) before IKE's first message.
    ip netns exec "$CLI" ping -6 -n -c 3 -i 0.2 -W 3 "$IKE_PEER" >"$WORK/ping-teredo.log" 2>&1 || {
        log "ping over Teredo failed: $(cat "$WORK/ping-teredo.log")"
        return 1
    }
}

# ---------------------------------------------------------------- strongSwan

make_certs() { # make_certs DIR SERVER_ADDR
    local dir=$1 addr=$2 k
    mkdir -p "$dir"
    printf 'pki {\n  load = %s\n}\n' "$TOOL_PLUGINS" >"$dir/pki.conf"
    pki_() { STRONGSWAN_CONF="$dir/pki.conf" pki "$@"; }
    for k in ca initiator; do
        pki_ --gen --type ecdsa --size 256 --outform pem >"$dir/$k.key"
    done
    pki_ --gen "${CERT_GEN[@]}" --outform pem >"$dir/responder.key"
    pki_ --self --ca --lifetime 30 --in "$dir/ca.key" --type ecdsa \
        --dn "CN=gate64 lab strongSwan CA" --outform pem >"$dir/ca.pem"
    pki_ --pub --in "$dir/responder.key" --type "$IKE_CERT" | pki_ --issue --lifetime 30 \
        --cacert "$dir/ca.pem" --cakey "$dir/ca.key" --dn "CN=$addr" --san "$addr" \
        --flag serverAuth --outform pem >"$dir/responder.pem"
    pki_ --pub --in "$dir/initiator.key" --type ecdsa | pki_ --issue --lifetime 30 \
        --cacert "$dir/ca.pem" --cakey "$dir/ca.key" --dn "CN=client.gate64.lab" \
        --san client.gate64.lab --flag clientAuth --outform pem >"$dir/initiator.pem"
}

# strongswan_conf DIR LOAD EXTRA PLUGIN_CONF: DIR/strongswan.conf for a charon with its log,
# vici socket and swanctl in DIR, loading the plugins LOAD; EXTRA: lines for the
# charon-systemd section (may be empty); PLUGIN_CONF: more plugin sections (may be empty).
strongswan_conf() {
    local dir=$1 load=$2 extra=$3 plugin_conf=$4
    cat >"$dir/strongswan.conf" <<EOF
charon-systemd {
  load = $load
$extra
  port = 500
  port_nat_t = 4500
  retransmit_timeout = 2
  filelog {
    charon {
      path = $dir/charon.log
      default = $CHARON_LOGLEVEL
      time_format = %H:%M:%S
      append = no
    }
  }
  journal {
    default = -1
  }
  plugins {
    vici {
      socket = unix://$dir/charon.vici
    }
$plugin_conf
  }
}
swanctl {
  load = $TOOL_PLUGINS
  socket = unix://$dir/charon.vici
}
EOF
}

# charon_dir DIR ROLE CERT KEY: strongswan.conf and the swanctl tree (one setting per line:
# `;` is no separator in these formats). ROLE: initiator | responder.
charon_dir() {
    local dir=$1 role=$2 cert=$3 key=$4 reuse="" sub
    mkdir -p "$dir"
    for sub in x509 x509ca x509ocsp x509aa x509ac x509crl pubkey private rsa ecdsa bliss pkcs8 pkcs12; do
        mkdir -p "$dir/swanctl/$sub"
    done
    cp "$cert" "$dir/swanctl/x509/own.pem"
    cp "$key" "$dir/swanctl/private/own.key"
    cp "$WORK/certs/ca.pem" "$dir/swanctl/x509ca/ca.pem"
    # Otherwise the second connection becomes a second child SA of the first IKE SA.
    [ "$role" = initiator ] && reuse="  reuse_ikesa = no"
    strongswan_conf "$dir" "$PLUGINS" "$reuse" "${CHARON_PLUGIN_CONF:-}"
    if [ "$role" = initiator ]; then
        {
            echo "connections {"
            initiator_conn infrastructure "$INFRA_TS"
            initiator_conn intranet "$INTRANET_TS"
            echo "}"
        } >"$dir/swanctl/swanctl.conf"
    else
        cat >"$dir/swanctl/swanctl.conf" <<EOF
connections {
  clients {
    version = 2
    local_addrs = $RESP_ADDR
    pools = vip6
$(LOCAL_ID=$RESP_ID conn_common)
    children {
$(child infrastructure local_ts "$INFRA_TS")
$(child intranet local_ts "$INTRANET_TS")
    }
  }
}
pools {
  vip6 {
    addrs = $POOL6
  }
}
EOF
    fi
}

conn_common() {
    cat <<EOF
    proposals = $IKE_PROPOSALS
    unique = never
    fragmentation = yes
    dpd_delay = ${DPD_SECS}s
    local {
      auth = pubkey
      certs = own.pem
${LOCAL_ID:+      id = $LOCAL_ID}
    }
    remote {
      auth = pubkey
      id = %any
    }
EOF
}

child() { # child NAME KEY TS
    printf '      %s {\n        %s = %s\n        esp_proposals = %s\n        mode = tunnel\n      }\n' \
        "$1" "$2" "$3" "$ESP"
}

initiator_conn() { # initiator_conn NAME REMOTE_TS: one IKE SA per tunnel, virtual IP asked
    cat <<EOF
  $1 {
    version = 2
    remote_addrs = $IKE_PEER
    vips = ::
$(conn_common)
    children {
$(child "$1" remote_ts "$2")
    }
  }
EOF
}

swan() { # swan NS DIR ARGS...: swanctl against the charon of DIR
    local ns=$1 dir=$2
    shift 2
    ip netns exec "$ns" env STRONGSWAN_CONF="$dir/strongswan.conf" SWANCTL_DIR="$dir/swanctl" \
        timeout 60 swanctl "$@"
}

start_charon() { # start_charon NS DIR LABEL
    local ns=$1 dir=$2 label=$3
    start_bg "$ns" "$label" env STRONGSWAN_CONF="$dir/strongswan.conf" "$CHARON"
    wait_for 15 swan "$ns" "$dir" --stats || { log "$label: no vici answer"; return 1; }
    swan "$ns" "$dir" --load-all --noprompt >"$WORK/$label-load.log" 2>&1 || {
        log "$label: swanctl --load-all failed: $(cat "$WORK/$label-load.log")"
        return 1
    }
}

# The client side, the same for both responders: charon initiator in CLIENT_NS (tcli, or
# tlan for the native-* setups), both tunnels.
start_initiator() {
    local dir=$WORK/initiator t
    charon_dir "$dir" initiator "$WORK/certs/initiator.pem" "$WORK/certs/initiator.key"
    start_charon "$CLIENT_NS" "$dir" charon-initiator || return 1
    for t in infrastructure intranet; do
        swan "$CLIENT_NS" "$dir" --initiate --ike "$t" --child "$t" --timeout 30 \
            >"$WORK/initiate-$t.log" 2>&1 || {
            log "initiating $t failed: $(tail -5 "$WORK/initiate-$t.log")"
            return 1
        }
    done
    ip netns exec "$CLIENT_NS" ping -6 -n -c 3 -i 0.2 -W 3 "$INTRANET_HOST" >"$WORK/ping-esp.log" 2>&1 || {
        log "ping through the intranet tunnel failed: $(cat "$WORK/ping-esp.log")"
        return 1
    }
}

bytes_label() { # what intranet_bytes counts
    if [ "$CLIENT" = gate64 ] && [ "$CLIENT_NS" = "$CLI" ]; then
        echo "client TUN"
    else
        echo "intranet child SA"
    fi
}

# CLIENT=gate64: `gate64 connect teredo` in tcli, both tunnels to IKE_PEER, then a ping
# through the intranet tunnel.
GATE64_CLIENT_IF=gate64t
start_gate64_client() {
    start_bg "$CLI" gate64-client env RUST_LOG="${RUST_LOG:-$GATE64_LOG_LEVEL}" "$GATE64_BIN" \
        connect teredo --server 192.0.2.1 --bind 198.51.100.10:3546 --ifname "$GATE64_CLIENT_IF" \
        --ipsec-endpoint "$IKE_PEER" --ipsec-cert "$WORK/certs/initiator.pem" \
        --ipsec-key "$WORK/certs/initiator.key" --ipsec-ca "$WORK/certs/ca.pem" \
        --infrastructure-ts "$INFRA_TS" --intranet-ts "$INTRANET_TS"
    # The client routes each tunnel's selector into its TUN once the tunnel is up.
    wait_for 45 gate64_client_routed || { log "gate64 connect: no tunnels within 45 s"; return 1; }
    ip netns exec "$CLI" ping -6 -n -c 3 -i 0.2 -W 3 "$INTRANET_HOST" >"$WORK/ping-esp.log" 2>&1 || {
        log "ping through the intranet tunnel failed: $(cat "$WORK/ping-esp.log")"
        return 1
    }
}

gate64_client_routed() {
    local r
    r=$(ip -n "$CLI" -6 route show dev "$GATE64_CLIENT_IF" 2>/dev/null) || return 1
    [[ $r == *"$INFRA_HOST "* && $r == *"$INTRANET_TS"* ]]
}

# start_client: the client of the strongswan and gate64 setups (CLIENT), once the responder is
# up; its logs are those client_logs names.
start_client() {
    if [ "$CLIENT" = gate64 ]; then
        start_gate64_client
    else
        start_teredo_client && start_initiator
    fi
}

client_logs() {
    if [ "$CLIENT" = gate64 ]; then
        echo "$WORK/gate64-client.log"
    else
        echo "$WORK/miredo-client.log" "$WORK/initiator/charon.log"
    fi
}

# Bytes the client's intranet child SA has sent and received (from swanctl --list-sas --raw);
# with CLIENT=gate64 (in tcli), those its TUN has, both tunnels together.
intranet_bytes() {
    if [ "$CLIENT" = gate64 ] && [ "$CLIENT_NS" = "$CLI" ]; then
        ip netns exec "$CLI" cat "/sys/class/net/$GATE64_CLIENT_IF/statistics/rx_bytes" \
            "/sys/class/net/$GATE64_CLIENT_IF/statistics/tx_bytes" 2>/dev/null |
            awk '{s += $1} END {printf "%.0f\n", s}'
        return
    fi
    swan "$CLIENT_NS" "$WORK/initiator" --list-sas --raw 2>/dev/null |
        tr ' ' '\n' | awk -F= '/name=/ {f = ($0 ~ /[{]?name=intranet$/)} f && /^bytes-(in|out)=/ {s += $2} END {printf "%.0f\n", s}'
}

# ---------------------------------------------------------------- measurement

# Whole-machine busy clock ticks: user + nice + system + irq + softirq (fields 2 3 4 7 8 of
# /proc/stat's "cpu" line; idle, iowait and steal are not ours).
machine_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8; exit}' /proc/stat; }

idle_baseline() { # busy cores of the machine over 3 s with the lab idle
    local t0 t1
    t0=$(machine_ticks)
    sleep 3
    t1=$(machine_ticks)
    awk -v d=$((t1 - t0)) -v hz="$CLK_TCK" 'BEGIN {printf "%.2f", d / hz / 3}'
}

# Clock ticks (utime + stime, all threads) of every process in the lab: charon, miredo,
# gate64 and iperf3, and the NAPI threads of the lab's devices, each thread once (tlan, the
# native-* setups' client LAN, counts nothing in the other setups, where it stays empty). Unlike
# machine_ticks it ignores other work on the machine, but it also misses kernel work done
# outside process context (softirq on idle cores).
lab_ticks() {
    echo $(($(proc_ticks "$CLI") + $(proc_ticks "$SRV") + $(proc_ticks "$CORP") +
        $(proc_ticks "$LAN") + $(napi_ticks "$CLI" "$SRV" "$CORP" "$LAN")))
}

# The responder side alone: every process in tsrv (gate64, or miredo-server + miredo relay)
# and in tcorp but iperf3 (strongSwan's charon responder), and the NAPI threads of those
# namespaces' devices (gate64's TUN), counted apart (resp_napi_ticks) for the table.
resp_proc_ticks() { echo $(($(proc_ticks "$SRV") + $(proc_ticks "$CORP" iperf3))); }
resp_napi_ticks() { napi_ticks "$SRV" "$CORP"; }

# per_cpu_s MBPS CPU_S: megabits moved per CPU-second spent in one run (= Mbit/s per busy
# core), which does not depend on DURATION.
per_cpu_s() { quotient "$(awk -v m="$1" -v d="$DURATION" 'BEGIN {printf "%.6f", m * d}')" "$2"; }

# The inner MSS of the runs: MSS over Teredo, NATIVE_MSS for the native-* setups.
RUN_MSS=$MSS
RESULTS=() # "setup dir ok mbps cpu eff lab lab_eff resp resp_napi resp_eff" (medians of the ok runs)
BASELINES=() # "setup busy-cores"

measure() { # measure SETUP
    local setup=$1 dir run json t0 t1 l0 l1 r0 r1 n0 n1 b0 b1 mbps cpu lab resp napi rev base ok
    local mss=()
    [ "$RUN_MSS" != 0 ] && mss=(-M "$RUN_MSS")
    base=$(idle_baseline)
    BASELINES+=("$setup $base")
    log "  idle baseline: $base busy cores"
    for dir in $DIRS; do
        local mbps_runs="" cpu_runs="" eff_runs="" lab_runs="" leff_runs="" resp_runs="" napi_runs="" reff_runs=""
        ok=0
        rev=()
        [ "$dir" = down ] && rev=(-R)
        for run in $(seq "$RUNS"); do
            json="$WORK/$setup-$dir-$run.json"
            b0=$(intranet_bytes)
            l0=$(lab_ticks)
            r0=$(resp_proc_ticks)
            n0=$(resp_napi_ticks)
            t0=$(machine_ticks)
            if ! ip netns exec "$CLIENT_NS" timeout $((DURATION + 30)) "$IPERF3" -6 -c "$INTRANET_HOST" \
                -t "$DURATION" "${mss[@]}" "${rev[@]}" --json --connect-timeout 5000 \
                >"$json" 2>&1; then
                log "  $setup $dir run $run: iperf3 failed: $(grep -m1 '"error"' "$json" || tail -3 "$json")"
                run_failed "$setup $dir run $run: iperf3 failed"
                continue
            fi
            t1=$(machine_ticks)
            l1=$(lab_ticks)
            r1=$(resp_proc_ticks)
            n1=$(resp_napi_ticks)
            b1=$(intranet_bytes)
            mbps=$(received_mbps "$json")
            cpu=$(secs $((t1 - t0)))
            lab=$(secs $((l1 - l0)))
            resp=$(secs $((r1 - r0 + n1 - n0)))
            napi=$(secs $((n1 - n0)))
            ok=$((ok + 1))
            log "  $setup $dir run $run: $mbps Mbit/s, whole-machine CPU $cpu s, lab processes" \
                "$lab s, responder $resp s (NAPI $napi s), $(bytes_label) +$(((b1 - b0) / 1000000)) MB"
            mbps_runs+="$mbps"$'\n'
            cpu_runs+="$cpu"$'\n'
            lab_runs+="$lab"$'\n'
            resp_runs+="$resp"$'\n'
            napi_runs+="$napi"$'\n'
            # Efficiencies per run (Mbit/s and CPU of the same run), then their medians.
            eff_runs+="$(per_cpu_s "$mbps" "$cpu")"$'\n'
            leff_runs+="$(per_cpu_s "$mbps" "$lab")"$'\n'
            reff_runs+="$(per_cpu_s "$mbps" "$resp")"$'\n'
        done
        RESULTS+=("$setup $dir $ok $(median_of "$mbps_runs") $(median_of "$cpu_runs") $(median_of "$eff_runs") $(median_of "$lab_runs") $(median_of "$leff_runs") $(median_of "$resp_runs") $(median_of "$napi_runs") $(median_of "$reff_runs")")
    done
}

# ---------------------------------------------------------------- (a) strongSwan responder

run_strongswan() {
    log "== strongswan: miredo server + relay, strongSwan responder in tcorp"
    teardown
    setup
    if [ "$GRO" = 1 ]; then rx_gro "$SRV" vcli; fi
    IKE_PEER=$RESPONDER
    match_sockbufs "${SOCKBUF:-$GATE64_SOCKBUF_TEREDO}"
    rm -rf "$WORK/certs" "$WORK/initiator" "$WORK/responder"
    make_certs "$WORK/certs" "$IKE_PEER"
    ip -n "$CORP" addr add "$INFRA_HOST/128" dev lo
    ip -n "$CORP" addr add "$INTRANET_HOST/64" dev lo
    start_miredo_pair || { log "miredo pair did not start"; tail -n 20 "$WORK"/miredo-*.log >&2; return 1; }
    RESP_ID=""
    [ "$CLIENT" != gate64 ] || RESP_ID=$IKE_PEER
    charon_dir "$WORK/responder" responder "$WORK/certs/responder.pem" "$WORK/certs/responder.key"
    RESP_ID=""
    start_charon "$CORP" "$WORK/responder" charon-responder || return 1
    # shellcheck disable=SC2046 # client_logs: one path per word
    start_client || { tail -n 40 $(client_logs) "$WORK"/responder/charon.log >&2; return 1; }
    start_bg "$CORP" iperf3-server iperf3 -s
    wait_for 5 tcp_listening "$CORP" 5201 || { log "iperf3 -s not listening"; return 1; }
    measure strongswan
    print_sockbufs strongswan "$SRV"
    print_sockbufs strongswan "$CORP"
    print_sockbufs strongswan "$CLI"
    teardown
}

# ================================================================ (b) gate64 responder
# gate64 serve in tsrv is the Teredo server, the relay and the IKE/ESP responder at its
# [ipsec] endpoint (corpnet.address6, on its TUN); tcorp only holds the hosts and iperf3 -s.
# The client side (miredo + charon initiator) is the same as in (a); only IKE_PEER changes.
GATE64_ENDPOINT=2001:db8:100::1

start_gate64() {
    local listen=""
    [ -z "${GATE64_LISTEN:-}" ] || listen="listen = [\"$GATE64_LISTEN\"]"
    cat >"$WORK/gate64.toml" <<EOF
[server]
workers = 2
[teredo]
server_addresses = ["192.0.2.1", "192.0.2.2"]
port = 3544
relay = true
[corpnet]
tun = "$GATE64_TUN"
ipv6_prefixes = ["2001:db8:100::/48", "$INTRANET_TS"]
address6 = "$GATE64_ENDPOINT"
[ipsec]
certificate = "$WORK/certs/responder.pem"
private_key = "$WORK/certs/responder.key"
ca = "${GATE64_CA:-$WORK/certs/ca.pem}"
pool6 = "$POOL6"
endpoint = "$GATE64_ENDPOINT"
infrastructure_prefixes = ["$INFRA_TS"]
intranet_prefixes = ["$INTRANET_TS"]
dpd_secs = $DPD_SECS
${AUTH_THREADS:+auth_threads = $AUTH_THREADS}
$GATE64_IKE_PROPOSALS
$listen
${GATE64_IPSEC_TABLES:-}
[metrics]
listen = "127.0.0.1:9164"
[log]
level = "$GATE64_LOG_LEVEL"
EOF
    start_bg "$SRV" gate64 "$GATE64_BIN" serve --config "$WORK/gate64.toml"
    wait_for 15 udp_bound "$SRV" 192.0.2.1:3544 && wait_for 5 tcp_listening "$SRV" 9164 &&
        wait_for 5 udp_bound "$SRV" "[$GATE64_ENDPOINT]:500" &&
        { [ -z "${GATE64_LISTEN:-}" ] || wait_for 5 udp_bound "$SRV" "$GATE64_LISTEN:4500"; }
}

# gate64's own view of the client: two IKE SAs and two child SAs (one pair per tunnel).
gate64_sa_gauges() {
    local m
    m=$(ip netns exec "$SRV" curl -s --max-time 5 http://127.0.0.1:9164/metrics 2>/dev/null || true)
    log "  gate64: $(printf '%s\n' "$m" | awk '/^gate64_ipsec_(mm|qm)sa / {printf "%s=%s ", $1, $2}')"
}

run_gate64() {
    log "== gate64: gate64 serve (Teredo server + relay + IKE/ESP responder) in tsrv"
    teardown
    setup
    if [ "$GRO" = 1 ]; then rx_gro "$SRV" vcli; fi
    IKE_PEER=$GATE64_ENDPOINT
    match_sockbufs "${SOCKBUF:-$GATE64_SOCKBUF_TEREDO}"
    rm -rf "$WORK/certs" "$WORK/initiator" "$WORK/responder"
    make_certs "$WORK/certs" "$IKE_PEER"
    ip -n "$CORP" addr add "$INFRA_HOST/128" dev lo
    ip -n "$CORP" addr add "$INTRANET_HOST/64" dev lo
    # Opened packets leave gate64's TUN for the corporate side; tcorp answers the pool through
    # its default route (tsrv), where gate64 routes $POOL6 into its TUN.
    ip -n "$SRV" -6 route add "$INTRANET_TS" via "$CORP_HOST" dev vcorp
    start_gate64 || { log "gate64 did not start; its log:"; tail -n 30 "$WORK/gate64.log" >&2; return 1; }
    # shellcheck disable=SC2046 # client_logs: one path per word
    start_client || { tail -n 40 $(client_logs) "$WORK/gate64.log" >&2; return 1; }
    start_bg "$CORP" iperf3-server iperf3 -s
    wait_for 5 tcp_listening "$CORP" 5201 || { log "iperf3 -s not listening"; return 1; }
    gate64_sa_gauges
    measure gate64
    GATE64_MEASURED=yes
    print_sockbufs gate64 "$SRV"
    print_sockbufs gate64 "$CORP"
    print_sockbufs gate64 "$CLI"
    teardown
}
# ================================================================ end of the gate64 half

# ================================================================ (c) IKE handshakes, SAs held
# SETUPS ike-gate64 / ike-strongswan: gate64-testkit's ike-load in tcli runs IKE_CLIENTS
# emulated clients, two IKE SAs each (infrastructure + intranet, a certificate per client
# from its own CA), over plain UDP from IKE_SOURCES IPv6 addresses on tcli's veth, each in
# its own /48 (gate64 counts half-open SAs and IKE_AUTH verifications in flight per /64, as
# one client's, and IKE_AUTH verifications per /48 as well, as one site's: sources sharing a
# /64 or a /48 would measure those caps and ike-load's retransmission waits, not the
# responder), against
# (a) gate64 serve's IKE endpoint (2001:db8:100::1, on its TUN in tsrv: the kernel delivers
# IKE arriving on the veth to the daemon's sockets on [endpoint]:500/4500 directly, so this
# load skips Teredo and the dataplane, and measures the IKE responder alone) and (b) a
# strongSwan responder in tcorp (routed through tsrv). Handshakes per second, the
# responder's CPU during them, the SAs held (gate64_ipsec_mmsa/qmsa; swanctl --stats) and the
# responder's RSS before and after -> memory per client.
IKE_CLIENTS=${IKE_CLIENTS:-500}
IKE_WINDOW=${IKE_WINDOW:-16}
IKE_SOURCES=${IKE_SOURCES:-32}
IKE_SOCKETS=${IKE_SOCKETS:-1}
IKE_POOL6=fd00:c1::/112
# The link between tcli and tsrv (tsrv's end is the clients' next hop to the endpoint).
IKE_CLIENT_NET=2001:db8:200
# The client sources: 2001:db8:8001:: .. 2001:db8:ffff::, one /48 each (ike_source).
IKE_SOURCE_NET=2001:db8:8000::/33
IKE_SOURCES_MAX=32767
case $IKE_SOURCES in
'' | *[!0-9]*) echo "IKE_SOURCES: '$IKE_SOURCES' is not a number" >&2; exit 2 ;;
esac
if [ "$IKE_SOURCES" -lt 1 ] || [ "$IKE_SOURCES" -gt "$IKE_SOURCES_MAX" ]; then
    echo "IKE_SOURCES: $IKE_SOURCES is not in 1..$IKE_SOURCES_MAX (one /48 each)" >&2
    exit 2
fi
case $IKE_SOCKETS in
'' | *[!0-9]*) echo "IKE_SOCKETS: '$IKE_SOCKETS' is not a number" >&2; exit 2 ;;
esac
if [ "$IKE_SOCKETS" -gt 2 ]; then
    echo "IKE_SOCKETS=$IKE_SOCKETS: more than gate64's 2 IKE_AUTH in flight per source;" \
        "the ike-gate64 run will be shed (auth_queue_source) and wait for retransmissions" >&2
fi
IKE_RESULTS=() # "setup clients established failed secs rate cpu rss0 rss1 mmsa qmsa"

ike_lab() {
    teardown
    setup
    ip -n "$SRV" addr add "$IKE_CLIENT_NET::1/64" dev vcli nodad
    ip -n "$SRV" -6 route add "$IKE_CLIENT_NET::/48" dev vcli
    ip -n "$SRV" -6 route add "$IKE_SOURCE_NET" dev vcli
    local i
    for i in $(seq "$IKE_SOURCES"); do
        ip -n "$CLI" addr add "$(ike_source "$i")/64" dev vsrv nodad
    done
    ip -n "$CLI" -6 route add "$IKE_CLIENT_NET::/48" dev vsrv
    ip -n "$CLI" -6 route add "$IKE_SOURCE_NET" dev vsrv
    ip -n "$CLI" -6 route add 2001:db8:100::/48 via "$IKE_CLIENT_NET::1"
    # kernel-libipsec routes each child SA into ipsec0 with its local selector's address as
    # the source, which must be local (as in the ESP setups).
    ip -n "$CORP" addr add "$INFRA_HOST/128" dev lo
    ip -n "$CORP" addr add "$INTRANET_HOST/64" dev lo
    rm -rf "$WORK/certs" "$WORK/clients" "$WORK/responder"
    make_certs "$WORK/certs" "$IKE_PEER"
    "$IKE_LOAD_BIN" make-ca "$WORK/clients"
}

# ike_source I (1..IKE_SOURCES_MAX): the I-th client source address, alone in its /48 of
# $IKE_SOURCE_NET, so neither gate64's per-source (/64) nor its per-host (/48) cap on
# IKE_AUTH verifications in flight is shared between sources.
ike_source() { printf '2001:db8:%x::1000' $((0x8000 + $1)); }

ike_sources() {
    local i out=""
    for i in $(seq "$IKE_SOURCES"); do out+="$(ike_source "$i"),"; done
    echo "${out%,}"
}

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
ns_pid_of() { # ns_pid_of NS COMM
    local p
    for p in $(ip netns pids "$1"); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$2" ] && { echo "$p"; return 0; }
    done
    return 1
}

# ike_measure SETUP NS PID: ike-load against IKE_PEER; the responder is process PID in NS.
ike_measure() {
    local setup=$1 ns=$2 pid=$3 log=$WORK/ike-load-$1.log rss0 rss1 t0 t1 line load mm qm
    sleep 2
    rss0=$(rss_kb "$pid")
    t0=$(ns_ticks "$ns")
    ip netns exec "$CLI" "$IKE_LOAD_BIN" run --server "$IKE_PEER" --server-ca "$WORK/certs/ca.pem" \
        --ca-dir "$WORK/clients" --bind "$(ike_sources)" --sockets "$IKE_SOCKETS" --per-socket 1 \
        --clients "$IKE_CLIENTS" --window "$IKE_WINDOW" --group "$IKE_GROUP_ID" --infrastructure "$INFRA_TS" \
        --intranet "$INTRANET_TS" --hold-secs 0 >"$log" 2>&1 &
    load=$!
    # Certificates first (not timed), then the handshakes; generous: 1 handshake/s at worst.
    if ! wait_for $((60 + 2 * IKE_CLIENTS)) grep -q '^established=' "$log"; then
        log "  $setup: ike-load did not finish: $(tail -3 "$log")"
        kill "$load" 2>/dev/null || true
        return 1
    fi
    t1=$(ns_ticks "$ns")
    sleep 2
    rss1=$(rss_kb "$pid")
    line=$(grep -m1 '^established=' "$log")
    log "  $setup: $line"
    case $setup in
    ike-gate64)
        local m
        m=$(ip netns exec "$SRV" curl -s --max-time 10 http://127.0.0.1:9164/metrics || true)
        mm=$(printf '%s\n' "$m" | awk '$1 == "gate64_ipsec_mmsa" {print $2}')
        qm=$(printf '%s\n' "$m" | awk '$1 == "gate64_ipsec_qmsa" {print $2}')
        # IKE shed before any work (caps, auth queue): each costs the client a retransmission.
        # "none" only when the metrics were read; nothing after "shed:" when they were not.
        log "  $setup: shed: $(printf '%s\n' "$m" | awk '/^gate64_/ {seen = 1} /^gate64_ike_shed_total/ && $2 > 0 {n++; printf "%s=%s ", $1, $2} END {if (seen && !n) print "none"}')"
        ;;
    *)
        local st
        st=$(swan "$CORP" "$WORK/responder" --list-sas --raw 2>/dev/null || true)
        mm=$(printf '%s' "$st" | grep -o 'state=ESTABLISHED' | wc -l)
        qm=$(printf '%s' "$st" | grep -o 'state=INSTALLED' | wc -l)
        ;;
    esac
    log "  $setup: IKE SAs $mm, child SAs $qm, RSS ${rss0} kB -> ${rss1} kB"
    kill -TERM "$load" 2>/dev/null || true
    wait "$load" 2>/dev/null || true
    local est fail secs rate
    est=$(printf '%s' "$line" | sed -n 's/.*established=\([0-9]*\).*/\1/p')
    fail=$(printf '%s' "$line" | sed -n 's/.*failed=\([0-9]*\).*/\1/p')
    secs=$(printf '%s' "$line" | sed -n 's/.*elapsed_s=\([0-9.]*\).*/\1/p')
    rate=$(printf '%s' "$line" | sed -n 's/.*handshakes_per_s=\([0-9.]*\).*/\1/p')
    IKE_RESULTS+=("$setup $IKE_CLIENTS $est $fail $secs $rate $(secs $((t1 - t0))) $rss0 $rss1 ${mm:-?} ${qm:-?}")
}

run_ike_gate64() {
    log "== ike-gate64: $IKE_CLIENTS clients x 2 IKE SAs against gate64 serve's IKE endpoint"
    IKE_PEER=$GATE64_ENDPOINT
    match_sockbufs "${SOCKBUF:-$GATE64_SOCKBUF_IKE}"
    ike_lab
    local pool=$POOL6 pid
    POOL6=$IKE_POOL6 GATE64_CA=$WORK/clients/clients-ca.pem start_gate64 ||
        { log "gate64 did not start"; tail -n 30 "$WORK/gate64.log" >&2; return 1; }
    POOL6=$pool
    pid=$(ns_pid_of "$SRV" gate64) || { log "no gate64 process"; return 1; }
    ike_measure ike-gate64 "$SRV" "$pid" || { tail -n 20 "$WORK/gate64.log" >&2; return 1; }
    print_sockbufs ike-gate64 "$SRV" "$pid"
    teardown
}

run_ike_strongswan() {
    log "== ike-strongswan: $IKE_CLIENTS clients x 2 IKE SAs against a strongSwan responder"
    IKE_PEER=$RESPONDER
    match_sockbufs "${SOCKBUF:-$GATE64_SOCKBUF_IKE}"
    ike_lab
    local pool=$POOL6 pid
    # Liveness checks as gate64's: gate64 checks an IKE SA idle for ipsec.dpd_secs, charon
    # one idle for dpd_delay; both are DPD_SECS (conn_common, start_gate64). ike-load answers
    # them.
    POOL6=$IKE_POOL6 charon_dir "$WORK/responder" responder "$WORK/certs/responder.pem" \
        "$WORK/certs/responder.key"
    POOL6=$pool
    cp "$WORK/clients/clients-ca.pem" "$WORK/responder/swanctl/x509ca/clients.pem"
    start_charon "$CORP" "$WORK/responder" charon-responder || return 1
    pid=$(ns_pid_of "$CORP" charon-systemd) || { log "no charon process"; return 1; }
    ike_measure ike-strongswan "$CORP" "$pid" ||
        { tail -n 20 "$WORK/responder/charon.log" >&2; return 1; }
    print_sockbufs ike-strongswan "$CORP" "$pid"
    teardown
}

print_ike_results() {
    [ "${#IKE_RESULTS[@]}" -gt 0 ] || return 0
    printf '\nIKE: %s clients x 2 tunnels (IKE_SA_INIT + IKE_AUTH with certificates), key exchange %s, server certificate %s, window %s, gate64 auth_threads %s\n' \
        "$IKE_CLIENTS" "$IKE_GROUP" "$IKE_CERT" "$IKE_WINDOW" "${AUTH_THREADS:-default}"
    printf '%-15s %7s %6s %9s %13s %10s %13s %9s %9s %7s %7s %11s\n' responder est failed secs \
        handshakes/s "resp CPU s" handshakes/CPU "RSS0 kB" "RSS1 kB" MMSA QMSA "B/client"
    local r setup n est fail secs rate cpu rss0 rss1 mm qm
    for r in "${IKE_RESULTS[@]}"; do
        read -r setup n est fail secs rate cpu rss0 rss1 mm qm <<<"$r"
        printf '%-15s %7s %6s %9s %13s %10s %13s %9s %9s %7s %7s %11s\n' "$setup" "$est" "$fail" \
            "$secs" "$rate" "$cpu" "$(awk -v e="$est" -v c="$cpu" 'BEGIN {if (c > 0) printf "%.1f", e / c; else print "inf"}')" \
            "$rss0" "$rss1" "$mm" "$qm" \
            "$(awk -v a="$rss0" -v b="$rss1" -v n="$n" 'BEGIN {if (n > 0) printf "%.0f", (b - a) * 1024 / n}')"
    done
    printf '(est = IKE SAs established by ike-load, 2 per client; resp CPU s = user + system time of\n the responder namespace during the handshakes; B/client = RSS growth / clients.)\n'
}

# ================================================================ (d) native clients
# SETUPS native-gate64 / native-strongswan: the client of (a) and (b), the same charon with
# kernel-libipsec and the same two connections, but in a LAN namespace tlan behind tcli,
# which masquerades it (nftables, as tests/e2e/ipsec_native.rs does), dialing the
# responder's public IPv4 address 192.0.2.10 on tsrv straight: no Teredo, no Miredo.
#
#   tlan  10.9.0.2: charon initiator (kernel-libipsec, ipsec0), iperf3 client
#     └─ tcli  10.9.0.1 / 198.51.100.10: nftables masquerade (the NAT's public address)
#         └─ tsrv  192.0.2.10: (a) gate64 serve, `[ipsec] listen = ["192.0.2.10"]`
#                              (b) charon responder, local_addrs = 192.0.2.10
#             └─ tcorp 2001:db8:100:1::2: iperf3 -s on fd00:c0::1
#
# NAT detection moves both to UDP 4500, ESP in UDP (RFC 3948) both ways. Both responders run
# in tsrv and forward the opened packets to tcorp the same way (gate64 through its TUN,
# charon through its ipsec0), so resp CPU s is tsrv alone for both. Fairness as in (a)/(b): the same certificates (SAN 192.0.2.10), IKE proposals
# (IKE_GROUP, IKE_CERT), ESP proposals ($ESP) and liveness interval; gate64 carries native
# ESP on its IKE sockets (UDP 4500 of the listen address, 8 MiB asked, forced), so the host
# sysctls give charon's UDP 4500 socket, which sets nothing, the same 16 MiB
# (match_sockbufs). gate64 keeps its Teredo server configured, idle. The inner MSS is left to
# the path unless MSS is set: kernel-libipsec's ipsec0 has an MTU of 1400, so TCP takes an
# MSS of 1340 and the ESP in UDP in IPv4 of a full segment (at most 1,476 bytes with AES-CBC)
# fits the links' 1500.
LAN_GW=10.9.0.1
LAN_CLIENT=10.9.0.2
NATIVE_ADDR=192.0.2.10

native_lab() { # native_lab: tlan behind tcli's NAT, 192.0.2.10 on tsrv, hosts in tcorp
    teardown
    setup
    ip link add name vlan netns "$CLI" type veth peer name vnat netns "$LAN"
    ip -n "$CLI" link set vlan up
    ip -n "$LAN" link set vnat up
    ip -n "$CLI" addr add "$LAN_GW/24" dev vlan
    ip -n "$LAN" addr add "$LAN_CLIENT/24" dev vnat
    ip -n "$LAN" route add default via "$LAN_GW"
    ip netns exec "$CLI" sysctl -qw net.ipv4.ip_forward=1
    ip netns exec "$CLI" nft -f - <<'EOF'
table ip nat {
  chain post {
    type nat hook postrouting priority 100;
    oif "vsrv" masquerade
  }
}
EOF
    ip -n "$SRV" addr add "$NATIVE_ADDR/24" dev vcli
    ip -n "$CORP" addr add "$INFRA_HOST/128" dev lo
    ip -n "$CORP" addr add "$INTRANET_HOST/64" dev lo
    # The opened packets leave tsrv for the corporate side; tcorp answers the pool through its
    # default route (tsrv), which routes it to the responder (gate64 itself; for charon see
    # run_native_strongswan).
    ip -n "$SRV" -6 route add "$INTRANET_TS" via "$CORP_HOST" dev vcorp
    IKE_PEER=$NATIVE_ADDR
    CLIENT_NS=$LAN
    RUN_MSS=$NATIVE_MSS
    match_sockbufs "${SOCKBUF:-$GATE64_SOCKBUF_IKE}"
    rm -rf "$WORK/certs" "$WORK/initiator" "$WORK/responder"
    make_certs "$WORK/certs" "$NATIVE_ADDR"
}

# The client's SAs went through the NAT: charon in tlan on UDP 4500 with encapsulation.
native_check() {
    local sas
    sas=$(swan "$LAN" "$WORK/initiator" --list-sas --raw 2>/dev/null || true)
    case $sas in
    *encap=yes*) log "  the client's child SAs are UDP-encapsulated (NAT detected)" ;;
    *) log "  the client's child SAs are not UDP-encapsulated: $sas"; return 1 ;;
    esac
}

native_done() { # back to the Teredo lab's client namespace and MSS
    CLIENT_NS=$CLI
    RUN_MSS=$MSS
    teardown
}

run_native_gate64() {
    log "== native-gate64: gate64 serve, [ipsec] listen $NATIVE_ADDR, client behind a NAT"
    native_lab
    GATE64_LISTEN=$NATIVE_ADDR start_gate64 ||
        { log "gate64 did not start; its log:"; tail -n 30 "$WORK/gate64.log" >&2; return 1; }
    start_initiator || { tail -n 40 "$WORK"/initiator/charon.log "$WORK/gate64.log" >&2; return 1; }
    native_check || return 1
    start_bg "$CORP" iperf3-server iperf3 -s
    wait_for 5 tcp_listening "$CORP" 5201 || { log "iperf3 -s not listening"; return 1; }
    gate64_sa_gauges
    measure native-gate64
    print_sockbufs native-gate64 "$SRV"
    print_sockbufs native-gate64 "$LAN"
    native_done
}

run_native_strongswan() {
    log "== native-strongswan: charon responder on $NATIVE_ADDR in tsrv, client behind a NAT"
    native_lab
    RESP_ADDR=$NATIVE_ADDR charon_dir "$WORK/responder" responder "$WORK/certs/responder.pem" \
        "$WORK/certs/responder.key"
    # kernel-libipsec routes a child SA into ipsec0 with an address of its local selector as
    # the source, and refuses the child SA when the host has none (TS_UNACCEPTABLE): tsrv
    # gets one in each, fd00:c0::53 itself (the infrastructure selector is that one address;
    # tsrv then answers it, which no run uses) and fd00:c0::fffe in the intranet /64, whose
    # other addresses, fd00:c0::1 among them, stay routed to tcorp.
    ip -n "$SRV" addr add "$INFRA_HOST/128" dev lo
    ip -n "$SRV" addr add fd00:c0::fffe/128 dev lo
    start_charon "$SRV" "$WORK/responder" charon-responder || return 1
    start_initiator || { tail -n 40 "$WORK"/initiator/charon.log "$WORK"/responder/charon.log >&2; return 1; }
    native_check || return 1
    start_bg "$CORP" iperf3-server iperf3 -s
    wait_for 5 tcp_listening "$CORP" 5201 || { log "iperf3 -s not listening"; return 1; }
    measure native-strongswan
    print_sockbufs native-strongswan "$SRV"
    print_sockbufs native-strongswan "$LAN"
    native_done
}

# ================================================================ (e) EAP set-ups via RADIUS
# SETUPS eap: EAP-MSCHAPv2 user tunnels authenticated by one FreeRADIUS, against (a) gate64
# serve (`[ipsec] listen` + `[[ipsec.eap_radius]]`) and (b) a charon responder with the
# eap-radius plugin (`remote { auth = eap-radius  eap_id = %any }`), the same clients for
# both. Set-ups per second and the responder's CPU per set-up.
#
#   teap1..N  10.90.I.2: charon initiator, EAP_CLIENTS / EAP_SOURCES connections, one user
#     │                  each (user0001.. with its own password), no certificate
#     └─ tsrv  10.90.I.1, 192.0.2.10: (a) gate64 serve  (b) charon responder, local_addrs
#         │                           192.0.2.10 (one at a time, started afresh each run)
#         └─ tcorp 10.77.0.2: FreeRADIUS (Debian's configuration, users file with every
#                             user, eap module's default_eap_type = mschapv2)
#
# One FreeRADIUS serves every run of both responders. Each client namespace is its own
# source address with its own charon (kernel-libipsec for the child SAs, which installs each
# one's virtual IP and route: it refuses a child SA without them; no traffic flows),
# initiating its connections with `swanctl --initiate` EAP_WINDOW at a time: gate64 refuses
# a ninth EAP exchange in progress from one source (`eap_cap`) and drops an IKE_AUTH beyond
# 2 verifications per source as lost (a retransmission later), so several sources with a
# small window each keep its per-source caps out of the figure. A set-up counts when swanctl
# returns with the IKE SA and its child SA up (a CFG_REQUEST for an IPv6 address answered
# from fd00:c1::/112). Runs alternate gate64, strongSwan, gate64, ...; each run starts its
# responder and the clients afresh (not timed), then times the EAP_CLIENTS set-ups.
#
# Fairness: the same certificate (ECDSA P-256 unless IKE_CERT), IKE proposals (IKE_GROUP),
# ESP proposal and 16 MiB IKE sockets (match_sockbufs) for both. gate64 sends each
# Access-Request from a socket of its own; charon's eap-radius plugin keeps `sockets`
# sockets with one request outstanding each (its default is 1, which would queue every
# set-up behind one RADIUS round trip), so it gets EAP_RADIUS_SOCKETS, by default as many as
# set-ups in flight. Both relay the same RADIUS exchange: EAP-Identity asked by the responder,
# then three Access-Requests (MSCHAPv2 challenge, success, accept).
#
# CPU: resp = every process of tsrv (the responder alone) with its devices' NAPI threads;
# radius = FreeRADIUS in tcorp; machine = /proc/stat busy time, clients and swanctl included.
# The whole machine's two cores are shared by the clients, FreeRADIUS and the responder:
# set-ups per wall second are bounded by what the others leave, so read the per responder
# CPU-second ratio.
EAP_CLIENTS=${EAP_CLIENTS:-400}
EAP_SOURCES=${EAP_SOURCES:-8}
EAP_WINDOW=${EAP_WINDOW:-2}
EAP_RADIUS_SOCKETS=${EAP_RADIUS_SOCKETS:-$((EAP_SOURCES * EAP_WINDOW))}
for v in EAP_CLIENTS EAP_SOURCES EAP_WINDOW EAP_RADIUS_SOCKETS; do
    case ${!v} in "" | *[!0-9]* | 0) echo "$v: '${!v}' is not a positive number" >&2; exit 2 ;; esac
done
EAP_SECRET=gate64-bench-eap-secret
EAP_RADIUS=10.77.0.2
EAP_NS=()
if [[ " $SETUPS " == *" eap "* ]]; then
    for i in $(seq "$EAP_SOURCES"); do EAP_NS+=("g64-beap-$$-$i"); done
    NAMESPACES+=("${EAP_NS[@]}")
fi
# "setup run est fail secs resp_ticks radius_ticks machine_ticks" per run.
EAP_RUNS=()

eap_user() { printf 'user%04d' "$1"; }

if [[ " $SETUPS " == *" eap "* ]]; then
    require_tools "apt-get install freeradius" freeradius
    for p in eap-radius eap-identity eap-mschapv2; do
        [ -e "/usr/lib/ipsec/plugins/libstrongswan-$p.so" ] || {
            echo "missing strongSwan's $p plugin (apt-get install libcharon-extra-plugins" \
                "libcharon-extauth-plugins)" >&2
            exit 1
        }
    done
fi

# eap_lab: the namespaces, addresses, certificates and FreeRADIUS, once for every run.
eap_lab() {
    teardown
    setup
    local i ns
    for i in $(seq "$EAP_SOURCES"); do
        ns=${EAP_NS[$((i - 1))]}
        ip link add name "ve$i" netns "$SRV" type veth peer name vsrv netns "$ns"
        ip -n "$SRV" link set "ve$i" up
        ip -n "$ns" link set vsrv up
        ip -n "$SRV" addr add "10.90.$i.1/24" dev "ve$i"
        ip -n "$ns" addr add "10.90.$i.2/24" dev vsrv
        ip -n "$ns" route add default via "10.90.$i.1"
    done
    ip -n "$SRV" addr add "$NATIVE_ADDR/24" dev vcli
    ip -n "$SRV" addr add 10.77.0.1/24 dev vcorp
    ip -n "$CORP" addr add "$EAP_RADIUS/24" dev vsrv
    match_sockbufs "${SOCKBUF:-$GATE64_SOCKBUF_IKE}"
    rm -rf "$WORK/certs"
    make_certs "$WORK/certs" "$NATIVE_ADDR"
    printf '%s\n' "$EAP_SECRET" >"$WORK/eap-radius.secret"
    chmod 600 "$WORK/eap-radius.secret"
    start_freeradius
}

# Debian's FreeRADIUS configuration copied, with the test's log and run directories (owned
# by freerad, which the daemon drops to: interop-accounting-revocation.md), one client entry
# (tsrv's 10.77.0.1), every user in the users file, EAP-MSCHAPv2 offered first.
start_freeradius() {
    local raddb=$WORK/raddb i users
    cp -a /etc/freeradius/3.0 "$raddb"
    mkdir -p "$WORK/radius-log/radacct" "$WORK/radius-run"
    chown -R freerad:freerad "$WORK/radius-log" "$WORK/radius-run"
    chmod 711 "$WORK"
    sed -i -e "s|^logdir = .*|logdir = $WORK/radius-log|" -e "s|^run_dir = .*|run_dir = $WORK/radius-run|" \
        "$raddb/radiusd.conf"
    sed -i 's|^\tdefault_eap_type = .*|\tdefault_eap_type = mschapv2|' "$raddb/mods-available/eap"
    grep -q '^	default_eap_type = mschapv2' "$raddb/mods-available/eap" || {
        log "FreeRADIUS: no default_eap_type in mods-available/eap"
        return 1
    }
    printf 'client gate64 {\n    ipaddr = 10.77.0.1\n    secret = %s\n}\n' "$EAP_SECRET" \
        >"$raddb/clients.conf"
    users=$(for i in $(seq "$EAP_CLIENTS"); do
        printf '%s Cleartext-Password := "pw-%s"\n' "$(eap_user "$i")" "$(eap_user "$i")"
    done)
    # Truncating writes keep the files' owner and mode (root:freerad 640).
    printf '%s\n%s\n' "$users" "$(cat "$raddb/mods-config/files/authorize")" \
        >"$raddb/mods-config/files/authorize"
    start_bg "$CORP" freeradius freeradius -f -l stdout -d "$raddb"
    wait_for 30 grep -q 'Ready to process requests' "$WORK/freeradius.log" || {
        log "FreeRADIUS did not get ready: $(tail -5 "$WORK/freeradius.log")"
        return 1
    }
}

# eap_clients: one charon per client namespace, with its share of the users, loaded.
eap_clients() {
    local i ns dir u n=0 sub
    for i in $(seq "$EAP_SOURCES"); do
        ns=${EAP_NS[$((i - 1))]}
        dir=$WORK/eap-client$i
        rm -rf "$dir"
        for sub in x509 x509ca private; do mkdir -p "$dir/swanctl/$sub"; done
        cp "$WORK/certs/ca.pem" "$dir/swanctl/x509ca/ca.pem"
        # MSCHAPv2 needs MD4, which OpenSSL 3 keeps in its legacy provider.
        strongswan_conf "$dir" "$PLUGINS md5 eap-identity eap-mschapv2" "  reuse_ikesa = no" \
            "    openssl {
      load_legacy = yes
    }"
        : >"$dir/conns"
        {
            echo "connections {"
            for u in $(seq "$i" "$EAP_SOURCES" "$EAP_CLIENTS"); do
                u=$(eap_user "$u")
                echo "$u" >>"$dir/conns"
                cat <<EOF
  $u {
    version = 2
    remote_addrs = $NATIVE_ADDR
    vips = ::
    proposals = $IKE_PROPOSALS
    fragmentation = yes
    local {
      auth = eap-mschapv2
      eap_id = $u
    }
    remote {
      auth = pubkey
      id = %any
    }
    children {
      $u {
        remote_ts = $INTRANET_TS
        esp_proposals = $ESP
      }
    }
  }
EOF
            done
            echo "}"
            echo "secrets {"
            while read -r u; do
                printf '  eap-%s {\n    id = %s\n    secret = "pw-%s"\n  }\n' "$u" "$u" "$u"
            done <"$dir/conns"
            echo "}"
        } >"$dir/swanctl/swanctl.conf"
        n=$((n + $(wc -l <"$dir/conns")))
        start_charon "$ns" "$dir" "eap-client$i" || return 1
    done
    [ "$n" = "$EAP_CLIENTS" ] || { log "eap: $n connections for $EAP_CLIENTS users"; return 1; }
}

# eap_initiate: every client's connections, EAP_WINDOW at a time per client; writes
# "ok NAME" or "fail NAME" per connection to $WORK/eap-client*/result.
eap_initiate() {
    local i ns dir pids=()
    for i in $(seq "$EAP_SOURCES"); do
        ns=${EAP_NS[$((i - 1))]}
        dir=$WORK/eap-client$i
        ip netns exec "$ns" env STRONGSWAN_CONF="$dir/strongswan.conf" SWANCTL_DIR="$dir/swanctl" \
            xargs -P "$EAP_WINDOW" -I{} sh -c \
            'if timeout 60 swanctl --initiate --ike "$1" --child "$1" --timeout 30 --loglevel 0 \
                 >/dev/null 2>&1; then echo "ok $1"; else echo "fail $1"; fi' _ {} \
            <"$dir/conns" >"$dir/result" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
}

# eap_run SETUP RUN: one timed run against the responder already up in tsrv.
eap_run() {
    local setup=$1 run=$2 t0 t1 r0 r1 d0 d1 m0 m1 c0 c1 est fail secs ns
    sleep 1
    c0=0
    for ns in "${EAP_NS[@]}"; do c0=$((c0 + $(proc_ticks "$ns"))); done
    r0=$(ns_ticks "$SRV")
    d0=$(proc_ticks "$CORP")
    m0=$(machine_ticks)
    t0=$(date +%s.%N)
    eap_initiate
    t1=$(date +%s.%N)
    m1=$(machine_ticks)
    d1=$(proc_ticks "$CORP")
    r1=$(ns_ticks "$SRV")
    c1=0
    for ns in "${EAP_NS[@]}"; do c1=$((c1 + $(proc_ticks "$ns"))); done
    est=$(cat "$WORK"/eap-client*/result | grep -c '^ok ' || true)
    fail=$(cat "$WORK"/eap-client*/result | grep -c -v '^ok ' || true)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
    log "  $setup run $run: $est set-ups ($fail failed) in $secs s, responder $(secs $((r1 - r0))) s," \
        "FreeRADIUS $(secs $((d1 - d0))) s, client charons $(secs $((c1 - c0))) s, machine" \
        "$(secs $((m1 - m0))) s CPU"
    case $setup in
    eap-gate64)
        local m
        m=$(ip netns exec "$SRV" curl -s --max-time 10 http://127.0.0.1:9164/metrics || true)
        log "  $setup: $(printf '%s\n' "$m" | awk '/^gate64_ipsec_(mm|qm)sa / {printf "%s=%s ", $1, $2}')" \
            "refused/shed: $(printf '%s\n' "$m" | awk '/^gate64_ike_(refused|shed)_total/ && $2 > 0 {printf "%s=%s ", $1, $2}')"
        ;;
    *)
        local st
        st=$(swan "$SRV" "$WORK/responder" --list-sas --raw 2>/dev/null || true)
        log "  $setup: IKE SAs $(printf '%s' "$st" | grep -o 'state=ESTABLISHED' | wc -l)," \
            "child SAs $(printf '%s' "$st" | grep -o 'state=INSTALLED' | wc -l)"
        ;;
    esac
    if [ "$fail" -gt 0 ]; then
        grep -h -v '^ok ' "$WORK"/eap-client*/result | head -3 >&2
        run_failed "$setup run $run: $fail of $EAP_CLIENTS set-ups failed"
        return 0
    fi
    EAP_RUNS+=("$setup $run $est $fail $secs $((r1 - r0)) $((d1 - d0)) $((m1 - m0))")
}

eap_stop() { # the clients and the responder; FreeRADIUS stays
    local ns
    for ns in "${EAP_NS[@]}" "$SRV"; do kill_ns_procs "$ns"; done
}

eap_gate64() { # eap_gate64 RUN
    local pool=$POOL6
    POOL6=$IKE_POOL6 GATE64_LISTEN=$NATIVE_ADDR GATE64_IPSEC_TABLES="[[ipsec.eap_radius]]
server = \"$EAP_RADIUS:1812\"
secret_file = \"$WORK/eap-radius.secret\"" start_gate64 ||
        { POOL6=$pool; log "gate64 did not start"; tail -n 30 "$WORK/gate64.log" >&2; return 1; }
    POOL6=$pool
    eap_clients || return 1
    eap_run eap-gate64 "$1" || return 1
    [ "$1" != "$RUNS" ] || print_sockbufs eap-gate64 "$SRV"
    eap_stop
}

eap_strongswan() { # eap_strongswan RUN
    local pool=$POOL6 plugins=$PLUGINS
    POOL6=$IKE_POOL6 RESP_ADDR=$NATIVE_ADDR PLUGINS="$PLUGINS eap-identity eap-radius" \
        CHARON_PLUGIN_CONF="    eap-radius {
      servers {
        s1 {
          address = $EAP_RADIUS
          auth_port = 1812
          secret = $EAP_SECRET
          sockets = $EAP_RADIUS_SOCKETS
        }
      }
    }" charon_dir "$WORK/responder" responder "$WORK/certs/responder.pem" "$WORK/certs/responder.key"
    POOL6=$pool
    PLUGINS=$plugins
    # The clients' connection: EAP relayed to RADIUS (charon asks the EAP identity itself).
    awk 'BEGIN {r = 0} /^    remote {/ {r = 1} r && /auth = pubkey/ {sub(/pubkey/, "eap-radius"); print; print "      eap_id = %any"; r = 0; next} {print}' \
        "$WORK/responder/swanctl/swanctl.conf" >"$WORK/responder/swanctl/swanctl.conf.eap"
    mv "$WORK/responder/swanctl/swanctl.conf.eap" "$WORK/responder/swanctl/swanctl.conf"
    # kernel-libipsec refuses a child SA whose local selector holds no address of the host
    # (as in run_native_strongswan): one in the intranet /64.
    ip -n "$SRV" addr replace fd00:c0::fffe/128 dev lo
    start_charon "$SRV" "$WORK/responder" charon-responder || return 1
    eap_clients || return 1
    eap_run eap-strongswan "$1" ||
        { tail -n 20 "$WORK/responder/charon.log" >&2; return 1; }
    [ "$1" != "$RUNS" ] || print_sockbufs eap-strongswan "$SRV"
    eap_stop
}

run_eap() {
    log "== eap: $EAP_CLIENTS EAP-MSCHAPv2 set-ups per run via FreeRADIUS, gate64 and strongSwan alternating"
    eap_lab || return 1
    local run base
    base=$(idle_baseline)
    BASELINES+=("eap $base")
    log "  idle baseline: $base busy cores"
    for run in $(seq "$RUNS"); do
        eap_gate64 "$run" || { eap_stop; run_failed "eap-gate64 run $run: setup failed"; }
        eap_strongswan "$run" || { eap_stop; run_failed "eap-strongswan run $run: setup failed"; }
    done
    teardown
}

# eap_median SETUP FIELD: the median over SETUP's runs of FIELD: rate (set-ups/s), resp
# (responder CPU s), radius, machine (CPU s), per_resp / per_machine (set-ups per CPU-s).
eap_median() {
    local r setup run est fail secs rt dt mt out=""
    for r in "${EAP_RUNS[@]}"; do
        read -r setup run est fail secs rt dt mt <<<"$r"
        [ "$setup" = "$1" ] || continue
        case $2 in
        rate) out+="$(quotient "$est" "$secs")" ;;
        secs) out+="$secs" ;;
        resp) out+="$(secs "$rt")" ;;
        radius) out+="$(secs "$dt")" ;;
        machine) out+="$(secs "$mt")" ;;
        per_resp) out+="$(quotient "$est" "$(secs "$rt")")" ;;
        per_machine) out+="$(quotient "$est" "$(secs "$mt")")" ;;
        esac
        out+=$'\n'
    done
    median_of "$out"
}

print_eap_results() {
    [[ " $SETUPS " == *" eap "* ]] || return 0
    local s ok r
    printf '\nEAP-MSCHAPv2 via FreeRADIUS: %s set-ups per run (IKE SA + child SA), %s client sources x %s in flight, key exchange %s, server certificate %s; median of the runs that succeeded\n' \
        "$EAP_CLIENTS" "$EAP_SOURCES" "$EAP_WINDOW" "$IKE_GROUP" "$IKE_CERT"
    fmt='%-15s %8s %8s %10s %11s %14s %13s %13s %17s\n'
    printf "$fmt" responder runs secs set-ups/s "resp CPU s" set-ups/resp-s "radius CPU s" "machine CPU s" set-ups/machine-s
    for s in eap-gate64 eap-strongswan; do
        ok=0
        for r in "${EAP_RUNS[@]}"; do [ "${r%% *}" = "$s" ] && ok=$((ok + 1)); done
        printf "$fmt" "$s" "$(runs_cell "$ok")" "$(eap_median "$s" secs)" "$(fixed 1 "$(eap_median "$s" rate)")" \
            "$(eap_median "$s" resp)" "$(fixed 1 "$(eap_median "$s" per_resp)")" "$(eap_median "$s" radius)" \
            "$(eap_median "$s" machine)" "$(fixed 1 "$(eap_median "$s" per_machine)")"
    done
    printf 'gate64/strongSwan: per wall second %s, per responder CPU-second %s, per machine CPU-second %s\n' \
        "$(ratio "$(eap_median eap-gate64 rate)" "$(eap_median eap-strongswan rate)")" \
        "$(ratio "$(eap_median eap-gate64 per_resp)" "$(eap_median eap-strongswan per_resp)")" \
        "$(ratio "$(eap_median eap-gate64 per_machine)" "$(eap_median eap-strongswan per_machine)")"
    printf '(resp CPU s = user + system time of tsrv, the responder alone, with its NAPI threads;\n radius CPU s = FreeRADIUS; machine CPU s = /proc/stat busy time, clients and swanctl included;\n the ratios are of the medians of per-run figures.)\n'
}

# ---------------------------------------------------------------- main

if [[ " $SETUPS " == *" gate64 "* || " $SETUPS " == *" ike-"* || " $SETUPS " == *" native-gate64 "* ||
    " $SETUPS " == *" eap "* || $CLIENT == gate64 ]]; then
    build_gate64
    IKE_LOAD_BIN=$(realpath "${IKE_LOAD_BIN:-$(dirname "$GATE64_BIN")/ike-load}")
fi

GATE64_MEASURED=""
for s in $SETUPS; do
    case $s in
    strongswan) run_strongswan || run_failed "strongswan: setup failed" ;;
    gate64) run_gate64 || run_failed "gate64: setup failed" ;;
    ike-gate64) run_ike_gate64 || run_failed "ike-gate64: failed" ;;
    ike-strongswan) run_ike_strongswan || run_failed "ike-strongswan: failed" ;;
    native-gate64) run_native_gate64 || run_failed "native-gate64: setup failed" ;;
    native-strongswan) run_native_strongswan || run_failed "native-strongswan: setup failed" ;;
    eap) run_eap || run_failed "eap: setup failed" ;;
    *) run_failed "unknown setup $s" ;;
    esac
done

printf '\nESP (%s), iperf3 TCP to %s through the intranet tunnel, %s s per run, median of the runs that succeeded:\n' \
    "$ESP" "$INTRANET_HOST" "$DURATION"
printf ' strongswan, gate64 over Teredo (MSS %s, client %s); native-* from behind a NAT to 192.0.2.10 (MSS %s; 0 = the path)\n' \
    "$MSS" "$CLIENT" "$NATIVE_MSS"
fmt='%-17s %5s %8s %9s %9s %7s %11s %11s %14s %11s %8s %15s\n'
printf "$fmt" responder dir runs "Mbit/s" "CPU s" cores "Mbit/CPU-s" "lab CPU s" "Mbit/lab-CPU-s" \
    "resp CPU s" "NAPI s" "Mbit/resp-CPU-s"
for r in "${RESULTS[@]}"; do
    read -r setup dir ok mbps cpu eff lab leff resp napi reff <<<"$r"
    cores=$(fixed 2 "$(quotient "$cpu" "$DURATION")")
    printf "$fmt" "$setup" "$dir" "$(runs_cell "$ok")" "$mbps" "$cpu" "$cores" "$(fixed 1 "$eff")" \
        "$lab" "$(fixed 1 "$leff")" "$resp" "$napi" "$(fixed 1 "$reff")"
done

# The acceptance figure: gate64's Mbit/s per CPU-second over strongSwan's, per direction, by
# whole-machine CPU (the measure the aim is stated in), by the lab's processes, and by the
# responder side alone (the client, charon + miredo or gate64's per CLIENT, is the same in
# both setups; charon + miredo is what saturates a 2-core machine, and the whole-machine ratio
# is bounded by it). Each efficiency is the median of the per-run figures.
efficiency_of() { # efficiency_of SETUP DIR FIELD(cpu|lab|resp)
    local r setup dir ok mbps cpu eff lab leff resp napi reff
    for r in "${RESULTS[@]}"; do
        read -r setup dir ok mbps cpu eff lab leff resp napi reff <<<"$r"
        [ "$setup" = "$1" ] && [ "$dir" = "$2" ] || continue
        case $3 in
        cpu) echo "$eff" ;;
        lab) echo "$leff" ;;
        resp) echo "$reff" ;;
        esac
        return
    done
}
# Per pair of setups measured: Teredo (gate64 / strongswan), native (native-gate64 /
# native-strongswan).
for pair in "gate64 strongswan Teredo" "native-gate64 native-strongswan native"; do
    read -r g s kind <<<"$pair"
    [[ " $SETUPS " == *" $g "* && " $SETUPS " == *" $s "* ]] || continue
    printf '\n%s: %5s %26s %26s %26s\n' "$kind" dir "gate64/strongSwan (whole)" \
        "gate64/strongSwan (lab)" "gate64/strongSwan (resp)"
    for dir in $DIRS; do
        printf '%s: %5s %26s %26s %26s\n' "$kind" "$dir" \
            "$(ratio "$(efficiency_of "$g" "$dir" cpu)" "$(efficiency_of "$s" "$dir" cpu)")" \
            "$(ratio "$(efficiency_of "$g" "$dir" lab)" "$(efficiency_of "$s" "$dir" lab)")" \
            "$(ratio "$(efficiency_of "$g" "$dir" resp)" "$(efficiency_of "$s" "$dir" resp)")"
    done
done
for b in "${BASELINES[@]}"; do
    read -r setup base <<<"$b"
    if awk -v b="$base" 'BEGIN {exit !(b > 0.2)}'; then
        printf 'WARNING: %s: the machine was busy before the runs (%s busy cores with the lab idle):\n' \
            "$setup" "$base"
        if [ "$setup" = eap ]; then
            printf '  machine CPU s includes that other work; compare the resp CPU s column.\n'
        else
            printf '  whole-machine CPU includes that other work; compare the lab CPU columns.\n'
        fi
    fi
done
if [[ " $SETUPS " == *" gate64 "* ]] && [ -z "$GATE64_MEASURED" ]; then
    printf '%-11s %s\n' gate64 "gate64: not yet measured"
fi
printf '%s\n' "(CPU s = whole-machine busy time from /proc/stat during the run, every process and the" \
    " kernel alike; cores = CPU s / run time; Mbit/CPU-s = Mbit/s x run time / CPU s, i.e. Mbit/s" \
    " per busy core, taken per run, the median shown; lab CPU s = user + system time of every" \
    " process in the lab's namespaces with the NAPI threads of their devices; resp CPU s = the" \
    " responder side alone: tsrv and the charon responder in tcorp, with the NAPI threads of" \
    " their devices (gate64's TUN), shown apart as NAPI s; for native-* tsrv holds either" \
    " responder.)"
print_ike_results
print_eap_results
print_sockbuf_table
exit_status
