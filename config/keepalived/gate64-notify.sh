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
# Modes (-m), and what each VRRP state does:
#   hot  (default) gate64 runs on both nodes. MASTER: `gate64 ha promote` (or SIGUSR1) to a
#        running gate64, so that a gate64 with [ha] installs the IPsec SAs its peer synced;
#        else start it. BACKUP: start it unless it runs. A backup's sockets are bound to
#        addresses it does not hold yet, so the node needs net.ipv4.ip_nonlocal_bind=1 and
#        net.ipv6.ip_nonlocal_bind=1 (GRE binds with IP_FREEBIND itself); promotion is then
#        only the address move.
#   cold gate64 runs on the master only. MASTER: start it unless it runs. BACKUP: stop it.
#        Failover then includes gate64's start-up (TUN devices, routes, sockets).
#   Either mode, FAULT and STOP: stop gate64, even when the options are wrong (a node in
#   FAULT must not keep serving). Any other state: logged, nothing changed.
# Teredo peers, NAT64 bindings and IP-HTTPS connections are rebuilt by the clients on the new
# master; IPsec SAs too, unless both nodes have [ha] and run hot (docs/scale-out.md).
#
# Options: -b gate64 binary (default: gate64 in PATH), -c config (/etc/gate64/gate64.toml),
#          -p pid file (/run/gate64-ha.pid), -l log file (/var/log/gate64-ha.log), -m mode.
# Exit status: 0 done (or nothing to do); 1 gate64 was to start but did not (the config file
# is unreadable, or gate64 exited within its first second: a bad config, see the log); 2 an
# unknown option or mode in MASTER or BACKUP, where the script cannot tell what is meant and
# changes nothing. Every outcome, errors included, is a line in the log file and errors also
# go to stderr (keepalived does not show the status: read the log).
# Under systemd, replace start/stop with `systemctl start|stop gate64` (keep -p unused).
set -u

bin=gate64
config=/etc/gate64/gate64.toml
pidfile=/run/gate64-ha.pid
log=/var/log/gate64-ha.log
mode=hot
usage="usage: $0 [-b bin] [-c config] [-p pidfile] [-l log] [-m hot|cold] TYPE NAME STATE [PRIORITY]"
bad=
while getopts b:c:p:l:m: opt; do
    case $opt in
    b) bin=$OPTARG ;;
    c) config=$OPTARG ;;
    p) pidfile=$OPTARG ;;
    l) log=$OPTARG ;;
    m) mode=$OPTARG ;;
    *) bad="unknown option" ;;
    esac
done
shift $((OPTIND - 1))
state=${3:-}
case $mode in
hot | cold) ;;
*) bad=${bad:-"unknown mode '$mode' (hot or cold)"} ;;
esac

note() {
    echo "$(date '+%F %T') gate64-notify: $state: $*" >>"$log"
}

# An error: logged and on stderr; the script then exits with status $1.
fail() {
    status=$1
    shift
    note "$*"
    echo "gate64-notify: $state: $*" >&2
    exit "$status"
}

running() {
    [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

start() {
    running && return 0
    [ -r "$config" ] || fail 1 "cannot read $config: gate64 not started"
    # setsid: gate64 must outlive this script and keepalived's process group.
    setsid "$bin" serve --config "$config" >>"$log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$pidfile"
    # A config gate64 refuses ends it within its first second: say so here, where the
    # operator looks, rather than leave a pid file of a process that is gone.
    i=0
    while [ $i -lt 10 ]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$pidfile"
            fail 1 "gate64 (pid $pid) exited during start-up: its errors are above in $log"
        fi
        sleep 0.1
        i=$((i + 1))
    done
    note "started gate64 (pid $pid)"
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
    note "stopped gate64 (pid $pid)"
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
        note "gate64 ha promote: $out"
        return 0
    fi
    note "gate64 ha promote failed: $out"
    case $out in
    *"no [ha] section"* | *"not installed"*) return 0 ;;
    esac
    kill -USR1 "$(cat "$pidfile")"
    note "sent SIGUSR1 to take over synced SAs"
}

case $state in
FAULT | STOP) stop ;;
MASTER | BACKUP)
    [ -z "$bad" ] || fail 2 "$bad: nothing changed; $usage"
    case "$mode:$state" in
    hot:MASTER) if running; then promote; else start; fi ;;
    cold:MASTER | hot:BACKUP) start ;;
    cold:BACKUP) stop ;;
    esac
    ;;
*) note "mode $mode, state '$state' is none of MASTER, BACKUP, FAULT, STOP: nothing to do" ;;
esac
exit 0
