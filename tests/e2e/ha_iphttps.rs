//! An IP-HTTPS client keeps its /64, and so its IPsec SAs, across an HA takeover, in network
//! namespaces.
//!
//! - `netns_ha_iphttps_takeover_keeps_the_64`: two gate64 nodes (`hla`, `hlb`) run hot with
//!   the same IPsec, IP-HTTPS and TLS configuration and `[ha]` towards each other over a link
//!   of their own; no keepalived: `hla` holds the IP-HTTPS address 192.0.2.1 and the inside
//!   gateway 2001:db8:100:1::1 by hand. A client without IPsec takes `hla`'s first /64 and
//!   leaves (a fresh pool hands that one out first on `hlb` too); `gate64 connect iphttps`
//!   (IPsec on, both tunnels to the endpoint through the IP-HTTPS link, on the second /64)
//!   pings the corporate host through its
//!   infrastructure tunnel; `hlb`'s store fills from the channel. Then `hla`'s gate64 is
//!   SIGKILLed and its links go down, the two addresses move to `hlb` (its neighbours'
//!   caches flushed, as keepalived's gratuitous ARP and NA would) and `hlb` is promoted
//!   (SIGUSR1). The client's TLS reconnects to `hlb`, whose first Router Solicitation names
//!   the interface id of its old address: `hlb` gives the link the same /64 (a hint from the
//!   synced IKE SA records, `gate64_iphttps_prefix_reclaims_total{result="reclaimed"}`), the
//!   client keeps its address and its SAs, and the ping flows again with no IKE negotiation
//!   on `hlb` (`gate64_ike_negotiations_total` stays 0) and the same IKE and child SPIs and
//!   outer address in `gate64 status --json` before (`hla`) and after (`hlb`). The client
//!   announced RFC 6311 Message ID sync in IKE_AUTH, so `hlb` sends it a sync request for
//!   each of its two IKE SAs, which the client answers
//!   (`gate64_ha_mid_sync_total{result="synced"}` 2, none `failed` or `unsupported`); its log
//!   still names only the two tunnels it brought up on `hla`.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Result, ensure};
use gate64_testkit::strongswan::LabCerts;
use gate64_testkit::{CORP_HOST, Metrics, Netns, Process, gate64_binary, wait_for, wait_until};

use crate::common::{
    GATE64_ADDRESS6, POOL6, gate64_certs, gate64_lines, iphttps_ipsec_argv, path_str,
    status_json_in,
};
use crate::failover::{metrics, now_epoch, signal};
use crate::ha_sync::{INSIDE_GATEWAY, Lab, run_lab};

/// The IP-HTTPS address the takeover moves (`[iphttps] listen` on both nodes).
const IPHTTPS_ADDRESS: &str = "192.0.2.1";
/// Both tunnels up through IP-HTTPS, generous on two shared cores.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(40);
/// The standby's store must hold the records within this long (the active node flushes
/// every second).
const SYNC_BOUND: Duration = Duration::from_secs(10);
/// The ping must flow again through the standby within this long of the death: the client
/// reconnects after 1 s, then 2 s, 4 s...
const RESUME_BOUND: Duration = Duration::from_secs(30);
/// Two IKE SAs and two child SAs.
const RECORDS: f64 = 4.0;
/// The client's IKE SAs, each synced (RFC 6311) by `hlb` after the takeover.
const IKE_SAS: f64 = 2.0;
/// `hlb`'s sync requests must be answered within this long of the ping's return: they go at
/// the liveness timer's next slice and are retransmitted like a liveness check.
const MID_SYNC_BOUND: Duration = Duration::from_secs(30);
/// The client's log line for each tunnel it brings up (`crates/client/src/ipsec.rs`).
const TUNNEL_UP: &str = "IPsec tunnel up";

#[test]
#[ignore = "netns: needs root"]
fn netns_ha_iphttps_takeover_keeps_the_64() {
    run_lab("netns_ha_iphttps_takeover_keeps_the_64", new_lab, takeover);
}

/// The HA lab of `ha_sync` in namespaces `hl…`, `hla` holding the IP-HTTPS address and the
/// inside gateway.
fn new_lab() -> Result<Lab> {
    let lab = Lab::new("hl", &[], &[])?;
    lab.nodes[0].addr_add("up0", &format!("{IPHTTPS_ADDRESS}/24"))?;
    lab.nodes[0].addr_add("lan0", &format!("{INSIDE_GATEWAY}/64"))?;
    Ok(lab)
}

