#!/bin/sh
# keepalived notify script for an active/passive gate64 pair (docs/scale-out.md).
#
# keepalived moves the service addresses (GRE local address, Teredo server addresses, the
# IP-HTTPS address, the inside gateway address); this script starts, keeps or stops gate64
# to match the node's VRRP state. In keepalived.conf:
#
#   vrrp_instance gate64 {
#       ...
#       notify "/usr/local/lib/gate64/gate64-notify.sh -m hot -c /etc/gate64/gate64.toml"
#   }
#
# keepalived appends TYPE NAME STATE PRIORITY (e.g. `INSTANCE gate64 MASTER 150`).
#
# Modes (-m):
#   hot  (default) gate64 runs on both nodes: MASTER and BACKUP make sure it runs, FAULT and
#        STOP stop it. A backup's sockets are bound to addresses it does not hold yet, so the
#        node needs net.ipv4.ip_nonlocal_bind=1 and net.ipv6.ip_nonlocal_bind=1 (GRE binds
#        with IP_FREEBIND itself); promotion is then only the address move, no start-up,
#        plus `gate64 ha promote` (or SIGUSR1) so that a gate64 with [ha] installs the IPsec
#        SAs its peer synced.
#   cold gate64 runs on the master only: MASTER starts it, every other state stops it.
#        Failover then includes gate64's start-up (TUN devices, routes, sockets).
# Teredo peers, NAT64 bindings and IP-HTTPS connections are rebuilt by the clients on the new
# master; IPsec SAs too, unless both nodes have [ha] and run hot (docs/scale-out.md).
#
# Options: -b gate64 binary (default: gate64 in PATH), -c config (/etc/gate64/gate64.toml),
#          -p pid file (/run/gate64-ha.pid), -l log file (/var/log/gate64-ha.log), -m mode.
# Under systemd, replace start/stop with `systemctl start|stop gate64` (keep -p unused).
set -u

bin=gate64
config=/etc/gate64/gate64.toml
pidfile=/run/gate64-ha.pid
log=/var/log/gate64-ha.log
mode=hot
while getopts b:c:p:l:m: opt; do
    case $opt in
    b) bin=$OPTARG ;;
    c) config=$OPTARG ;;
    p) pidfile=$OPTARG ;;
    l) log=$OPTARG ;;
    m) mode=$OPTARG ;;
    *) echo "usage: $0 [-b bin] [-c config] [-p pidfile] [-l log] [-m hot|cold] TYPE NAME STATE [PRIORITY]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
state=${3:-}

running() {
    [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

start() {
    running && return 0
    # setsid: gate64 must outlive this script and keepalived's process group.
    setsid "$bin" serve --config "$config" >>"$log" 2>&1 </dev/null &
    echo $! >"$pidfile"
    echo "$(date '+%F %T') gate64-notify: $state: started gate64 (pid $!)" >>"$log"
}

stop() {
    running || return 0
    pid=$(cat "$pidfile")
    kill -TERM "$pid"
    # gate64 drains for its shutdown grace; give it 5 s, then make sure.
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    kill -KILL "$pid" 2>/dev/null
    rm -f "$pidfile"
    echo "$(date '+%F %T') gate64-notify: $state: stopped gate64 (pid $pid)" >>"$log"
}

# MASTER over a gate64 that already runs (hot mode): `gate64 ha promote` makes it take over
# the IPsec SAs its peer synced (`[ha]`, docs/scale-out.md, "State synchronisation") and
# prints what it installed, into the log. A gate64 without that command (an older release)
# is sent SIGUSR1 instead, which does the same without an answer; one without `[ha]` has
# nothing to take over (logged). Never sent to a gate64 this script has just started: before
# its handler is installed the signal would end the process.
promote() {
    # --pid: only the gate64 this script started may answer (nodes sharing a file system may
    # share the default control socket).
    if out=$("$bin" ha promote --config "$config" --pid "$(cat "$pidfile")" 2>&1); then
        echo "$(date '+%F %T') gate64-notify: $state: gate64 ha promote: $out" >>"$log"
        return 0
    fi
    echo "$(date '+%F %T') gate64-notify: $state: gate64 ha promote failed: $out" >>"$log"
    case $out in
    *"no [ha] section"* | *"not installed"*) return 0 ;;
    esac
    kill -USR1 "$(cat "$pidfile")"
    echo "$(date '+%F %T') gate64-notify: $state: sent SIGUSR1 to take over synced SAs" >>"$log"
}

case "$mode:$state" in
hot:MASTER) if running; then promote; else start; fi ;;
cold:MASTER | hot:BACKUP) start ;;
cold:BACKUP | *:FAULT | *:STOP) stop ;;
*) echo "$(date '+%F %T') gate64-notify: mode $mode, state '$state': nothing to do" >>"$log" ;;
esac
exit 0
