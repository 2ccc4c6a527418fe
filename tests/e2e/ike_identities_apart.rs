//! Clients whose names print alike stay apart, against `gate64 serve` in namespaces, with
//! certificates from two CAs kept by `openssl ca`, both in `[ipsec] ca`.
//!
//! - `netns_ike_names_that_print_alike_are_different_clients`: three clients build both
//!   tunnels one after another, each from its own address and with INITIAL_CONTACT: A with the
//!   one attribute CN = `a, O=b`, B with the two attributes CN = `a` and O = `b` (both from the
//!   first CA), and C with B's subject from the second CA. `gate64 status --json` shows six IKE
//!   SAs, three clients with three inner addresses, A's name escaped (`CN=a\, O=b`) and B's
//!   and C's issuers; no IKE SA was replaced. The control: B connects again and replaces its
//!   own two IKE SAs (`gate64_ipsec_disconnects_total{reason="replaced"}` grows by 2), keeping
//!   its inner address, while A's and C's IKE SAs stay as they were.

use std::net::Ipv6Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use gate64_testkit::Topology;
use gate64_testkit::strongswan::LabCerts;
use serde_json::Value;

use crate::common::{gate64_lines, netns_test, status_json};
use crate::ike_bounds::corp_sources;
use crate::ipsec::{TeredoIpsecLab, route_corp_to_gate64};
use crate::ipsec_flood::{GAUGE_LAG, build_both_from, tunnel_configs};
use crate::openssl_ca::OpensslCa;

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_names_that_print_alike_are_different_clients() {
    netns_test(
        "netns_ike_names_that_print_alike_are_different_clients",
        Topology::builder(),
        names_that_print_alike,
    );
}

/// One test client: its certificate and key, and the address it connects from.
struct Client {
    name: &'static str,
    cert: PathBuf,
    key: PathBuf,
    source: Ipv6Addr,
}

/// Both tunnels for `client`, from its address in `tcorp`.
fn connect(topo: &Topology, certs: &LabCerts, client: &Client) -> Result<()> {
    let configs = tunnel_configs(certs, &(client.cert.clone(), client.key.clone()))?;
    let source = client.source;
    topo.corp
        .run_in(move || build_both_from(configs, source))?
        .with_context(|| format!("client {} building both tunnels", client.name))?;
    Ok(())
}

/// One client in `gate64 status --json`: its address, its inner addresses, and (IKE SPI,
/// identity, issuer) of each of its child SAs.
type ClientSeen = (String, Vec<String>, Vec<(u64, String, String)>);

/// The client at `source` in `seen`.
fn of(seen: &[ClientSeen], source: Ipv6Addr) -> Option<ClientSeen> {
    seen.iter()
        .find(|(outer, _, _)| *outer == source.to_string())
        .cloned()
}

/// Its child SAs' identities and issuers.
fn names(client: &ClientSeen) -> Vec<(String, String)> {
    client
        .2
        .iter()
        .map(|(_, id, issuer)| (id.clone(), issuer.clone()))
        .collect()
}

/// Its IKE SAs' SPIs.
fn spis(client: &ClientSeen) -> Vec<u64> {
    client.2.iter().map(|(spi, _, _)| *spi).collect()
}