/// Node `i`'s configuration: IPsec behind IP-HTTPS, and `[ha]` towards the other node.
fn node_config(i: usize, tls: &Path, ike: &LabCerts, node: &Netns) -> Result<String> {
    let (me, peer) = (i + 1, 2 - i);
    let secret = |name: &str, hex: &str| -> Result<String> {
        let path = node.write_file(name, &format!("{}\n", hex.repeat(32)))?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        Ok(path_str(&path)?.to_owned())
    };
    Ok(format!(
        "[server]\nworkers = 1\n\n[teredo]\nenabled = false\n\n\
         [iphttps]\nenabled = true\nlisten = \"{IPHTTPS_ADDRESS}:443\"\ncertificate = {:?}\n\
         private_key = {:?}\nprefix = \"2001:db8:1::/48\"\n\n\
         [corpnet]\ntun = \"gate64\"\nipv6_prefixes = [\"2001:db8:100::/48\"]\n\
         address6 = \"{GATE64_ADDRESS6}\"\n\n\
         [ipsec]\ncertificate = {:?}\nprivate_key = {:?}\nca = {:?}\npool6 = \"{POOL6}\"\n\
         endpoint = \"{GATE64_ADDRESS6}\"\ninfrastructure_prefixes = [\"{CORP_HOST}/128\"]\n\
         qcd_secret_file = {:?}\n\n\
         [ha]\nnode_id = {me}\npeer_node_id = {peer}\nlisten = \"10.0.9.{me}:4501\"\n\
         peer = \"10.0.9.{peer}:4501\"\nsecret_file = {:?}\n\n\
         [control]\nsocket = {:?}\n\n\
         [metrics]\nlisten = \"127.0.0.1:9164\"\n\n[log]\nlevel = \"debug\"\n",
        path_str(&tls.join("server.pem"))?,
        path_str(&tls.join("server.key"))?,
        path_str(&ike.responder_cert)?,
        path_str(&ike.responder_key)?,
        path_str(&ike.ca)?,
        secret("qcd.secret", "5a")?,
        secret("ha.secret", "6b")?,
        path_str(&node.dir().join("control.sock"))?,
    ))
}

/// One child SA as both sides name it: (outer address, IKE SPI, inbound SPI, outbound SPI).
type Sa = (String, String, u64, u64);

/// Every child SA in `node`'s `gate64 status --json`.
fn child_sas(node: &Netns) -> Result<BTreeSet<Sa>> {
    let v = status_json_in(node)?;
    let mut all = BTreeSet::new();
    for c in v["clients"].as_array().into_iter().flatten() {
        for sa in c["sas"].as_array().into_iter().flatten() {
            all.insert((
                c["outer"].as_str().unwrap_or_default().to_owned(),
                sa["ike_spi_hex"].as_str().unwrap_or_default().to_owned(),
                sa["spi_in"].as_u64().unwrap_or_default(),
                sa["spi_out"].as_u64().unwrap_or_default(),
            ));
        }
    }
    Ok(all)
}

fn ping_once(ns: &Netns) -> bool {
    ns.exec(&["ping", "-6", "-c", "1", "-W", "2", &CORP_HOST.to_string()])
        .is_ok_and(|o| o.status.success())
}

fn reclaims(m: &Metrics, result: &str) -> f64 {
    m.sum(
        "gate64_iphttps_prefix_reclaims_total",
        &[("result", result)],
    )
}

fn mid_syncs(m: &Metrics, result: &str) -> f64 {
    m.sum("gate64_ha_mid_sync_total", &[("result", result)])
}

/// How often the client logged a tunnel up, the first negotiations included.
fn tunnels_up(client: &Process) -> usize {
    client.log().matches(TUNNEL_UP).count()
}

fn start_nodes(lab: &Lab) -> Result<(LabCerts, Vec<Process>)> {
    let bin = gate64_binary()?;
    let tls = lab.bridge.dir().join("certs");
    gate64_certs(&lab.bridge, &tls, IPHTTPS_ADDRESS, "gate64.lab.example")?;
    let ike = LabCerts::generate(
        &lab.bridge,
        &lab.bridge.dir().join("ike-certs"),
        IpAddr::V6(GATE64_ADDRESS6),
    )?;
    let mut nodes = Vec::new();
    for (i, node) in lab.nodes.iter().enumerate() {
        let config = node.write_file("gate64.toml", &node_config(i, &tls, &ike, node)?)?;
        nodes.push(node.spawn(
            "gate64",
            &[path_str(&bin)?, "serve", "--config", path_str(&config)?],
        )?);
    }
    for (node, process) in lab.nodes.iter().zip(&mut nodes) {
        let up = wait_until(Duration::from_secs(20), || {
            metrics(node).is_ok_and(|m| m.has("gate64_ipsec_qmsa"))
        });
        process.ensure_running()?;
        ensure!(up, "gate64 on {} did not serve /metrics", node.name());
    }
    Ok((ike, nodes))
}

