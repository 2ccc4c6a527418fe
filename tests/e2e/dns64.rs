//! DNS64 against a real resolver: Debian's Unbound in the corporate namespace is the upstream
//! (a static zone with only an A record for `v4only`, a real AAAA for `dual`, a PTR for the
//! IPv4 host), `gate64 serve` runs the DNS64, and real `dig` asks it over UDP and TCP on an
//! extra listener and on gate64's corporate address (bound with IPV6_FREEBIND on the TUN).
//! Then Unbound is stopped: an uncached query gets SERVFAIL, counted as an error.

use std::net::{IpAddr, Ipv6Addr};

use anyhow::{Context, Result, ensure};
use gate64_testkit::{CORP_HOST, CORP_HOST_V4, Gate64Options, Metrics, Topology};

use crate::common::{gate64_lines, netns_test};

/// Pref64 of the test: a network-specific prefix, since the IPv4 host is private.
const PREF64: &str = "2001:db8:64::/96";
/// 10.20.0.2 inside Pref64.
const SYNTH: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x64, 0, 0, 0, 0x0a14, 0x0002);
/// The extra listener of the test (`dns64.listen`) inside `tsrv`.
const LISTEN: &str = "127.0.0.1";
const LISTEN_PORT: &str = "5353";
/// gate64's corporate address: DNS64 serves there on port 53 (`serve_on_corp_address`).
const CORP_DNS: &str = "2001:db8:100::1";

#[test]
#[ignore = "netns: needs root"]
fn netns_dns64_unbound_upstream_dig_without_ipsec() {
    netns_test(
        "netns_dns64_unbound_upstream_dig_without_ipsec",
        Topology::builder().corp_ipv4(true),
        dns64_with_unbound,
    );
}

