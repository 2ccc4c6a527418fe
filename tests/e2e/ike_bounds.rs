//! gate64's pre-authentication IKE bounds, seen from the network (functional, no flood):
//!
//! - `netns_ike_retransmission_from_a_third_address_gets_nothing`: a client completes
//!   IKE_SA_INIT and IKE_AUTH from one address; a copy of its IKE_AUTH request sent from a
//!   third address gets no answer (the socket there hears nothing for 3 s) and is counted as
//!   `gate64_ike_refused_total{reason="retransmit_elsewhere"}`, while the same copy from the
//!   original address and port gets the cached response, byte for byte. A copy of the
//!   IKE_SA_INIT request from the third address is, by design, a new exchange there (gate64
//!   keys half-open SAs by address and SPIi): it is answered with an IKE SA of its own (another
//!   SPIr), never with the original's cached response, which the original address still gets.
//! - `netns_ike_caps_hold_for_one_identity_and_one_64`: one client certificate used from 8
//!   sources (each its own /64, both tunnels each, without INITIAL_CONTACT and with
//!   `unique_ids = "never"` so that nothing is replaced) gets `max_ike_sas_per_identity` (4)
//!   IKE SAs, the other 12 IKE_AUTH refused as `identity_cap`, and a client with another
//!   certificate still builds both tunnels; 64 addresses of one /64 each sending IKE_SA_INIT
//!   get `max_half_open_per_source` (5) answers, the other 59 refused as `half_open_cap`, and
//!   a client from another /64 still builds both tunnels; 8 Teredo addresses of one NAT
//!   mapping (differing in the flag bits) are held to 5 half-open SAs as well, while 8 of 8
//!   mappings in that same /64 are not held.

use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use gate64_ike::child_sa::TunnelKind;
use gate64_ike::initiator::{Initiator, InitiatorConfig, InitiatorEvent};
use gate64_testkit::{Metrics, Topology};

use crate::common::{gate64_lines, netns_test};
use crate::ike_interop::initiator_config;
use crate::ipsec::{GATE64_ADDRESS6, INITIATE_TIMEOUT, TeredoIpsecLab, route_corp_to_gate64};
use crate::ipsec_flood::{GAUGE_LAG, NEWCOMER, add_newcomer, build_both, newcomer_configs};

/// How long a socket listens for an answer that must not come.
const SILENCE: Duration = Duration::from_secs(3);
/// How long to wait for an answer that must come.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// The RFC 3948 non-ESP marker before IKE messages on port 4500.
const NON_ESP_MARKER: [u8; 4] = [0; 4];

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_retransmission_from_a_third_address_gets_nothing() {
    netns_test(
        "netns_ike_retransmission_from_a_third_address_gets_nothing",
        Topology::builder(),
        retransmission_from_a_third_address,
    );
}

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_caps_hold_for_one_identity_and_one_64() {
    netns_test(
        "netns_ike_caps_hold_for_one_identity_and_one_64",
        Topology::builder(),
        caps_for_one_identity_and_one_64,
    );
}

/// gate64 as the IKE responder (with `keys` in `[ipsec]`), the corporate host routed straight
/// to its IKE endpoint, and [`NEWCOMER`] on the corporate link.
fn lab(topo: &Topology, keys: &str) -> Result<TeredoIpsecLab> {
    let lab = TeredoIpsecLab::start_with(topo, None, keys, Some("info"))?;
    route_corp_to_gate64(topo)?;
    add_newcomer(topo)?;
    Ok(lab)
}

/// Adds `addrs` to the corporate host and routes `prefix` from gate64's host to it.
pub(crate) fn corp_sources(topo: &Topology, prefix: &str, addrs: &[Ipv6Addr]) -> Result<()> {
    for a in addrs {
        topo.corp.addr_add("vsrv", &format!("{a}/128"))?;
    }
    topo.srv
        .ip(&["-6", "route", "replace", prefix, "via", "2001:db8:100:1::2"])
        .map(drop)
}

fn refused(m: &Metrics, reason: &str) -> f64 {
    m.sum("gate64_ike_refused_total", &[("reason", reason)])
}

