//! NAT64 and DNS64 end to end: Debian's Miredo Teredo client asks gate64's DNS64 (through its
//! tunnel, at gate64's corporate address) for a name that only has an A record at an Unbound
//! upstream in the corporate namespace, then reaches that IPv4-only host by ping, TCP and UDP
//! (iperf3) through gate64's NAT64; a closed UDP port comes back as ICMPv6 port unreachable.

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_testkit::{CORP_HOST, CORP_HOST_V4, Gate64Options, Topology};

use crate::common::{gate64_lines, netns_test};
use crate::teredo::{promtool_check, qualify};

/// Pref64 of the lab: a network-specific prefix, since the IPv4 host is private (RFC 6052 §3.1).
pub(crate) const PREF64: &str = "2001:db8:64::/96";
/// The IPv4-only host 10.20.0.2 inside Pref64.
pub(crate) const SYNTH: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x64, 0, 0, 0, 0x0a14, 0x0002);
/// gate64's corporate address, where its DNS64 answers clients.
pub(crate) const GATE_DNS: &str = "2001:db8:100::1";
/// The IPv4-only host's name at the upstream resolver (an A record only).
pub(crate) const V4ONLY: &str = "v4only.corp.example";

#[test]
#[ignore = "netns: needs root"]
fn netns_nat64_dns64_miredo_without_ipsec() {
    netns_test(
        "netns_nat64_dns64_miredo_without_ipsec",
        Topology::builder().corp_ipv4(true),
        nat64_dns64,
    );
}

fn nat64_dns64(topo: &Topology) -> Result<()> {
    let binding_log = topo.srv.dir().join("bindings.jsonl");
    let _unbound = start_corp_dns(topo)?;
    let opts = Gate64Options {
        extra: nat64_dns64_toml(&binding_log),
        ..Gate64Options::default()
    };
    let mut gate = topo.start_gate64(&opts)?;
    let _iperf = topo.start_iperf_server()?;
    let (_client, _addr) = qualify(topo)?;

    // DNS64 through the tunnel: only an A record upstream, a synthesized AAAA here.
    expect_synthesized(&topo.cli, "over Teredo")?;
    let native = dig(topo, &["AAAA", "dual.corp.example"])?;
    ensure!(
        native.trim() == CORP_HOST.to_string(),
        "a real AAAA must pass unchanged: got {native:?}"
    );

    // By name, through the client's resolver (gate64's DNS64): ping, TCP and UDP.
    topo.cli.set_resolver(GATE_DNS.parse()?)?;
    topo.ping6_host_all(&topo.cli, V4ONLY, 3)
        .context("ping6 the IPv4-only host by name through NAT64")?;
    for reverse in [false, true] {
        let r = topo
            .iperf3_to(V4ONLY, 2, 1, reverse, None)
            .with_context(|| format!("iperf3 TCP via NAT64 (reverse: {reverse})"))?;
        ensure!(r.received_bytes > 0, "iperf3 TCP moved nothing: {r:?}");
        println!(
            "iperf3 TCP via NAT64 reverse={reverse}: {:.0} Mbit/s",
            r.received_bps / 1e6
        );
    }
    let r = topo
        .iperf3_to(V4ONLY, 2, 1, false, Some("20M"))
        .context("iperf3 UDP via NAT64")?;
    ensure!(r.received_bytes > 0, "iperf3 UDP moved nothing: {r:?}");
    println!(
        "iperf3 UDP via NAT64: {:.1} Mbit/s received",
        r.received_bps / 1e6
    );

    // A closed UDP port on the IPv4 host: its ICMPv4 port unreachable comes back through NAT64
    // as ICMPv6 port unreachable, which dig's connected socket reports as "connection refused".
    let refused = dig_raw(
        topo,
        &[&format!("@{SYNTH}"), "-p", "9", "+tries=1", "+time=3", "x."],
    )?;
    ensure!(
        refused.contains("connection refused"),
        "dig to a closed UDP port on the IPv4 host should see ICMPv6 port unreachable \
         (connection refused); got:\n{refused}"
    );
    gate.ensure_running()?;

    let text = topo.metrics_text()?;
    promtool_check(topo, &text)?;
    let m = gate64_testkit::Metrics::parse(&text);
    for dir in ["v6_to_v4", "v4_to_v6"] {
        let n = m.sum("gate64_nat64_translations_total", &[("direction", dir)]);
        ensure!(n > 0.0, "no NAT64 translations {dir}\n{}", gate64_lines(&m));
    }
    let bibs = m.sum("gate64_nat64_bib_entries", &[]);
    ensure!(bibs > 0.0, "no NAT64 BIB entries\n{}", gate64_lines(&m));
    let synthesized = m.sum("gate64_dns64_queries_total", &[("result", "synthesized")]);
    ensure!(
        synthesized >= 1.0,
        "gate64_dns64_queries_total{{result=\"synthesized\"}} is {synthesized}\n{}",
        gate64_lines(&m)
    );

    // The binding log names both transport addresses of the mappings (RFC 6888 §4); lines
    // are flushed within a second.
    let lines = gate64_testkit::wait_for(Duration::from_secs(5), || {
        std::fs::read_to_string(&binding_log)
            .ok()
            .filter(|t| t.contains("\"proto\":\"tcp\"") && t.contains("\"proto\":\"icmp\""))
    })
    .with_context(|| format!("binding log {} incomplete", binding_log.display()))?;
    ensure!(
        lines.contains("\"event\":\"created\"") && lines.contains("198.19.64."),
        "binding log lacks created mappings from pool4:\n{lines}"
    );
    Ok(())
}