fn spawn_client(lab: &Lab, ike: &LabCerts) -> Result<Process> {
    let bin = gate64_binary()?;
    let ca = lab.bridge.dir().join("certs/ca.pem");
    let (endpoint, infra) = (GATE64_ADDRESS6.to_string(), format!("{CORP_HOST}/128"));
    let url = format!("https://{IPHTTPS_ADDRESS}/IPHTTPS");
    let mut argv = vec!["env", "RUST_LOG=debug,rustls=info"];
    argv.extend(iphttps_ipsec_argv(
        &bin,
        (&url, &ca),
        &endpoint,
        (&ike.initiator_cert, &ike.initiator_key, &ike.ca),
        (&infra, "2001:db8:100::/48"),
    )?);
    argv.extend(["--ipsec-renew-secs", "3600"]);
    lab.client.spawn("gate64-connect-iphttps-ipsec", &argv)
}

/// `gate64 connect iphttps --no-ipsec` on its own TUN device.
fn spawn_plain_client(lab: &Lab) -> Result<Process> {
    let bin = gate64_binary()?;
    let ca = lab.bridge.dir().join("certs/ca.pem");
    let url = format!("https://{IPHTTPS_ADDRESS}/IPHTTPS");
    lab.client.spawn(
        "gate64-connect-iphttps-plain",
        &[
            path_str(&bin)?,
            "connect",
            "iphttps",
            "--no-ipsec",
            "--server",
            &url,
            "--ca",
            path_str(&ca)?,
            "--ifname",
            "gate64p",
        ],
    )
}

/// Kills the active node (SIGKILL, links down), moves the IP-HTTPS address and the inside
/// gateway to the standby and promotes it.
fn fail_over(lab: &Lab, active: &Process, standby: &Process) -> Result<()> {
    let [active_ns, standby_ns] = &lab.nodes;
    signal(active.pid(), "-KILL");
    for dev in ["up0", "lan0", "ha0"] {
        active_ns.ip(&["link", "set", dev, "down"])?;
    }
    standby_ns.addr_add("up0", &format!("{IPHTTPS_ADDRESS}/24"))?;
    standby_ns.addr_add("lan0", &format!("{INSIDE_GATEWAY}/64"))?;
    // What keepalived's gratuitous ARP and unsolicited NA do for the neighbours.
    lab.client.ip(&["neigh", "flush", "dev", "eth0"])?;
    lab.corp.ip(&["-6", "neigh", "flush", "dev", "eth0"])?;
    signal(standby.pid(), "-USR1");
    Ok(())
}

