//! IKEv2 clients that reach gate64 directly on `[ipsec] listen`, without Teredo or IP-HTTPS:
//!
//! - `netns_strongswan_native_ipv4_through_nat`: strongSwan (charon with kernel-libipsec) in
//!   a LAN namespace behind `tcli`, which masquerades it (nftables), dials gate64's listen
//!   address 192.0.2.10; both tunnels come up as two IKE SAs, moved to UDP 4500 after NAT
//!   detection with ESP in UDP, a ping reaches the corporate host through the infrastructure
//!   tunnel, and gate64's metrics and status show the SAs at the NAT's public address. Then
//!   the NAT forgets the mapping and gives the client another port: the next ESP packet
//!   moves the child SA there, and the ping's replies follow.
//! - `netns_strongswan_native_ipv6`: the same from `tcli` itself over plain IPv6, no NAT.
//! - `netns_profile_proposals_native_ipv6`: gate64 narrowed to `aes256-sha384-modp3072` and
//!   ESP `aes128-sha256`; `gate64 profile networkmanager` on its configuration file writes
//!   the `ike=`, `esp=` and `remote-identity=` charon is then given (its default proposals
//!   would be refused), and the infrastructure tunnel comes up with exactly those
//!   algorithms and carries a ping.

use std::net::IpAddr;

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::{
    Charon, CharonConfig, INFRASTRUCTURE, INTRANET, LabCerts, Tunnel, with_charon_logs,
};
use gate64_testkit::{CORP_HOST, Gate64Options, Netns, Topology, gate64_binary};

use crate::common::{gate64_lines, netns_test, path_str};
use crate::ipsec::{INITIATE_TIMEOUT, POOL6, SETTLE_TIMEOUT, ipsec_section_with_ca};

/// gate64's public IPv4 address for native clients (beside the Teredo ones on `tsrv`).
const LISTEN_V4: &str = "192.0.2.10";
/// gate64's public IPv6 address for native clients, and the client's, on the `tcli` link.
const LISTEN_V6: &str = "2001:db8:200::1";
const CLIENT_V6: &str = "2001:db8:200::10";
/// The NAT's public address: `tcli`'s.
const NAT_PUBLIC: &str = "198.51.100.10";

#[test]
#[ignore = "netns: needs root"]
fn netns_strongswan_native_ipv4_through_nat() {
    netns_test(
        "netns_strongswan_native_ipv4_through_nat",
        Topology::builder(),
        native_ipv4_through_nat,
    );
}

#[test]
#[ignore = "netns: needs root"]
fn netns_strongswan_native_ipv6() {
    netns_test(
        "netns_strongswan_native_ipv6",
        Topology::builder(),
        native_ipv6,
    );
}

#[test]
#[ignore = "netns: needs root"]
fn netns_profile_proposals_native_ipv6() {
    netns_test(
        "netns_profile_proposals_native_ipv6",
        Topology::builder(),
        profile_proposals,
    );
}

fn native_ipv4_through_nat(topo: &Topology) -> Result<()> {
    let nft =
        gate64_testkit::find_tool("nft").context("`nft` not found: apt-get install nftables")?;
    let nft = path_str(&nft)?;
    // The client's LAN: 10.9.0.2 behind tcli (10.9.0.1), which masquerades it as its own
    // 198.51.100.10 towards gate64.
    let lan = Netns::new("tlan")?;
    topo.cli.veth("vlan", &lan, "vnat")?;
    topo.cli.addr_add("vlan", "10.9.0.1/24")?;
    lan.addr_add("vnat", "10.9.0.2/24")?;
    lan.ip(&["route", "add", "default", "via", "10.9.0.1"])?;
    topo.cli.sysctl("net.ipv4.ip_forward", "1")?;
    topo.cli.exec_ok(&[nft, "add", "table", "ip", "nat"])?;
    topo.cli.exec_ok(&[
        nft,
        "add chain ip nat post { type nat hook postrouting priority 100; }",
    ])?;
    topo.cli.exec_ok(&[
        nft,
        "add",
        "rule",
        "ip",
        "nat",
        "post",
        "oif",
        "vsrv",
        "masquerade",
    ])?;
    topo.srv.addr_add("vcli", &format!("{LISTEN_V4}/24"))?;
    let listen: IpAddr = LISTEN_V4.parse()?;
    two_native_tunnels(topo, &lan, listen, NAT_PUBLIC, |_| {
        // The NAT's mapping changes: its UDP entries expire after a second of silence (from
        // their next packet on), and new ones take a port of 40000-40100.
        for key in [
            "nf_conntrack_udp_timeout",
            "nf_conntrack_udp_timeout_stream",
        ] {
            topo.cli.sysctl(&format!("net.netfilter.{key}"), "1")?;
        }
        topo.cli
            .exec_ok(&[nft, "flush", "chain", "ip", "nat", "post"])?;
        topo.cli.exec_ok(&[
            nft,
            "add",
            "rule",
            "ip",
            "nat",
            "post",
            "oif",
            "vsrv",
            "meta",
            "l4proto",
            "udp",
            "masquerade",
            "to",
            ":40000-40100",
        ])?;
        // One echo refreshes the mapping under the new timeout; then silence ends it.
        topo.ping6(&lan, CORP_HOST, 1)?;
        std::thread::sleep(std::time::Duration::from_secs(3));
        // The first echo's ESP comes from the new port and moves the SA; the replies go
        // there (to the old port they would find no mapping).
        topo.ping6(&lan, CORP_HOST, 1)?;
        topo.ping6_all(&lan, CORP_HOST, 3)
            .context("ping the corporate host after the NAT mapping changed")?;
        let status = gate64_status(topo)?;
        ensure!(
            status.contains("ESP in UDP 4500:400"),
            "the infrastructure child SA moved to the new port:\n{status}"
        );
        Ok(())
    })
}