/// Waits (at most [`GAUGE_LAG`]) until `reason`'s refusals grew by `want` since `before`;
/// returns the metrics and the growth.
fn refusals(topo: &Topology, before: &Metrics, reason: &str, want: f64) -> Result<(Metrics, f64)> {
    let deadline = Instant::now() + GAUGE_LAG;
    loop {
        let m = topo.metrics()?;
        let grew = refused(&m, reason) - refused(before, reason);
        if grew >= want || Instant::now() >= deadline {
            return Ok((m, grew));
        }
        thread::sleep(Duration::from_millis(250));
    }
}

fn send(socket: &UdpSocket, to: SocketAddr, ike: &[u8]) -> Result<()> {
    if to.port() == 4500 {
        socket.send_to(&[&NON_ESP_MARKER[..], ike].concat(), to)?;
    } else {
        socket.send_to(ike, to)?;
    }
    Ok(())
}

/// The next IKE message on `socket` within `timeout` (marker removed), or `None`.
fn receive(socket: &UdpSocket, timeout: Duration) -> Result<Option<Vec<u8>>> {
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; 65_535];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        socket.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                return Ok(Some(match &buf[..n] {
                    [0, 0, 0, 0, ike @ ..] if from.port() == 4500 => ike.to_vec(),
                    ike => ike.to_vec(),
                }));
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

fn spi_r(ike: &[u8]) -> Option<&[u8]> {
    ike.get(8..16)
}

fn retransmission_from_a_third_address(topo: &Topology) -> Result<()> {
    let mut lab = lab(topo, "")?;
    let third = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0x70, 0, 0, 0, 3);
    corp_sources(topo, "2001:db8:100:70::/64", &[third])?;
    let config = initiator_config(&lab.certs, TunnelKind::Intranet, "2001:db8:100::/48")?;
    let server = SocketAddr::new(IpAddr::V6(GATE64_ADDRESS6), 500);
    let before = topo.metrics()?;
    let exchange = move || -> Result<()> {
        let client = UdpSocket::bind(SocketAddr::new(IpAddr::V6(NEWCOMER), 0))?;
        let elsewhere = UdpSocket::bind(SocketAddr::new(IpAddr::V6(third), 0))?;
        let local = client.local_addr()?;
        let mut i = Initiator::new(config, Instant::now(), SystemTime::now(), local, server)?;
        i.start(Instant::now());
        let (_, to, init) = i.poll_transmit().context("no IKE_SA_INIT")?;
        send(&client, to, &init)?;
        let init_response = receive(&client, ANSWER_TIMEOUT)?.context("no IKE_SA_INIT answer")?;
        // IKE_SA_INIT's copy from the third address: a new exchange, never the cached answer.
        send(&elsewhere, to, &init)?;
        if let Some(other) = receive(&elsewhere, SILENCE)? {
            ensure!(
                spi_r(&other) != spi_r(&init_response) && other != init_response,
                "the third address got the original's IKE_SA_INIT response"
            );
            println!("IKE_SA_INIT copy from {third}: answered as a new exchange (another SPIr)");
        } else {
            println!("IKE_SA_INIT copy from {third}: no answer");
        }
        send(&client, to, &init)?;
        let again = receive(&client, ANSWER_TIMEOUT)?.context("no answer to the retransmission")?;
        ensure!(
            again == init_response,
            "the original address's IKE_SA_INIT retransmission got another response"
        );
        i.handle(Instant::now(), &init_response);
        let (_, to, auth) = i.poll_transmit().context("no IKE_AUTH")?;
        send(&client, to, &auth)?;
        let auth_response = receive(&client, ANSWER_TIMEOUT)?.context("no IKE_AUTH answer")?;
        i.handle(Instant::now(), &auth_response);
        match i.poll_event() {
            Some(InitiatorEvent::Established { .. }) => {}
            other => bail!("IKE_AUTH did not establish the IKE SA: {other:?}"),
        }
        // IKE_AUTH's copy from the third address: nothing comes back.
        send(&elsewhere, to, &auth)?;
        if let Some(got) = receive(&elsewhere, SILENCE)? {
            bail!(
                "the third address got {} bytes for its copy of IKE_AUTH",
                got.len()
            );
        }
        // The original address and port still get the cached response.
        send(&client, to, &auth)?;
        let again = receive(&client, ANSWER_TIMEOUT)?.context("no answer to the retransmission")?;
        ensure!(
            again == auth_response,
            "the IKE_AUTH retransmission from the original address got another response"
        );
        println!(
            "IKE_AUTH ({} bytes, answered with {}) from {local}: its copy from {third} got \
             nothing, its retransmission the cached response",
            auth.len(),
            auth_response.len()
        );
        Ok(())
    };
    topo.corp.run_in(exchange)??;
    let (m, elsewhere) = refusals(topo, &before, "retransmit_elsewhere", 1.0)?;
    ensure!(
        elsewhere == 1.0,
        "retransmit_elsewhere grew by {elsewhere}, not 1\n{}",
        gate64_lines(&m)
    );
    lab.gate.ensure_running()
}