fn status(topo: &Topology) -> Result<(Value, Vec<ClientSeen>)> {
    let json = status_json(topo)?;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let clients = json["clients"].as_array().cloned().unwrap_or_default();
    let seen = clients
        .iter()
        .map(|c| {
            let inner = c["inner"]
                .as_array()
                .map(|a| a.iter().map(text).collect())
                .unwrap_or_default();
            let sas = c["sas"]
                .as_array()
                .map(|sas| {
                    sas.iter()
                        .map(|sa| {
                            (
                                sa["ike_spi"].as_u64().unwrap_or_default(),
                                text(&sa["identity"]),
                                text(&sa["issuer"]),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            (text(&c["outer"]), inner, sas)
        })
        .collect();
    Ok((json, seen))
}

/// Waits (at most [`GAUGE_LAG`]) for `gate64_ipsec_disconnects_total{reason="replaced"}` to
/// reach `want`; returns what it is.
fn replaced(topo: &Topology, want: f64) -> Result<f64> {
    let deadline = Instant::now() + GAUGE_LAG;
    loop {
        let m = topo.metrics()?;
        let got = m.sum("gate64_ipsec_disconnects_total", &[("reason", "replaced")]);
        if got >= want || Instant::now() >= deadline {
            return Ok(got);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn names_that_print_alike(topo: &Topology) -> Result<()> {
    let first = OpensslCa::new(
        &topo.srv,
        topo.srv.dir().join("first-ca"),
        "gate64 first clients CA",
    )?;
    let second = OpensslCa::new(
        &topo.srv,
        topo.srv.dir().join("second-ca"),
        "gate64 second clients CA",
    )?;
    let bundle = topo.srv.dir().join("clients-cas.pem");
    std::fs::write(
        &bundle,
        [first.dir.join("ca.pem"), second.dir.join("ca.pem")]
            .iter()
            .map(std::fs::read_to_string)
            .collect::<std::io::Result<String>>()?,
    )?;
    let mut lab = TeredoIpsecLab::start_with(topo, Some(&bundle), "", Some("info"))?;
    route_corp_to_gate64(topo)?;
    let sources: Vec<Ipv6Addr> = (1..=3u16)
        .map(|i| Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0xa0, 0, 0, 0, i))
        .collect();
    corp_sources(topo, "2001:db8:100:a0::/64", &sources)?;
    let client = |name, ca: &OpensslCa<'_>, subj, source| -> Result<Client> {
        let san = format!("client-{name}.gate64.lab");
        let (cert, key) = ca.issue(name, (subj, &san), None)?;
        Ok(Client {
            name,
            cert,
            key,
            source,
        })
    };
    let a = client("a", &first, "/CN=a, O=b", sources[0])?;
    let b = client("b", &first, "/CN=a/O=b", sources[1])?;
    let c = client("c", &second, "/CN=a/O=b", sources[2])?;
    for one in [&a, &b, &c] {
        connect(topo, &lab.certs, one)?;
    }
    let (json, seen) = status(topo)?;
    println!("after A, B and C: {seen:?}");
    ensure!(
        json["ike_sas"] == 6 && seen.len() == 3,
        "three clients with two IKE SAs each expected:\n{json:#}"
    );
    let mut inners: Vec<&String> = seen.iter().flat_map(|(_, inner, _)| inner).collect();
    inners.sort();
    inners.dedup();
    ensure!(
        inners.len() == 3,
        "three inner addresses expected:\n{json:#}"
    );
    let (Some(seen_a), Some(seen_b), Some(seen_c)) = (
        of(&seen, a.source),
        of(&seen, b.source),
        of(&seen, c.source),
    ) else {
        anyhow::bail!("a client missing from gate64 status:\n{json:#}");
    };
    let lab_issuer = "CN=gate64 first clients CA".to_owned();
    let second_issuer = "CN=gate64 second clients CA".to_owned();
    ensure!(
        names(&seen_a) == vec![("CN=a\\, O=b".to_owned(), lab_issuer.clone()); 2]
            && names(&seen_b) == vec![("CN=a, O=b".to_owned(), lab_issuer); 2]
            && names(&seen_c) == vec![("CN=a, O=b".to_owned(), second_issuer); 2],
        "identities and issuers as gate64 status shows them:\n{json:#}"
    );
    let none = replaced(topo, 0.0)?;
    ensure!(
        none == 0.0,
        "{none} IKE SAs replaced among three identities"
    );

    // The control: B again replaces B's own IKE SAs, and only those.
    connect(topo, &lab.certs, &b)?;
    let two = replaced(topo, 2.0)?;
    let (json, seen) = status(topo)?;
    println!("after B again: {seen:?}");
    ensure!(
        two == 2.0,
        "B's second connection replaced {two} IKE SAs, 2 expected\n{}",
        gate64_lines(&topo.metrics()?)
    );
    let (Some(again_a), Some(again_b), Some(again_c)) = (
        of(&seen, a.source),
        of(&seen, b.source),
        of(&seen, c.source),
    ) else {
        anyhow::bail!("a client missing from gate64 status after B again:\n{json:#}");
    };
    ensure!(
        json["ike_sas"] == 6
            && spis(&again_a) == spis(&seen_a)
            && spis(&again_c) == spis(&seen_c)
            && again_b.1 == seen_b.1
            && spis(&again_b)
                .iter()
                .all(|spi| !spis(&seen_b).contains(spi)),
        "B's new IKE SAs should replace B's and keep its inner address, leaving A and C:\n{json:#}"
    );
    lab.gate.ensure_running()
}