fn native_ipv6(topo: &Topology) -> Result<()> {
    let listen = ipv6_link(topo)?;
    two_native_tunnels(topo, &topo.cli, listen, CLIENT_V6, |_| Ok(()))
}

/// IPv6 between `tcli` and gate64's listen address, with no duplicate address detection
/// holding the addresses back, once gate64's address answers a ping.
fn ipv6_link(topo: &Topology) -> Result<IpAddr> {
    topo.srv.addr_add("vcli", &format!("{LISTEN_V6}/64"))?;
    topo.cli.addr_add("vsrv", &format!("{CLIENT_V6}/64"))?;
    for (ns, dev) in [(&topo.srv, "vcli"), (&topo.cli, "vsrv")] {
        ns.sysctl(&format!("net.ipv6.conf.{dev}.accept_dad"), "0")?;
    }
    gate64_testkit::wait_for(std::time::Duration::from_secs(5), || {
        topo.cli
            .exec(&["ping", "-6", "-c", "1", "-W", "1", LISTEN_V6])
            .ok()
            .filter(|o| o.status.success())
    })
    .context("gate64's IPv6 listen address answers no ping from tcli")?;
    Ok(LISTEN_V6.parse()?)
}

fn profile_proposals(topo: &Topology) -> Result<()> {
    let listen = ipv6_link(topo)?;
    let certs = LabCerts::generate(&topo.srv, &topo.srv.dir().join("certs"), listen)?;
    let opts = Gate64Options {
        without_ipsec: false,
        extra: ipsec_section_with_ca(
            topo,
            &certs,
            &certs.ca,
            &format!(
                "listen = [\"{listen}\"]\nike_proposals = [\"aes256-sha384-modp3072\"]\n\
                 esp_proposals = [\"aes128-sha256\"]\n"
            ),
        )?,
        ..Gate64Options::default()
    };
    let mut gate = topo.start_gate64(&opts)?;
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;
    // The profile from the file gate64 runs with; the client's paths are placeholders.
    let bin = gate64_binary()?;
    let keyfile = topo.srv.exec_ok(&[
        path_str(&bin)?,
        "profile",
        "networkmanager",
        "--config",
        path_str(&topo.srv.dir().join("gate64.toml"))?,
        "--server",
        LISTEN_V6,
        "--ca",
        path_str(&certs.ca)?,
        "--client-cert",
        "/etc/ipsec.d/certs/client.pem",
        "--client-key",
        "/etc/ipsec.d/private/client.key",
    ])?;
    let value = |key: &str| {
        keyfile
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_owned)
            .with_context(|| format!("no {key}= in the profile:\n{keyfile}"))
    };
    let (ike, esp) = (value("ike")?, value("esp")?);
    ensure!(
        value("remote-identity")? == LISTEN_V6,
        "gate64's identity is its certificate's first subjectAltName:\n{keyfile}"
    );
    ensure!(
        ike == "aes256-sha384-prfsha384-modp3072" && esp == "aes128-sha256",
        "the profile follows ike_proposals and esp_proposals:\n{keyfile}"
    );
    let infrastructure_ts = format!("{CORP_HOST}/128");
    let mut cfg = CharonConfig::initiator(
        listen,
        certs.initiator(),
        vec![Tunnel::new(INFRASTRUCTURE, &[&infrastructure_ts])],
    );
    cfg.ike_proposals = vec![ike];
    cfg.esp_proposals = vec![esp];
    let initiator = Charon::start(&topo.cli, "profile", cfg)?;
    let result = (|| -> Result<()> {
        initiator.load_all()?;
        initiator.initiate(INFRASTRUCTURE, INFRASTRUCTURE, INITIATE_TIMEOUT)?;
        initiator.wait_established(1, 1, SETTLE_TIMEOUT)?;
        let log = std::fs::read_to_string(initiator.log_path())?;
        for needle in [
            "selected proposal: IKE:AES_CBC_256/HMAC_SHA2_384_192/PRF_HMAC_SHA2_384/MODP_3072",
            "selected proposal: ESP:AES_CBC_128/HMAC_SHA2_256_128",
        ] {
            ensure!(log.contains(needle), "charon did not log {needle:?}");
        }
        topo.ping6(&topo.cli, CORP_HOST, 1)?;
        topo.ping6_all(&topo.cli, CORP_HOST, 3)
            .context("ping the corporate host through the infrastructure tunnel")?;
        Ok(())
    })();
    with_charon_logs(result, &[&initiator])?;
    gate.ensure_running()
}