/// How one initiator ended.
#[derive(Debug)]
enum Outcome {
    Established,
    Failed(String),
}

/// Runs both `configs` from `local` (one socket each) until each is established or failed;
/// bounded by [`INITIATE_TIMEOUT`].
fn run_pair(
    local: Ipv6Addr,
    configs: [InitiatorConfig; 2],
    initial_contact: bool,
) -> Result<Vec<Outcome>> {
    let server = SocketAddr::new(IpAddr::V6(GATE64_ADDRESS6), 500);
    let mut peers = Vec::new();
    for config in configs {
        let socket = UdpSocket::bind(SocketAddr::new(IpAddr::V6(local), 0))?;
        let at = socket.local_addr()?;
        let mut i = Initiator::new(config, Instant::now(), SystemTime::now(), at, server)?;
        if !initial_contact {
            i = i.without_initial_contact();
        }
        i.start(Instant::now());
        peers.push((socket, i, None::<Outcome>));
    }
    let deadline = Instant::now() + INITIATE_TIMEOUT;
    while peers.iter().any(|(_, _, o)| o.is_none()) {
        ensure!(
            Instant::now() < deadline,
            "not both IKE SAs from {local} ended within {INITIATE_TIMEOUT:?}"
        );
        for (socket, i, outcome) in peers.iter_mut().filter(|(_, _, o)| o.is_none()) {
            while let Some((_, to, bytes)) = i.poll_transmit() {
                send(socket, to, &bytes)?;
            }
            if let Some(ike) = receive(socket, Duration::from_millis(20))? {
                i.handle(Instant::now(), &ike);
            }
            i.handle_timeout(Instant::now());
            match i.poll_event() {
                Some(InitiatorEvent::Established { .. }) => *outcome = Some(Outcome::Established),
                Some(InitiatorEvent::Failed(e)) => *outcome = Some(Outcome::Failed(e.to_string())),
                _ => {}
            }
        }
    }
    Ok(peers.into_iter().filter_map(|(_, _, o)| o).collect())
}

/// Sends one fresh IKE_SA_INIT from each of `sources`, then counts the sockets answered
/// within [`SILENCE`].
fn sa_inits(config: impl Fn() -> Result<InitiatorConfig>, sources: &[Ipv6Addr]) -> Result<usize> {
    let server = SocketAddr::new(IpAddr::V6(GATE64_ADDRESS6), 500);
    let mut sockets = Vec::new();
    for a in sources {
        let socket = UdpSocket::bind(SocketAddr::new(IpAddr::V6(*a), 0))?;
        let at = socket.local_addr()?;
        let mut i = Initiator::new(config()?, Instant::now(), SystemTime::now(), at, server)?;
        i.start(Instant::now());
        let (_, to, init) = i.poll_transmit().context("no IKE_SA_INIT")?;
        send(&socket, to, &init)?;
        sockets.push(socket);
    }
    // All sockets listen at once, for SILENCE in all.
    let mut heard = vec![false; sockets.len()];
    let deadline = Instant::now() + SILENCE;
    let mut buf = vec![0u8; 65_535];
    for socket in &sockets {
        socket.set_nonblocking(true)?;
    }
    while Instant::now() < deadline && heard.iter().any(|h| !h) {
        for (socket, heard) in sockets.iter().zip(heard.iter_mut()) {
            if !*heard && socket.recv_from(&mut buf).is_ok() {
                *heard = true;
            }
        }
        thread::sleep(Duration::from_millis(10));
    }
    Ok(heard.iter().filter(|h| **h).count())
}

