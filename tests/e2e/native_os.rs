//! The IKEv2 clients built into each OS, emulated by strongSwan's charon with that OS's
//! documented proposals, key type and configuration requests, against one gate64 serving
//! them directly on `[ipsec] listen` (docs/clients/*.md):
//!
//! - Windows device tunnel: an RSA-2048 machine certificate, a CryptographySuite's IKE
//!   proposals (`aes128gcm16-prfsha256-modp2048`, `aes256-sha256-modp2048`) and ESP
//!   (`aes128gcm16`, `aes256-sha256`), no MOBIKE;
//! - macOS 13: IKE `aes256-sha256-modp2048` only, ESP `aes256-sha256`, no PFS;
//! - iOS 16: IKE `aes256-sha256-ecp256` and `-modp2048`, ESP `aes256-sha256-modp2048` (PFS);
//! - Android's built-in client: an RSA certificate, IKE `aes256gcm16-prfsha256-curve25519`
//!   (no ECP), ESP `aes256gcm16`;
//! - NetworkManager: charon's default proposals.
//!
//! Each client sits in a namespace of its own, proposes `0.0.0.0/0` and `::/0` (as these
//! clients do; gate64 narrows them to the intranet prefixes of both families) and asks for an
//! inner IPv4 and IPv6 address (`ipsec.pool4`, `ipsec.pool6`) and DNS servers.
//! `netns_native_os_clients_ipv4_through_nat` has all five behind one nftables masquerade
//! dialling gate64's IPv4 listen address; `netns_native_os_clients_ipv6` has them dialling
//! its IPv6 listen address, routed by `tcli`. In both, all five hold their IKE SA at once,
//! and each: logs the IKE and ESP suites gate64 chose from that OS's proposals; gets inner
//! addresses from `pool4` and `pool6` and gate64's DNS server (DNS64's address), which
//! charon's resolve plugin writes into its own resolv.conf; pings the corporate IPv6 host
//! and the corporate IPv4 host (`corpnet.ipv4_prefixes`) through the tunnel; and resolves a
//! name of the split domain with `dig` at that server through the tunnel (DNS64's
//! synthesized answer). gate64 then counts five IKE SAs, five child SAs and five
//! negotiations, `gate64 status --json` lists each client's identity with one child SA in the
//! intranet tunnel to its two inner addresses, each client its own entry (behind the NAT,
//! the NAT's address and a port of its own) listing them, and the session log has one
//! connect line per client (a native client is keyed by its outer address and port).
//!
//! charon 5.9 never asks for INTERNAL_DNS_DOMAIN, so gate64's `dns_domains` answer is not
//! seen here; the test checks that gate64 answers what charon asked for and nothing else.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::{Charon, KeyType, LabCerts, VerbatimConfig, with_charon_logs};
use gate64_testkit::{
    CORP_HOST, CORP_HOST_V4, Gate64Options, Netns, Topology, gate64_binary, wait_for,
};

use crate::common::{gate64_lines, netns_test, path_str};
use crate::ipsec::{
    INITIATE_TIMEOUT, POOL6, SETTLE_TIMEOUT, ipsec_section_with_ca, session_log, session_records,
};
use crate::ipsec_native::{CLIENT_V6, LISTEN_V4, ipv6_link, lans_behind_nat};
use crate::nat64::{GATE_DNS, expect_synthesized, nat64_dns64_toml, start_corp_dns};

/// The split-DNS domain gate64 hands out (`dns_domains`); DNS64 resolves its names.
const SPLIT_DOMAIN: &str = "corp.example";
/// gate64's inner IPv4 addresses (`ipsec.pool4`).
const POOL4: &str = "10.30.0.0/24";
/// The corporate IPv4 network (`corpnet.ipv4_prefixes`), the intranet tunnel's over IPv4.
const CORP_NET4: &str = "10.20.0.0/24";
/// The NAT's public address (`tcli`'s), the IPv4 clients' outer address at gate64.
const NAT_PUBLIC: &str = "198.51.100.10";
/// The client LANs' IPv6 prefix: LAN i is `2001:db8:210:i::/64`, routed by `tcli`.
const LAN6: &str = "2001:db8:210::/48";

/// One emulated OS client.
struct Os {
    /// Label of its charon and namespace tag (≤ 8 letters and digits).
    label: &'static str,
    /// Its certificate's key.
    key: KeyType,
    /// `proposals` (IKE) as strongSwan writes them.
    ike: &'static str,
    /// `esp_proposals`.
    esp: &'static str,
    /// `mobike`.
    mobike: bool,
    /// What charon logs as `selected proposal:` for the IKE SA and the child SA (a prefix).
    selected_ike: &'static str,
    selected_esp: &'static str,
}