/// `gate64 status` from the control socket.
fn gate64_status(topo: &Topology) -> Result<String> {
    let bin = gate64_binary()?;
    let socket = topo.srv.dir().join("control.sock");
    topo.srv
        .exec_ok(&[path_str(&bin)?, "status", "--socket", path_str(&socket)?])
}

/// gate64 with `[ipsec] listen = [listen]`; charon in `client` builds both tunnels to it,
/// pings the corporate host through the infrastructure tunnel, and gate64's metrics and
/// status show both SAs with the client at `outer` (what gate64 sees of it); then `then`
/// runs while the tunnels are up.
fn two_native_tunnels(
    topo: &Topology,
    client: &Netns,
    listen: IpAddr,
    outer: &str,
    then: impl FnOnce(&Charon<'_>) -> Result<()>,
) -> Result<()> {
    let certs = LabCerts::generate(&topo.srv, &topo.srv.dir().join("certs"), listen)?;
    let opts = Gate64Options {
        without_ipsec: false,
        extra: ipsec_section_with_ca(
            topo,
            &certs,
            &certs.ca,
            &format!("listen = [\"{listen}\"]\n"),
        )?,
        ..Gate64Options::default()
    };
    let mut gate = topo.start_gate64(&opts)?;
    // The corporate side routes the inner addresses back to gate64.
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;
    let infrastructure_ts = format!("{CORP_HOST}/128");
    let tunnels = vec![
        Tunnel::new(INFRASTRUCTURE, &[&infrastructure_ts]),
        Tunnel::new(INTRANET, &["2001:db8:100::/48"]),
    ];
    let initiator = Charon::start(
        client,
        "initiator",
        CharonConfig::initiator(listen, certs.initiator(), tunnels),
    )?;
    let result = (|| -> Result<()> {
        initiator.load_all()?;
        for tunnel in [INFRASTRUCTURE, INTRANET] {
            initiator.initiate(tunnel, tunnel, INITIATE_TIMEOUT)?;
        }
        let sas = initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
        for sa in &sas {
            ensure!(
                sa.remote_host == listen.to_string() && sa.remote_port == 4500,
                "IKE moved to {listen}:4500: {sa:?}"
            );
            ensure!(
                sa.children.iter().all(|c| c.udp_encap),
                "ESP in UDP: {sa:?}"
            );
        }
        topo.ping6(client, CORP_HOST, 1)?;
        topo.ping6_all(client, CORP_HOST, 3)
            .context("ping the corporate host through the infrastructure tunnel")?;
        Ok(())
    })();
    with_charon_logs(result, &[&initiator])?;
    let m = topo.metrics()?;
    for (name, at_least) in [("gate64_ipsec_qmsa", 2.0), ("gate64_ipsec_mmsa", 2.0)] {
        let v = m.sum(name, &[]);
        ensure!(v >= at_least, "{name} is {v}\n{}", gate64_lines(&m));
    }
    let ok = m.sum("gate64_ike_negotiations_total", &[("result", "ok")]);
    ensure!(ok >= 2.0, "negotiations ok: {ok}\n{}", gate64_lines(&m));
    let status = gate64_status(topo)?;
    for needle in [
        "2 child SAs, 1 clients",
        outer,
        "  infrastructure: ",
        "  intranet: ",
    ] {
        ensure!(
            status.contains(needle),
            "no {needle:?} in gate64 status:\n{status}"
        );
    }
    println!("{status}");
    with_charon_logs(then(&initiator), &[&initiator])?;
    gate.ensure_running()
}
