//! Edge hardening of the NAT64 and of gate64 itself, end to end:
//!
//! - `netns_nat64_client_limit_leaves_others_bindings_without_ipsec`: one Miredo client opens UDP flows to
//!   the IPv4-only host until its `nat64.max_ports_per_client`; beyond it nothing reaches the
//!   host, it hears ICMPv6 errors and the drops are counted (RFC 6888 REQ-3/4), while a second
//!   Miredo client (in `tatk`) still gets new NAT64 bindings.
//! - `netns_to_self_only_echo_and_dns64_without_ipsec`: through its tunnel a client pings gate64 and uses its
//!   DNS64, but reaches no other port on gate64's addresses: neither a wildcard TCP listener
//!   on the gate64 host (as a metrics endpoint on `[::]` would be) at its corporate address
//!   or at Pref64 + its Teredo server address, nor the metrics endpoint on 127.0.0.1 via
//!   Pref64.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::net::{Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use gate64_testkit::{
    ATTACKER_V4, CORP_HOST_V4, Gate64Options, Netns, Process, SERVER_V4, TEREDO_PREFIX, Topology,
    find_tool, wait_for,
};

use crate::common::{gate64_lines, netns_test};
use crate::nat64::{GATE_DNS, PREF64, SYNTH, nat64_dns64_toml, start_corp_dns};
use crate::teredo::qualify;

/// The UDP port the IPv4-only host counts flows on.
const SINK_PORT: u16 = 7000;
/// Ports (BIB entries) per client per protocol in the fairness lab.
const PORT_LIMIT: usize = 12;
/// Flows the greedy client tries: well past its limit.
const GREEDY_FLOWS: usize = 30;
/// Flows the second client opens once the first is at its limit.
const OTHER_FLOWS: usize = 6;
/// Generous: flows through two Teredo clients on two shared, busy cores.
const DEADLINE: Duration = Duration::from_secs(40);

#[test]
#[ignore = "netns: needs root"]
fn netns_nat64_client_limit_leaves_others_bindings_without_ipsec() {
    netns_test(
        "netns_nat64_client_limit_leaves_others_bindings_without_ipsec",
        Topology::builder().corp_ipv4(true).attacker(true),
        client_limit,
    );
}

fn client_limit(topo: &Topology) -> Result<()> {
    let extra = format!(
        "[nat64]\nprefix = \"{PREF64}\"\npool4 = [\"198.19.64.0/28\"]\n\
         max_ports_per_client = {PORT_LIMIT}\nmax_sessions_per_client = 64\n"
    );
    let mut gate = topo.start_gate64(&Gate64Options {
        extra,
        ..Gate64Options::default()
    })?;
    let (_greedy_client, greedy_addr) = qualify(topo)?;
    let atk = topo.atk()?;
    let (_other_client, other_addr) = second_miredo_client(atk)?;
    println!("greedy client {greedy_addr}, other client {other_addr}");

    let sink = topo
        .corp
        .run_in(|| UdpSocket::bind((CORP_HOST_V4, SINK_PORT)))??;
    sink.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut seen = BTreeSet::new();

    // The greedy client: one UDP socket (one pool4 port) per flow, resent until its limit's
    // worth of flows arrived, then a few more rounds for any that should not.
    let greedy = flows_in(&topo.cli, GREEDY_FLOWS)?;
    let mut refused = 0usize;
    let reached = wait_for(DEADLINE, || {
        refused += send_round(&greedy, 'g');
        drain(&sink, &mut seen);
        let n = seen.iter().filter(|t| t.starts_with('g')).count();
        (n >= PORT_LIMIT).then_some(n)
    });
    ensure!(
        reached.is_some(),
        "only {seen:?} of the greedy client's flows reached the IPv4 host within {DEADLINE:?} \
         (limit {PORT_LIMIT})\n{}",
        gate64_lines(&topo.metrics()?)
    );
    for _ in 0..5 {
        refused += send_round(&greedy, 'g');
        drain(&sink, &mut seen);
    }
    let greedy_seen = seen.iter().filter(|t| t.starts_with('g')).count();
    ensure!(
        greedy_seen == PORT_LIMIT,
        "{greedy_seen} of the greedy client's {GREEDY_FLOWS} flows reached the host; \
         nat64.max_ports_per_client = {PORT_LIMIT}: {seen:?}"
    );

    // A second client still gets new bindings while the first sits at its limit.
    let other = flows_in(atk, OTHER_FLOWS)?;
    let all_other = wait_for(DEADLINE, || {
        send_round(&other, 'o');
        drain(&sink, &mut seen);
        (seen.iter().filter(|t| t.starts_with('o')).count() == OTHER_FLOWS).then_some(())
    });
    ensure!(
        all_other.is_some(),
        "the second client's flows did not all reach the IPv4 host within {DEADLINE:?} while \
         the first was at its limit: {seen:?}\n{}",
        gate64_lines(&topo.metrics()?)
    );

    let m = topo.metrics()?;
    let drops = m.sum(
        "gate64_drops_total",
        &[("reason", "nat64_client_port_limit")],
    );
    ensure!(
        drops >= 1.0,
        "no drops counted as nat64_client_port_limit\n{}",
        gate64_lines(&m)
    );
    // The refusals come back as ICMPv6 Destination Unreachable (rate-limited), which the
    // connected sockets report as errors; the IPv4 host's port is open, so nothing else does.
    ensure!(
        refused >= 1,
        "the greedy client's sockets saw no ICMPv6 error for {drops} refused packets"
    );
    println!(
        "greedy: {greedy_seen} flows reached the host, {drops} packets refused, {refused} \
         socket errors; other client: {OTHER_FLOWS} flows reached the host"
    );
    gate.ensure_running()
}