const OSES: [Os; 5] = [
    Os {
        label: "windows",
        key: KeyType::Rsa2048,
        ike: "aes128gcm16-prfsha256-modp2048,aes256-sha256-modp2048",
        esp: "aes128gcm16,aes256-sha256",
        mobike: false,
        selected_ike: "IKE:AES_GCM_16_128/PRF_HMAC_SHA2_256/MODP_2048",
        selected_esp: "ESP:AES_GCM_16_128/",
    },
    Os {
        label: "macos",
        key: KeyType::EcdsaP256,
        ike: "aes256-sha256-modp2048",
        esp: "aes256-sha256",
        mobike: true,
        selected_ike: "IKE:AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/MODP_2048",
        selected_esp: "ESP:AES_CBC_256/HMAC_SHA2_256_128/",
    },
    Os {
        label: "ios",
        key: KeyType::EcdsaP256,
        ike: "aes256-sha256-ecp256,aes256-sha256-modp2048",
        esp: "aes256-sha256-modp2048",
        mobike: true,
        selected_ike: "IKE:AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/ECP_256",
        selected_esp: "ESP:AES_CBC_256/HMAC_SHA2_256_128/",
    },
    Os {
        label: "android",
        key: KeyType::Rsa2048,
        ike: "aes256gcm16-prfsha256-curve25519",
        esp: "aes256gcm16",
        mobike: true,
        selected_ike: "IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/CURVE_25519",
        selected_esp: "ESP:AES_GCM_16_256/",
    },
    Os {
        label: "nm",
        key: KeyType::EcdsaP256,
        ike: "default",
        esp: "default",
        mobike: true,
        selected_ike: "IKE:AES_GCM_16_256/",
        selected_esp: "ESP:AES_GCM_16_256/",
    },
];

impl Os {
    /// The identity of its certificate (CN and DNS subjectAltName).
    fn identity(&self) -> String {
        format!("{}.clients.gate64.lab", self.label)
    }
}

#[test]
#[ignore = "netns: needs root"]
fn netns_native_os_clients_ipv4_through_nat() {
    netns_test(
        "netns_native_os_clients_ipv4_through_nat",
        Topology::builder().corp_ipv4(true),
        |topo| os_clients(topo, Outer::Ipv4ThroughNat),
    );
}

#[test]
#[ignore = "netns: needs root"]
fn netns_native_os_clients_ipv6() {
    netns_test(
        "netns_native_os_clients_ipv6",
        Topology::builder().corp_ipv4(true),
        |topo| os_clients(topo, Outer::Ipv6),
    );
}

/// How the clients reach gate64.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outer {
    /// From LANs behind `tcli`'s masquerade to gate64's IPv4 listen address.
    Ipv4ThroughNat,
    /// From the same LANs, routed by `tcli`, to gate64's IPv6 listen address.
    Ipv6,
}