/// Per-identity and per-/64 caps (the documented defaults, set explicitly).
const PER_IDENTITY: usize = 4;
const PER_SOURCE: usize = 5;

fn caps_for_one_identity_and_one_64(topo: &Topology) -> Result<()> {
    let keys = format!(
        "max_ike_sas_per_identity = {PER_IDENTITY}\nmax_half_open_per_source = {PER_SOURCE}\n\
         half_open_cookie_threshold = 1000\nunique_ids = \"never\"\n"
    );
    let mut lab = lab(topo, &keys)?;
    // First, while gate64 holds no other half-open SA: half-open SAs live 30 s, and the
    // Teredo check counts them over about 15.
    teredo_mappings(topo, &lab.certs)?;
    // One certificate from 8 sources, each in a /64 of its own (2001:db8:100:80::/61).
    let shared: Vec<Ipv6Addr> = (0..8u16)
        .map(|i| Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0x80 + i, 0, 0, 0, 5))
        .collect();
    corp_sources(topo, "2001:db8:100:80::/61", &shared)?;
    let mut configs = Vec::new();
    for _ in &shared {
        configs.push(newcomer_configs(
            &topo.srv,
            &lab.certs,
            "shared.gate64.lab",
        )?);
    }
    let before = topo.metrics()?;
    let mut established = 0;
    let mut failures = Vec::new();
    for (source, pair) in shared.iter().zip(configs) {
        let source = *source;
        for outcome in topo.corp.run_in(move || run_pair(source, pair, false))?? {
            match outcome {
                Outcome::Established => established += 1,
                Outcome::Failed(e) => failures.push(e),
            }
        }
    }
    let attempts = 2 * shared.len();
    let want = (attempts - PER_IDENTITY) as f64;
    let (m, capped) = refusals(topo, &before, "identity_cap", want)?;
    println!(
        "one certificate from {} sources: {established} of {attempts} IKE SAs established, \
         identity_cap grew by {capped}; failures: {:?}",
        shared.len(),
        failures.first()
    );
    ensure!(
        established == PER_IDENTITY && capped == want,
        "one identity got {established} IKE SAs (cap {PER_IDENTITY}), identity_cap grew by \
         {capped} (want {want})\n{}",
        gate64_lines(&m)
    );
    let other = newcomer_configs(&topo.srv, &lab.certs, "other.gate64.lab")?;
    let took = topo
        .corp
        .run_in(move || build_both(other))?
        .context("a client with another certificate beside the capped identity")?;
    println!(
        "another certificate: both tunnels in {:.1} ms",
        took.as_secs_f64() * 1e3
    );

    // 64 addresses of one /64, one IKE_SA_INIT each.
    let one_64: Vec<Ipv6Addr> = (1..=64u16)
        .map(|i| Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0x90, 0, 0, 0x64, i))
        .collect();
    corp_sources(topo, "2001:db8:100:90::/64", &one_64)?;
    let before = topo.metrics()?;
    let certs = &lab.certs;
    let config = || initiator_config(certs, TunnelKind::Intranet, "2001:db8:100::/48");
    let answered = topo.corp.run_in(|| sa_inits(config, &one_64))??;
    let want = (one_64.len() - PER_SOURCE) as f64;
    let (m, capped) = refusals(topo, &before, "half_open_cap", want)?;
    println!(
        "{} addresses of one /64: {answered} IKE_SA_INIT answered, half_open_cap grew by \
         {capped}, gate64_ike_half_open {}",
        one_64.len(),
        fresh_metrics(topo)?.sum("gate64_ike_half_open", &[])
    );
    ensure!(
        answered == PER_SOURCE && capped == want,
        "one /64 got {answered} half-open IKE SAs (cap {PER_SOURCE}), half_open_cap grew by \
         {capped} (want {want})\n{}",
        gate64_lines(&m)
    );
    let other = newcomer_configs(&topo.srv, &lab.certs, "other-64.gate64.lab")?;
    let took = topo
        .corp
        .run_in(move || build_both(other))?
        .context("a client from another /64 beside the capped one")?;
    println!(
        "client from another /64: both tunnels in {:.1} ms",
        took.as_secs_f64() * 1e3
    );

    lab.gate.ensure_running()
}