fn dns64_with_unbound(topo: &Topology) -> Result<()> {
    let v4 = CORP_HOST_V4.to_string();
    let mut unbound = topo.start_unbound(
        &topo.corp,
        IpAddr::V4(CORP_HOST_V4),
        &[
            &format!("v4only.corp.example. 3600 IN A {v4}"),
            &format!("dual.corp.example. 300 IN A {v4}"),
            &format!("dual.corp.example. 300 IN AAAA {CORP_HOST}"),
            "2.0.20.10.in-addr.arpa. 300 IN PTR v4only.corp.example.",
        ],
    )?;
    let opts = Gate64Options {
        extra: format!(
            "[nat64]\nenabled = false\nprefix = \"{PREF64}\"\n\n\
             [dns64]\nupstream = [\"{v4}\"]\nlisten = [\"{LISTEN}:{LISTEN_PORT}\"]\n\
             timeout_ms = 500\n"
        ),
        ..Gate64Options::default()
    };
    let mut gate = topo.start_gate64(&opts)?;

    // Only an A record upstream: a synthesized AAAA, over UDP and TCP, on both listeners.
    for extra in [&[][..], &["+tcp"][..]] {
        let a = dig(
            topo,
            LISTEN,
            LISTEN_PORT,
            &[&["AAAA", "v4only.corp.example"], extra].concat(),
        )?;
        ensure!(
            a.trim() == SYNTH.to_string(),
            "dig {extra:?} AAAA v4only.corp.example: expected {SYNTH}, got {a:?}"
        );
    }
    let a = dig(topo, CORP_DNS, "53", &["AAAA", "v4only.corp.example"])?;
    ensure!(
        a.trim() == SYNTH.to_string(),
        "on the corporate address: expected {SYNTH}, got {a:?}"
    );
    // The synthetic TTL is min(A TTL 3600, the negative TTL of Unbound's NODATA SOA), and AD
    // is never set.
    let full = dig_full(
        topo,
        &[
            "AAAA",
            "v4only.corp.example",
            "+noall",
            "+answer",
            "+comments",
        ],
    )?;
    ensure!(
        !full.contains(" ad;") && !full.contains(" ad "),
        "AD on a synthetic answer:\n{full}"
    );
    let ttl: u32 = full
        .lines()
        .find(|l| l.contains("\tAAAA\t") || l.contains(" AAAA "))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|t| t.parse().ok())
        .with_context(|| format!("no AAAA record in:\n{full}"))?;
    ensure!(
        ttl <= 600,
        "synthetic TTL {ttl}: must be min(A TTL, SOA negative TTL or 600)"
    );

    // A real AAAA passes unchanged; NXDOMAIN stays NXDOMAIN; the reverse name of the
    // synthetic address is answered from in-addr.arpa with the ip6.arpa owner.
    let native = dig(topo, LISTEN, LISTEN_PORT, &["AAAA", "dual.corp.example"])?;
    ensure!(
        native.trim() == CORP_HOST.to_string(),
        "a real AAAA must pass unchanged: got {native:?}"
    );
    let nx = dig_full(topo, &["AAAA", "nonexistent.corp.example"])?;
    ensure!(nx.contains("status: NXDOMAIN"), "expected NXDOMAIN:\n{nx}");
    let synth = SYNTH.to_string();
    let ptr = dig(topo, LISTEN, LISTEN_PORT, &["-x", &synth])?;
    ensure!(
        ptr.trim() == "v4only.corp.example.",
        "PTR of {SYNTH}: expected v4only.corp.example., got {ptr:?}"
    );
    let ptr_full = dig_full(topo, &["-x", &synth, "+noall", "+answer"])?;
    ensure!(
        ptr_full.contains("ip6.arpa.") && ptr_full.contains("PTR"),
        "the PTR answer must be owned by the ip6.arpa name:\n{ptr_full}"
    );
    let v4only = dig(topo, LISTEN, LISTEN_PORT, &["AAAA", "ipv4only.arpa"])?;
    ensure!(
        v4only.contains("2001:db8:64::c000:aa") && v4only.contains("2001:db8:64::c000:ab"),
        "ipv4only.arpa (RFC 7050): got {v4only:?}"
    );

    // Upstream down: SERVFAIL for a name not in the cache, counted as an error; cached names
    // still answer.
    unbound.stop();
    let down = dig_full(topo, &["AAAA", "new.corp.example"])?;
    ensure!(
        down.contains("status: SERVFAIL"),
        "expected SERVFAIL:\n{down}"
    );
    let cached = dig(topo, LISTEN, LISTEN_PORT, &["AAAA", "v4only.corp.example"])?;
    ensure!(
        cached.trim() == SYNTH.to_string(),
        "cached answer lost: {cached:?}"
    );
    gate.ensure_running()?;

    let m: Metrics = topo.metrics()?;
    let q = |r: &str| m.sum("gate64_dns64_queries_total", &[("result", r)]);
    ensure!(
        q("synthesized") >= 5.0 && q("native") >= 1.0 && q("nxdomain") >= 1.0 && q("error") >= 1.0,
        "DNS64 counters:\n{}",
        gate64_lines(&m)
    );
    ensure!(
        m.sum("gate64_dns64_cache_hits_total", &[]) >= 1.0,
        "no cache hit counted:\n{}",
        gate64_lines(&m)
    );
    Ok(())
}

/// `dig +short @server -p port <args>` from `tsrv` (where gate64 runs).
fn dig(topo: &Topology, server: &str, port: &str, args: &[&str]) -> Result<String> {
    let at = format!("@{server}");
    let mut argv = vec![at.as_str(), "-p", port, "+short", "+tries=1", "+time=3"];
    argv.extend_from_slice(args);
    dig_raw(topo, &argv)
}

/// `dig` with its full output, against the extra listener.
fn dig_full(topo: &Topology, args: &[&str]) -> Result<String> {
    let at = format!("@{LISTEN}");
    let mut argv = vec![at.as_str(), "-p", LISTEN_PORT, "+tries=1", "+time=3"];
    argv.extend_from_slice(args);
    dig_raw(topo, &argv)
}

fn dig_raw(topo: &Topology, args: &[&str]) -> Result<String> {
    crate::common::dig_in(&topo.srv, args)
}