/// charon's configuration for `os` dialling `listen` with `cert` (files in `swanctl/`).
fn charon_config(
    os: &Os,
    listen: IpAddr,
    cert: &gate64_testkit::strongswan::CertPaths,
) -> VerbatimConfig {
    // The plugins of the testkit's charons plus `resolve`, which asks for DNS servers and
    // writes them to this charon's own resolv.conf.
    let strongswan_conf = "charon-systemd {\n  load = random nonce openssl pem pkcs1 pkcs8 \
         pubkey x509 revocation constraints aes sha1 sha2 hmac gcm kdf attr resolve \
         kernel-libipsec kernel-netlink socket-default vici\n  retransmit_timeout = 2\n  \
         retransmit_tries = 5\n  install_virtual_ip = yes\n  install_routes = yes\n}\n"
        .to_owned();
    let file = |p: &PathBuf| -> String {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let swanctl_conf = format!(
        "connections {{\n  {label} {{\n    version = 2\n    remote_addrs = {listen}\n    \
         vips = 0.0.0.0,::\n    proposals = {ike}\n    mobike = {mobike}\n    fragmentation = yes\n    \
         local {{\n      auth = pubkey\n      certs = {cert}\n    }}\n    remote {{\n      \
         auth = pubkey\n      id = %any\n    }}\n    children {{\n      {label} {{\n        \
         remote_ts = 0.0.0.0/0,::/0\n        esp_proposals = {esp}\n        mode = tunnel\n        \
         start_action = none\n        close_action = none\n      }}\n    }}\n  }}\n}}\n",
        label = os.label,
        ike = os.ike,
        esp = os.esp,
        mobike = if os.mobike { "yes" } else { "no" },
        cert = file(&cert.cert),
    );
    VerbatimConfig {
        strongswan_conf,
        swanctl_conf,
        files: vec![
            ("x509ca".to_owned(), cert.cas[0].clone()),
            ("x509".to_owned(), cert.cert.clone()),
            ("private".to_owned(), cert.key.clone()),
        ],
    }
}

fn os_clients(topo: &Topology, outer: Outer) -> Result<()> {
    let tags: Vec<&str> = OSES.iter().map(|o| o.label).collect();
    let lans = lans_behind_nat(topo, &tags)?;
    let listen: IpAddr = match outer {
        Outer::Ipv4ThroughNat => {
            topo.srv.addr_add("vcli", &format!("{LISTEN_V4}/24"))?;
            LISTEN_V4.parse()?
        }
        Outer::Ipv6 => {
            let listen = ipv6_link(topo)?;
            // tcli routes the LANs' IPv6 prefixes; gate64's side routes them back to it.
            topo.cli.sysctl("net.ipv6.conf.all.forwarding", "1")?;
            for (i, lan) in lans.iter().enumerate() {
                topo.cli
                    .addr_add(&format!("vlan{i}"), &format!("2001:db8:210:{i}::1/64"))?;
                lan.addr_add("vnat", &format!("2001:db8:210:{i}::2/64"))?;
                lan.ip(&[
                    "-6",
                    "route",
                    "add",
                    "default",
                    "via",
                    &format!("2001:db8:210:{i}::1"),
                ])?;
            }
            topo.srv
                .ip(&["-6", "route", "replace", LAN6, "via", CLIENT_V6])?;
            listen
        }
    };
    let _dns = start_corp_dns(topo)?;
    let certs = LabCerts::generate(&topo.srv, &topo.srv.dir().join("certs"), listen)?;
    let opts = Gate64Options {
        without_ipsec: false,
        extra: format!(
            "{}\n{}",
            ipsec_section_with_ca(
                topo,
                &certs,
                &certs.ca,
                &format!(
                    "listen = [\"{listen}\"]\npool4 = \"{POOL4}\"\n\
                     dns_domains = [\"{SPLIT_DOMAIN}\"]\n"
                ),
            )?,
            nat64_dns64_toml(&topo.srv.dir().join("bindings.jsonl")),
        ),
        ..Gate64Options::default()
    };
    let toml = opts.config_toml().replacen(
        "[corpnet]\n",
        &format!("[corpnet]\nipv4_prefixes = [\"{CORP_NET4}\"]\n"),
        1,
    );
    ensure!(toml.contains(CORP_NET4), "no [corpnet] section in:\n{toml}");
    let mut gate = topo.start_gate64_with(&toml)?;
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;

    let mut charons = Vec::with_capacity(OSES.len());
    for (os, lan) in OSES.iter().zip(&lans) {
        let cert = certs.issue_client(&topo.srv, &os.identity(), os.key)?;
        charons.push(Charon::start_verbatim(
            lan,
            os.label,
            &charon_config(os, listen, &cert),
        )?);
    }
    let refs: Vec<&Charon<'_>> = charons.iter().collect();
    let result = (|| -> Result<()> {
        for (os, charon) in OSES.iter().zip(&charons) {
            charon.load_all()?;
            charon.initiate(os.label, os.label, INITIATE_TIMEOUT)?;
        }
        for ((os, charon), lan) in OSES.iter().zip(&charons).zip(&lans) {
            client_checks(topo, os, charon, lan, listen)
                .with_context(|| format!("the {} client", os.label))?;
        }
        Ok(())
    })();
    with_charon_logs(result, &refs)?;

    let m = topo.metrics()?;
    let n = OSES.len() as f64;
    for (name, labels) in [
        ("gate64_ipsec_mmsa", &[][..]),
        ("gate64_ipsec_qmsa", &[][..]),
        ("gate64_ike_negotiations_total", &[("result", "ok")][..]),
    ] {
        let v = m.sum(name, labels);
        ensure!(
            v == n,
            "{name}{labels:?} is {v}, expected {n}\n{}",
            gate64_lines(&m)
        );
    }
    let bin = gate64_binary()?;
    let json = topo.srv.exec_ok(&[
        path_str(&bin)?,
        "status",
        "--json",
        "--socket",
        path_str(&topo.srv.dir().join("control.sock"))?,
    ])?;
    let status: serde_json::Value =
        serde_json::from_str(&json).with_context(|| format!("gate64 status --json:\n{json}"))?;
    // A client is an outer address and, natively, a port: behind the NAT the five share the
    // address and differ by port. Each is one entry, with its one child SA (its IKE SA's
    // identity, in the intranet tunnel to its inner addresses) and its own inner addresses.
    let clients: Vec<&serde_json::Value> =
        status["clients"].as_array().into_iter().flatten().collect();
    let mut ports = Vec::new();
    for (i, os) in OSES.iter().enumerate() {
        let id = os.identity();
        let of_id =
            |sa: &serde_json::Value| sa["identity"].as_str().is_some_and(|i| i.contains(&id));
        let mine: Vec<&&serde_json::Value> = clients
            .iter()
            .filter(|c| c["sas"].as_array().is_some_and(|sas| sas.iter().any(of_id)))
            .collect();
        let expected_outer: Ipv6Addr = match outer {
            Outer::Ipv4ThroughNat => NAT_PUBLIC.parse::<Ipv4Addr>()?.to_ipv6_mapped(),
            Outer::Ipv6 => format!("2001:db8:210:{i}::2").parse()?,
        };
        let ok = match mine.as_slice() {
            [c] => {
                let sas = c["sas"].as_array().cloned().unwrap_or_default();
                let inner: Vec<String> = c["inner"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a.as_str().map(str::to_owned))
                    .collect();
                let ts: Vec<String> = sas
                    .first()
                    .and_then(|sa| sa["remote_ts"].as_array())
                    .into_iter()
                    .flatten()
                    .filter_map(|t| t.as_str())
                    .map(|t| t.split('/').next().unwrap_or_default().to_owned())
                    .collect();
                ports.push(c["port"].as_u64());
                sas.len() == 1
                    && sas[0]["tunnel"] == "intranet"
                    && c["transport"] == "native"
                    && c["outer"].as_str().and_then(|o| o.parse::<Ipv6Addr>().ok())
                        == Some(expected_outer)
                    && c["port"].as_u64().is_some()
                    && ts.len() == 2
                    && ts.iter().any(|t| t.starts_with("fd00:c1::"))
                    && ts.iter().any(|t| t.starts_with("10.30.0."))
                    && ts.iter().all(|t| inner.contains(t))
            }
            _ => false,
        };
        ensure!(
            ok,
            "gate64 status --json: expected one client of {id}, native from {expected_outer} \
             and a port, with one child SA in the intranet tunnel to its inner addresses from \
             {POOL6} and {POOL4}, which the client lists: {mine:?}\n{json}"
        );
    }
    ensure!(
        clients.len() == OSES.len(),
        "gate64 status --json: expected {} clients:\n{json}",
        OSES.len()
    );
    // The session log has one session per client: exactly one connect line per identity,
    // from the NAT's address at a port of its own (over IPv6, from its LAN address).
    let connects = |records: &[serde_json::Value], id: &str| -> Vec<serde_json::Value> {
        records
            .iter()
            .filter(|r| {
                r["event"] == "connect" && r["identity"].as_str().is_some_and(|i| i.contains(id))
            })
            .cloned()
            .collect()
    };
    let records = wait_for(SETTLE_TIMEOUT, || {
        let records = session_records(topo).ok()?;
        OSES.iter()
            .all(|os| !connects(&records, &os.identity()).is_empty())
            .then_some(records)
    })
    .with_context(|| {
        format!(
            "the session log lacks a connect line for some client:\n{}",
            std::fs::read_to_string(session_log(topo)).unwrap_or_default()
        )
    })?;
    let mut line_ports = Vec::new();
    for (i, os) in OSES.iter().enumerate() {
        let expected_outer: Ipv6Addr = match outer {
            Outer::Ipv4ThroughNat => NAT_PUBLIC.parse::<Ipv4Addr>()?.to_ipv6_mapped(),
            Outer::Ipv6 => format!("2001:db8:210:{i}::2").parse()?,
        };
        let lines = connects(&records, &os.identity());
        ensure!(
            lines.len() == 1
                && lines[0]["outer"].as_str().and_then(|o| o.parse().ok()) == Some(expected_outer)
                && lines[0]["transport"] == "native",
            "the session log: expected one connect line of {}, native from {expected_outer}: \
             {lines:?}\n{}",
            os.identity(),
            std::fs::read_to_string(session_log(topo)).unwrap_or_default()
        );
        line_ports.push((lines[0]["outer"].clone(), lines[0]["port"].as_u64()));
    }
    // Each client its own NAT mapping in both.
    line_ports.sort_by_key(|(o, p)| (o.to_string(), *p));
    line_ports.dedup();
    ensure!(
        line_ports.len() == OSES.len(),
        "the connect lines share an outer address and port: {line_ports:?}"
    );
    if outer == Outer::Ipv4ThroughNat {
        ports.sort();
        ports.dedup();
        ensure!(
            ports.len() == OSES.len(),
            "gate64 status: the clients behind the NAT share a port: {ports:?}\n{json}"
        );
    }
    for mut charon in charons {
        charon.ensure_running()?;
    }
    gate.ensure_running()
}

/// One client, once all are up: its SA, its suites, its inner address and DNS server, a
/// ping and a split-domain name through its tunnel.
fn client_checks(
    topo: &Topology,
    os: &Os,
    charon: &Charon<'_>,
    lan: &Netns,
    listen: IpAddr,
) -> Result<()> {
    let sas = charon.wait_established(1, 1, SETTLE_TIMEOUT)?;
    let sa = sas.first().context("no IKE SA")?;
    ensure!(
        sa.remote_host == listen.to_string() && sa.remote_port == 4500,
        "IKE moved to {listen}:4500: {sa:?}"
    );
    let log = std::fs::read_to_string(charon.log_path())?;
    for want in [os.selected_ike, os.selected_esp] {
        ensure!(
            log.contains(&format!("selected proposal: {want}")),
            "charon did not log the selected proposal {want}"
        );
    }
    // The configuration request and reply: charon (5.9) asks for an inner address and DNS
    // servers of both families, never for INTERNAL_DNS_DOMAIN; gate64 answers both addresses
    // and its one DNS server, DNS64's IPv6 address (`ipsec.dns` names no IPv4 server).
    for (what, cp) in [
        ("generating IKE_AUTH request", "CPRQ(ADDR ADDR6 DNS DNS6)"),
        ("parsed IKE_AUTH response", "CPRP(ADDR ADDR6 DNS6)"),
    ] {
        ensure!(
            log.lines().any(|l| l.contains(what) && l.contains(cp)),
            "charon's log has no {what} with {cp}"
        );
    }
    let addrs = lan.ip(&["-6", "addr", "show", "scope", "global"])?;
    ensure!(
        addrs.contains("inet6 fd00:c1::"),
        "no inner address from {POOL6}:\n{addrs}"
    );
    let resolv = std::fs::read_to_string(charon.resolv_conf_path()).unwrap_or_default();
    ensure!(
        resolv
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["nameserver", GATE_DNS])),
        "charon's resolve plugin did not write gate64's DNS server {GATE_DNS}: {resolv:?}"
    );
    let addrs4 = lan.ip(&["-4", "addr", "show", "dev", "ipsec0"])?;
    ensure!(
        addrs4.contains("inet 10.30.0."),
        "no inner IPv4 address from {POOL4} on ipsec0:\n{addrs4}"
    );
    // One unasserted echo of each family first, as in the other strongSwan tests.
    topo.ping6(lan, CORP_HOST, 1)?;
    let v4 = CORP_HOST_V4.to_string();
    let ping4 =
        |count: &str| lan.exec(&["ping", "-4", "-n", "-c", count, "-i", "0.2", "-W", "2", &v4]);
    let _ = ping4("1");
    through_tunnel(charon, 3, "the IPv6 echoes", || {
        topo.ping6_all(lan, CORP_HOST, 3)
            .context("ping the corporate host through the tunnel")
            .map(drop)
    })?;
    through_tunnel(charon, 3, "the IPv4 echoes", || {
        let out = ping4("3")?;
        ensure!(
            out.status.success(),
            "ping the corporate IPv4 host {v4} through the tunnel:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        Ok(())
    })?;
    through_tunnel(charon, 1, "the DNS query", || {
        expect_synthesized(lan, "through the tunnel")
    })
}

/// Runs `action` and fails unless the child SAs of `charon` carried at least `packets` more
/// packets each way meanwhile: the LANs' default routes also lead to the corporate network
/// (outside the tunnel, through gate64's host), so an answer alone proves nothing.
fn through_tunnel(
    charon: &Charon<'_>,
    packets: u64,
    what: &str,
    action: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let count = || -> Result<(u64, u64)> {
        let sas = charon.list_sas()?;
        let children = sas.iter().flat_map(|sa| &sa.children);
        Ok(children.fold((0, 0), |(i, o), c| (i + c.packets_in, o + c.packets_out)))
    };
    let before = count()?;
    action()?;
    let after = count()?;
    ensure!(
        after.0 >= before.0 + packets && after.1 >= before.1 + packets,
        "{what} did not cross the child SA: packets (in, out) {before:?} before, {after:?} after"
    );
    Ok(())
}