fn takeover(lab: &Lab) -> Result<()> {
    let [active_ns, standby_ns] = &lab.nodes;
    let (ike, nodes) = start_nodes(lab)?;
    // A client without IPsec takes hla's first /64 (the one a fresh pool hands out first, on
    // hlb too) and leaves before the death: the IPsec client's /64 is the second, so only
    // a /64 given back can carry its old address on hlb.
    let mut first = spawn_plain_client(lab)?;
    let linked = wait_until(Duration::from_secs(15), || {
        metrics(active_ns)
            .is_ok_and(|m| m.sum("gate64_tls_handshakes_total", &[("result", "ok")]) == 1.0)
    });
    first.ensure_running()?;
    ensure!(linked, "the plain client did not link up on hla");
    let mut client = spawn_client(lab, &ike)?;
    let up = wait_until(ESTABLISH_TIMEOUT, || {
        metrics(active_ns).is_ok_and(|m| {
            m.sum("gate64_ipsec_qmsa", &[]) == 2.0 && m.sum("gate64_ipsec_mmsa", &[]) == 2.0
        })
    });
    client.ensure_running()?;
    ensure!(
        up,
        "the tunnels did not come up on hla within {ESTABLISH_TIMEOUT:?}\n{}\n{}",
        gate64_lines(&metrics(active_ns)?),
        client.log()
    );
    ensure!(
        wait_until(Duration::from_secs(10), || ping_once(&lab.client)),
        "no ping reply from {CORP_HOST} through hla"
    );
    let before = child_sas(active_ns)?;
    ensure!(before.len() == 2, "hla's child SAs: {before:?}");
    let up_before = tunnels_up(&client);
    ensure!(
        up_before == 2,
        "the client logged {up_before} tunnels up on hla, want 2\n{}",
        client.log()
    );
    ensure!(
        before.iter().all(|sa| sa.0.starts_with("2001:db8:1:1:")),
        "the IPsec client is not on hla's second /64: {before:?}"
    );
    first.stop();
    let held = wait_for(SYNC_BOUND, || {
        let m = metrics(standby_ns).ok()?;
        (m.sum("gate64_ha_store_records", &[]) >= RECORDS).then_some(m)
    });
    let Some(standby_before) = held else {
        anyhow::bail!(
            "hlb held fewer than {RECORDS} records within {SYNC_BOUND:?}\n{}",
            gate64_lines(&metrics(standby_ns)?)
        );
    };
    ensure!(
        standby_before.sum("gate64_ike_negotiations_total", &[]) == 0.0,
        "hlb negotiated before the takeover"
    );

    let died = now_epoch();
    fail_over(lab, &nodes[0], &nodes[1])?;
    let resumed = wait_until(RESUME_BOUND, || ping_once(&lab.client));
    let gap = now_epoch() - died;
    let m = metrics(standby_ns)?;
    client.ensure_running()?;
    ensure!(
        resumed,
        "the ping did not flow again through hlb within {RESUME_BOUND:?}\n{}\nclient log:\n{}",
        gate64_lines(&m),
        client.log()
    );
    let ok = m.sum("gate64_tls_handshakes_total", &[("result", "ok")]);
    ensure!(ok >= 1.0, "no IP-HTTPS link on hlb\n{}", gate64_lines(&m));
    ensure!(
        reclaims(&m, "reclaimed") == 1.0 && reclaims(&m, "in_use") == 0.0,
        "hlb did not give the client its /64 back\n{}",
        gate64_lines(&m)
    );
    let negotiated = m.sum("gate64_ike_negotiations_total", &[]);
    ensure!(
        negotiated == 0.0,
        "hlb ran {negotiated} IKE negotiations: the client negotiated again\n{}\nclient log:\n{}",
        gate64_lines(&m),
        client.log()
    );
    let after = child_sas(standby_ns)?;
    ensure!(
        before == after,
        "the client's SAs changed across the takeover:\nhla before {before:#?}\nhlb after {after:#?}"
    );
    // RFC 6311: the client announced Message ID sync in IKE_AUTH, hla answered it and synced
    // the flag, and the client answers hlb's sync request for both IKE SAs.
    let synced = wait_for(MID_SYNC_BOUND, || {
        let m = metrics(standby_ns).ok()?;
        (mid_syncs(&m, "synced") + mid_syncs(&m, "failed") + mid_syncs(&m, "unsupported")
            >= IKE_SAS)
            .then_some(m)
    });
    let Some(m_sync) = synced else {
        anyhow::bail!(
            "hlb settled fewer than {IKE_SAS} Message ID syncs within {MID_SYNC_BOUND:?}\n{}\n\
             client log:\n{}",
            gate64_lines(&metrics(standby_ns)?),
            client.log()
        );
    };
    let (ids_synced, ids_failed, ids_unsupported) = (
        mid_syncs(&m_sync, "synced"),
        mid_syncs(&m_sync, "failed"),
        mid_syncs(&m_sync, "unsupported"),
    );
    ensure!(
        ids_synced == IKE_SAS && ids_failed == 0.0 && ids_unsupported == 0.0,
        "the client did not answer hlb's Message ID syncs: synced {ids_synced}, failed \
         {ids_failed}, unsupported {ids_unsupported}, want {IKE_SAS} synced\n{}\nclient log:\n{}",
        gate64_lines(&m_sync),
        client.log()
    );
    // The client kept its IKE SAs: the same SPIs on hlb, and no tunnel brought up again.
    client.ensure_running()?;
    let after_sync = child_sas(standby_ns)?;
    ensure!(
        before == after_sync,
        "the client's SAs changed after the Message ID sync:\nhla before {before:#?}\nhlb \
         after {after_sync:#?}"
    );
    let up_after = tunnels_up(&client);
    ensure!(
        up_after == up_before,
        "the client brought tunnels up again across the takeover ({up_before} before, \
         {up_after} after)\n{}",
        client.log()
    );
    ensure!(
        ping_once(&lab.client),
        "no ping reply from {CORP_HOST} through hlb after the Message ID sync"
    );
    println!(
        "HA IP-HTTPS takeover: the client reconnected its TLS to hlb, got its /64 back and \
         pinged through its old tunnels {gap:.1} s after hla's death; hlb ran {negotiated} IKE \
         negotiations; RFC 6311 Message ID syncs on hlb: synced {ids_synced}, failed \
         {ids_failed}, unsupported {ids_unsupported}; SAs {after_sync:?}"
    );
    Ok(())
}