/// Starts a second Miredo Teredo client in `ns` (the attacker namespace: 203.0.113.20) and
/// waits for its Teredo address and default route.
fn second_miredo_client(ns: &Netns) -> Result<(Process, Ipv6Addr)> {
    let bin = find_tool("miredo").context("`miredo` not found: apt-get install miredo")?;
    let conf = ns.write_file(
        "miredo-client.conf",
        &format!(
            "RelayType client\nInterfaceName teredo\nServerAddress {SERVER_V4}\n\
             BindAddress {ATTACKER_V4}\nBindPort 3546\n"
        ),
    )?;
    let pid = ns.dir().join("miredo-client.pid");
    let mut argv = vec![path(&bin)?, "-f", "-c", path(&conf)?, "-p", path(&pid)?];
    // As the lab's first client: Miredo drops to its own user, or to nobody without one.
    let has_user = std::fs::read_to_string("/etc/passwd")
        .is_ok_and(|p| p.lines().any(|l| l.starts_with("miredo:")));
    if !has_user {
        argv.extend(["-u", "nobody"]);
    }
    let mut client = ns.spawn("miredo-client2", &argv)?;
    let prefix = TEREDO_PREFIX.segments();
    let addr = wait_for(Duration::from_secs(20), || {
        let routed = ns
            .ip(&["-6", "route", "show", "default"])
            .is_ok_and(|r| r.contains("dev teredo"));
        let out = ns.ip(&["-6", "-o", "addr", "show", "dev", "teredo"]).ok()?;
        let addr = out
            .split_whitespace()
            .filter_map(|w| w.split('/').next()?.parse::<Ipv6Addr>().ok())
            .find(|a| a.segments()[..4] == prefix[..4]);
        addr.filter(|_| routed)
    });
    match addr {
        Some(a) => Ok((client, a)),
        None => {
            client.ensure_running()?;
            bail!(
                "the second Miredo client did not qualify:\n{}",
                client.log()
            )
        }
    }
}

fn path(p: &std::path::Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("non-UTF-8 path {}", p.display()))
}

/// `n` UDP sockets in `ns`, each connected to the IPv4-only host through Pref64.
fn flows_in(ns: &Netns, n: usize) -> Result<Vec<UdpSocket>> {
    ns.run_in(move || -> Result<Vec<UdpSocket>> {
        (0..n)
            .map(|_| {
                let s = UdpSocket::bind("[::]:0")?;
                s.connect(SocketAddr::from((SYNTH, SINK_PORT)))?;
                s.set_nonblocking(true)?;
                Ok(s)
            })
            .collect()
    })?
}