/// `dig +short @<gate64's corporate address> <args>` from the Teredo client.
fn dig(topo: &Topology, args: &[&str]) -> Result<String> {
    let server = format!("@{GATE_DNS}");
    let mut argv = vec![server.as_str(), "+short", "+tries=2", "+time=3"];
    argv.extend_from_slice(args);
    dig_raw(topo, &argv)
}

fn dig_raw(topo: &Topology, args: &[&str]) -> Result<String> {
    crate::common::dig_in(&topo.cli, args)
}

/// From `ns`, gate64's DNS64 (at [`GATE_DNS`]) answers the AAAA query for [`V4ONLY`] with
/// [`SYNTH`]; `path` says which way the query went, for the error.
pub(crate) fn expect_synthesized(ns: &gate64_testkit::Netns, path: &str) -> Result<()> {
    let server = format!("@{GATE_DNS}");
    let answer = crate::common::dig_in(
        ns,
        &[&server, "+short", "+tries=2", "+time=3", "AAAA", V4ONLY],
    )?;
    ensure!(
        answer.trim() == SYNTH.to_string(),
        "dig {server} AAAA {V4ONLY} {path}: expected {SYNTH}, got {answer:?}"
    );
    Ok(())
}

/// Unbound in tcorp (10.20.0.2) with `v4only.corp.example` (A only) and `dual.corp.example`
/// (A and AAAA).
pub(crate) fn start_corp_dns(topo: &Topology) -> Result<gate64_testkit::Process> {
    let v4 = CORP_HOST_V4.to_string();
    topo.start_unbound(
        &topo.corp,
        IpAddr::V4(CORP_HOST_V4),
        &[
            &format!("{V4ONLY}. 300 IN A {v4}"),
            &format!("dual.corp.example. 300 IN A {v4}"),
            &format!("dual.corp.example. 300 IN AAAA {CORP_HOST}"),
        ],
    )
}

/// `[nat64]` (Pref64 2001:db8:64::/96, pool4 198.19.64.0/28, the binding log) and `[dns64]`
/// forwarding to tcorp's Unbound.
pub(crate) fn nat64_dns64_toml(binding_log: &std::path::Path) -> String {
    format!(
        "[nat64]\nprefix = \"{PREF64}\"\npool4 = [\"198.19.64.0/28\"]\n\
         binding_log = \"{}\"\n\n[dns64]\nupstream = [\"{CORP_HOST_V4}\"]\n",
        binding_log.display()
    )
}