/// Teredo sources are counted per NAT mapping, not per /64: 8 addresses of one mapping
/// (differing in the flag bits, RFC 4380 §4) are held to [`PER_SOURCE`] half-open SAs; then 8
/// mappings in the same /64 (another port each) all get one, though that /64 already holds
/// [`PER_SOURCE`] (the first mapping's, half-open for 30 s). Sent from the corporate host
/// with Teredo source addresses: gate64's answers go to its Teredo side and are lost, so only
/// its counters tell.
fn teredo_mappings(topo: &Topology, certs: &gate64_testkit::strongswan::LabCerts) -> Result<()> {
    // Server 192.0.2.1 (2001:0:c000:201::/64); client mapping 203.0.113.77, port 40000 and
    // then 40001.., stored inverted.
    let teredo = |flags: u16, port: u16| {
        Ipv6Addr::new(0x2001, 0, 0xc000, 0x0201, flags, !port, !0xcb00, !0x714d)
    };
    let one_mapping: Vec<Ipv6Addr> = (0..8u16).map(|f| teredo(0x8000 | f, 40000)).collect();
    let mappings: Vec<Ipv6Addr> = (1..=8u16).map(|p| teredo(0, 40000 + p)).collect();
    for a in one_mapping.iter().chain(&mappings) {
        topo.corp.addr_add("vsrv", &format!("{a}/128"))?;
    }
    let config = || initiator_config(certs, TunnelKind::Intranet, "2001:db8:100::/48");
    // (what, sources, half-open SAs admitted, refused as half_open_cap)
    for (what, sources, admitted) in [
        ("one mapping", &one_mapping, PER_SOURCE),
        ("8 mappings of one /64", &mappings, mappings.len()),
    ] {
        let want = (sources.len() - admitted) as f64;
        let before = fresh_metrics(topo)?;
        let received = topo.corp.run_in(|| sa_inits(config, sources))??;
        if want > 0.0 {
            refusals(topo, &before, "half_open_cap", want)?;
        }
        let m = fresh_metrics(topo)?;
        let capped = refused(&m, "half_open_cap") - refused(&before, "half_open_cap");
        let half_open = |m: &Metrics| m.sum("gate64_ike_half_open", &[]);
        let held = half_open(&m) - half_open(&before);
        println!(
            "Teredo, {what}: {held} more half-open IKE SAs, half_open_cap grew by {capped} \
             ({received} answers reached the corporate host: they go to the Teredo side)"
        );
        ensure!(
            capped == want && held == admitted as f64,
            "Teredo, {what}: {held} more half-open IKE SAs (want {admitted}), half_open_cap \
             grew by {capped} (want {want})\n{}",
            gate64_lines(&m)
        );
    }
    Ok(())
}

/// gate64's metrics with `gate64_ike_half_open` up to date: the IKE driver publishes its
/// gauges when it handles something, so one malformed datagram makes it publish, and the
/// copy to the metrics follows within a second.
fn fresh_metrics(topo: &Topology) -> Result<Metrics> {
    topo.corp.run_in(|| -> Result<()> {
        let socket = UdpSocket::bind(SocketAddr::new(IpAddr::V6(NEWCOMER), 0))?;
        socket.send_to(
            b"not IKE",
            SocketAddr::new(IpAddr::V6(GATE64_ADDRESS6), 500),
        )?;
        Ok(())
    })??;
    thread::sleep(Duration::from_millis(2500));
    topo.metrics()
}