/// Sends each flow's tag (`g3`, `o1`...) once and returns how many sockets reported an
/// error: an ICMPv6 error that came back for an earlier datagram.
fn send_round(flows: &[UdpSocket], tag: char) -> usize {
    let mut errors = 0;
    for (i, s) in flows.iter().enumerate() {
        let mut buf = [0u8; 64];
        match s.recv(&mut buf) {
            Err(e) if e.kind() != ErrorKind::WouldBlock => errors += 1,
            _ => {}
        }
        // A send may also fail with the pending error; the datagram is then resent next
        // round.
        if s.send(format!("{tag}{i}").as_bytes()).is_err() {
            errors += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    errors
}

/// Reads every datagram waiting at the IPv4 host into `seen`.
fn drain(sink: &UdpSocket, seen: &mut BTreeSet<String>) {
    let mut buf = [0u8; 64];
    while let Ok((n, _)) = sink.recv_from(&mut buf) {
        seen.insert(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
}

#[test]
#[ignore = "netns: needs root"]
fn netns_to_self_only_echo_and_dns64_without_ipsec() {
    netns_test(
        "netns_to_self_only_echo_and_dns64_without_ipsec",
        Topology::builder().corp_ipv4(true),
        to_self,
    );
}

/// A port no gate64 service uses, for the wildcard listener on the gate64 host.
const HOST_PORT: u16 = 9165;

fn to_self(topo: &Topology) -> Result<()> {
    let _unbound = start_corp_dns(topo)?;
    let binding_log = topo.srv.dir().join("bindings.jsonl");
    let mut gate = topo.start_gate64(&Gate64Options {
        extra: nat64_dns64_toml(&binding_log),
        ..Gate64Options::default()
    })?;
    let gate_address: Ipv6Addr = GATE_DNS.parse()?;
    // Anything on the host listening on a wildcard address, as `metrics.listen = "[::]:…"`
    // would: reachable on the host itself, so only the to-self rule keeps clients off it.
    let listener = topo.srv.run_in(|| TcpListener::bind(("::", HOST_PORT)))??;
    listener.set_nonblocking(true)?;
    let local = topo.srv.run_in(move || {
        TcpStream::connect_timeout(&(gate_address, HOST_PORT).into(), Duration::from_secs(5))
    })?;
    local.with_context(|| format!("the control: [{gate_address}]:{HOST_PORT} from tsrv"))?;
    let accepted = wait_for(Duration::from_secs(5), || listener.accept().ok());
    ensure!(
        accepted.is_some(),
        "the listener accepted nothing from tsrv"
    );

    let (_client, _addr) = qualify(topo)?;
    topo.ping6_all(&topo.cli, gate_address, 3)
        .context("ping6 gate64's corporate address through the tunnel")?;
    crate::nat64::expect_synthesized(&topo.cli, "through the tunnel")?;

    let pref64 = |v4: [u8; 4]| {
        let [a, b, c, d] = v4;
        Ipv6Addr::new(
            0x2001,
            0xdb8,
            0x64,
            0,
            0,
            0,
            u16::from_be_bytes([a, b]),
            u16::from_be_bytes([c, d]),
        )
    };
    let targets = [
        (
            "the host listener at gate64's corporate address",
            gate_address,
            HOST_PORT,
        ),
        (
            "the host listener at Pref64 + the Teredo server address",
            pref64(SERVER_V4.octets()),
            HOST_PORT,
        ),
        (
            "the metrics endpoint at Pref64 + 127.0.0.1",
            pref64([127, 0, 0, 1]),
            9164,
        ),
    ];
    for (what, addr, port) in targets {
        let r = topo.cli.run_in(move || {
            TcpStream::connect_timeout(&(addr, port).into(), Duration::from_secs(4))
        })?;
        ensure!(
            r.is_err(),
            "a client reached {what} ([{addr}]:{port}) through its tunnel"
        );
    }
    ensure!(
        matches!(listener.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock),
        "the host listener accepted a connection from a client"
    );

    let m = topo.metrics()?;
    let to_self = m.sum("gate64_drops_total", &[("reason", "to_self")]);
    let bad = m.sum("gate64_drops_total", &[("reason", "nat64_bad_address")]);
    ensure!(
        to_self >= 2.0 && bad >= 1.0,
        "expected to_self (2 targets) and nat64_bad_address drops, got {to_self} and {bad}\n{}",
        gate64_lines(&m)
    );
    println!("to_self drops: {to_self}, nat64_bad_address drops: {bad}; echo and DNS64 worked");
    gate.ensure_running()
}
