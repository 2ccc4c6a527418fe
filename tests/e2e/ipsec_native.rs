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
//! - `netns_strongswan_native_dual_stack_through_nat`: gate64 with `[ipsec] pool4` and a
//!   corporate IPv4 network; charon behind the NAT asks `vips = 0.0.0.0,::`, gets an
//!   address of each family in its intranet tunnel, and pings the corporate IPv4 host and
//!   the corporate IPv6 host through it; `gate64 status --json` shows the IPv4 address.
//! - `netns_strongswan_native_dual_stack_ipv6`: the same from `tcli` over plain IPv6.
//! - `netns_profile_proposals_native_ipv6`: gate64 narrowed by `ike_proposals` and
//!   `esp_proposals`; `gate64 profile` on its configuration file writes each kind of
//!   profile, the proposals its client would send are read from it (Windows' and Apple's
//!   names translated by this test's own tables), and charon sending just those builds the
//!   infrastructure tunnel with exactly those algorithms and pings through it (charon's
//!   default proposals would be refused).

use std::net::IpAddr;

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::{
    Charon, CharonConfig, INFRASTRUCTURE, INTRANET, LabCerts, Tunnel, with_charon_logs,
};
use gate64_testkit::{CORP_HOST, CORP_HOST_V4, Gate64Options, Netns, Topology, gate64_binary};

use crate::common::{gate64_ctl, gate64_lines, netns_test, path_str, status_json};
use crate::ipsec::{INITIATE_TIMEOUT, POOL6, SETTLE_TIMEOUT, ipsec_section_with_ca};

/// gate64's public IPv4 address for native clients (beside the Teredo ones on `tsrv`).
pub(crate) const LISTEN_V4: &str = "192.0.2.10";
/// gate64's public IPv6 address for native clients, and the client's, on the `tcli` link.
const LISTEN_V6: &str = "2001:db8:200::1";
pub(crate) const CLIENT_V6: &str = "2001:db8:200::10";
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
fn netns_strongswan_native_dual_stack_through_nat() {
    netns_test(
        "netns_strongswan_native_dual_stack_through_nat",
        Topology::builder().corp_ipv4(true),
        |topo| {
            let lan = lan_behind_nat(topo)?;
            topo.srv.addr_add("vcli", &format!("{LISTEN_V4}/24"))?;
            dual_stack_tunnel(topo, &lan, LISTEN_V4.parse()?)
        },
    );
}

#[test]
#[ignore = "netns: needs root"]
fn netns_strongswan_native_dual_stack_ipv6() {
    netns_test(
        "netns_strongswan_native_dual_stack_ipv6",
        Topology::builder().corp_ipv4(true),
        |topo| {
            let listen = ipv6_link(topo)?;
            dual_stack_tunnel(topo, &topo.cli, listen)
        },
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

/// `nft`, for the NAT.
fn nft() -> Result<String> {
    let nft =
        gate64_testkit::find_tool("nft").context("`nft` not found: apt-get install nftables")?;
    Ok(path_str(&nft)?.to_owned())
}

/// The addresses of the client LAN behind `tcli`, for [`lan_behind_nat_with`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct LanNat<'a> {
    /// `tcli`'s address on the LAN (the LAN's default gateway), with its prefix length.
    pub(crate) gateway: &'a str,
    /// The client's address on the LAN (`tlan`'s `vnat`), with its prefix length.
    pub(crate) client: &'a str,
}

impl Default for LanNat<'_> {
    fn default() -> Self {
        Self {
            gateway: "10.9.0.1/24",
            client: "10.9.0.2/24",
        }
    }
}

/// A client LAN `tlan` (10.9.0.2) behind `tcli` (10.9.0.1), which masquerades it as its own
/// 198.51.100.10 towards gate64 (nftables).
pub(crate) fn lan_behind_nat(topo: &Topology) -> Result<Netns> {
    lan_behind_nat_with(topo, LanNat::default())
}

/// [`lan_behind_nat`] with the LAN's addresses given: `tlan`'s `vnat` gets `addrs.client`,
/// `tcli`'s `vlan0` gets `addrs.gateway`, which is `tlan`'s default route.
pub(crate) fn lan_behind_nat_with(topo: &Topology, addrs: LanNat<'_>) -> Result<Netns> {
    lans_behind_nat_with(topo, &[("tlan", addrs)])?
        .pop()
        .context("no LAN namespace was made")
}

/// One client LAN per tag behind `tcli`, all masqueraded as its own 198.51.100.10 towards
/// gate64 (one nftables rule): the LAN namespace of `tags[i]` has 10.9.i.2/24 on `vnat`,
/// its default route via `tcli`'s 10.9.i.1 on `vlan<i>`.
pub(crate) fn lans_behind_nat(topo: &Topology, tags: &[&str]) -> Result<Vec<Netns>> {
    let addrs: Vec<(String, String)> = (0..tags.len())
        .map(|i| (format!("10.9.{i}.1/24"), format!("10.9.{i}.2/24")))
        .collect();
    let lans: Vec<(&str, LanNat<'_>)> = tags
        .iter()
        .zip(&addrs)
        .map(|(tag, (gateway, client))| (*tag, LanNat { gateway, client }))
        .collect();
    lans_behind_nat_with(topo, &lans)
}

/// The LANs `(tag, addresses)` behind `tcli` (`vlan<i>` on its side, `vnat` on theirs),
/// masqueraded as `tcli`'s own address towards gate64.
fn lans_behind_nat_with(topo: &Topology, lans: &[(&str, LanNat<'_>)]) -> Result<Vec<Netns>> {
    let nft = nft()?;
    let nft = nft.as_str();
    let mut made = Vec::with_capacity(lans.len());
    for (i, (tag, addrs)) in lans.iter().enumerate() {
        let gateway = addrs
            .gateway
            .split_once('/')
            .map_or(addrs.gateway, |(addr, _)| addr);
        let lan = Netns::new(tag)?;
        let uplink = format!("vlan{i}");
        topo.cli.veth(&uplink, &lan, "vnat")?;
        topo.cli.addr_add(&uplink, addrs.gateway)?;
        lan.addr_add("vnat", addrs.client)?;
        lan.ip(&["route", "add", "default", "via", gateway])?;
        made.push(lan);
    }
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
    Ok(made)
}

/// How many times the NAT mapping is let expire before the test gives up on seeing it change.
const MAPPING_CHANGE_TRIES: usize = 4;

fn native_ipv4_through_nat(topo: &Topology) -> Result<()> {
    let nft = nft()?;
    let nft = nft.as_str();
    let lan = lan_behind_nat(topo)?;
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
        // One echo refreshes the mapping under the new timeout; then silence ends it. Any
        // packet of the silence (a liveness check of either IKE SA, which share the
        // mapping; a NAT keepalive) refreshes it again, so the silence is waited for anew,
        // a bounded number of times, until the mapping did change.
        let mut status = String::new();
        for _ in 0..MAPPING_CHANGE_TRIES {
            topo.ping6(&lan, CORP_HOST, 1)?;
            std::thread::sleep(std::time::Duration::from_secs(3));
            // The first echo's ESP comes from the new port and moves the SA; the replies go
            // there (to the old port they would find no mapping).
            topo.ping6(&lan, CORP_HOST, 1)?;
            topo.ping6_all(&lan, CORP_HOST, 3)
                .context("ping the corporate host after the NAT mapping changed")?;
            status = gate64_ctl(topo, &["status"])?;
            if status.contains("ESP in UDP 4500:400") {
                break;
            }
        }
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
pub(crate) fn ipv6_link(topo: &Topology) -> Result<IpAddr> {
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

/// gate64's `[ipsec]` narrowing for the profile test: Windows (no SHA2-512, no Curve25519)
/// can only meet the first entry, the others take the second (AES-GCM comes first).
const PROFILE_IKE: &str = "ike_proposals = [\"aes128-sha384-ecp384\", \
                           \"aes256gcm16-prfsha512-curve25519\"]\nesp_proposals = [\"aes128-sha256\"]\n";

/// Each profile kind, the strongSwan proposals (IKE, ESP) its client then sends, read from
/// the profile with this test's own tables of Windows' and Apple's names.
const PROFILE_KINDS: [(&str, &str, &str); 4] = [
    (
        "networkmanager",
        "aes256gcm16-prfsha512-curve25519",
        "aes128-sha256",
    ),
    (
        "android",
        "aes256gcm16-prfsha512-curve25519",
        "aes128-sha256",
    ),
    ("apple", "aes256gcm16-prfsha512-curve25519", "aes128-sha256"),
    ("windows", "aes128-sha384-ecp384", "aes128-sha256"),
];

/// The text between `<name>` and `</name>`, first occurrence.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    xml.split(&format!("<{name}>"))
        .nth(1)?
        .split(&format!("</{name}>"))
        .next()
}

/// The plist value after each `<key>name</key>`, in order.
fn plist_values<'a>(plist: &'a str, name: &str) -> Vec<&'a str> {
    plist
        .split(&format!("<key>{name}</key>"))
        .skip(1)
        .filter_map(|rest| {
            let v = rest.trim_start().split_once('>')?.1;
            v.split('<').next()
        })
        .collect()
}

/// The (IKE, ESP) proposals a client configured by `profile` of `kind` sends, in strongSwan's
/// notation.
fn profile_proposals_of(kind: &str, profile: &str) -> Result<(String, String)> {
    let line = |key: &str| {
        profile
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_owned)
            .with_context(|| format!("no {key}= in:\n{profile}"))
    };
    let json = |key: &str| -> Result<String> {
        let v: serde_json::Value = serde_json::from_str(profile)?;
        v[key]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("no {key} in:\n{profile}"))
    };
    Ok(match kind {
        "networkmanager" => (line("ike")?, line("esp")?),
        "android" => (json("ike-proposal")?, json("esp-proposal")?),
        "apple" => {
            let (encr, integ, group) = (
                plist_values(profile, "EncryptionAlgorithm"),
                plist_values(profile, "IntegrityAlgorithm"),
                plist_values(profile, "DiffieHellmanGroup"),
            );
            let hash = |h: &str| match h {
                "SHA2-256" => "sha256",
                "SHA2-384" => "sha384",
                "SHA2-512" => "sha512",
                _ => "unknown",
            };
            let cipher = |e: &str| match e {
                "AES-256-GCM" => "aes256gcm16",
                "AES-128-GCM" => "aes128gcm16",
                "AES-256" => "aes256",
                "AES-128" => "aes128",
                _ => "unknown",
            };
            let g = match group.first().copied() {
                Some("19") => "ecp256",
                Some("20") => "ecp384",
                Some("31") => "curve25519",
                Some("14") => "modp2048",
                _ => "unknown",
            };
            let (e0, i0) = (cipher(encr[0]), hash(integ[0]));
            let ike = if e0.contains("gcm") {
                format!("{e0}-prf{i0}-{g}")
            } else {
                format!("{e0}-{i0}-{g}")
            };
            let e1 = cipher(encr[1]);
            let esp = if e1.contains("gcm") {
                e1.to_owned()
            } else {
                format!("{e1}-{}", hash(integ[1]))
            };
            (ike, esp)
        }
        "windows" => {
            let get = |n: &str| element(profile, n).unwrap_or("unknown");
            let ike_encr = match get("EncryptionMethod") {
                "AES_GCM_256" => "aes256gcm16",
                "AES_GCM_128" => "aes128gcm16",
                "AES256" => "aes256",
                "AES128" => "aes128",
                _ => "unknown",
            };
            let hash = match get("IntegrityCheckMethod") {
                "SHA256" => "sha256",
                "SHA384" => "sha384",
                _ => "unknown",
            };
            let group = match get("DHGroup") {
                "ECP256" => "ecp256",
                "ECP384" => "ecp384",
                "Group14" => "modp2048",
                _ => "unknown",
            };
            let ike = if ike_encr.contains("gcm") {
                format!("{ike_encr}-prf{hash}-{group}")
            } else {
                format!("{ike_encr}-{hash}-{group}")
            };
            let esp = match (
                get("CipherTransformConstants"),
                get("AuthenticationTransformConstants"),
            ) {
                ("GCMAES256", "GCMAES256") => "aes256gcm16".to_owned(),
                ("GCMAES128", "GCMAES128") => "aes128gcm16".to_owned(),
                ("AES256", "SHA256128") => "aes256-sha256".to_owned(),
                ("AES128", "SHA256128") => "aes128-sha256".to_owned(),
                other => format!("unknown {other:?}"),
            };
            (ike, esp)
        }
        _ => anyhow::bail!("no profile kind {kind}"),
    })
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
            &format!("listen = [\"{listen}\"]\n{PROFILE_IKE}"),
        )?,
        ..Gate64Options::default()
    };
    let mut gate = topo.start_gate64(&opts)?;
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;
    let bin = gate64_binary()?;
    for (kind, want_ike, want_esp) in PROFILE_KINDS {
        // The profile from the file gate64 runs with; the client's paths are placeholders.
        let profile = topo.srv.exec_ok(&[
            path_str(&bin)?,
            "profile",
            kind,
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
        let (ike, esp) = profile_proposals_of(kind, &profile)?;
        ensure!(
            (ike.as_str(), esp.as_str()) == (want_ike, want_esp),
            "{kind}: the profile proposes {ike} / {esp}, not {want_ike} / {want_esp}:\n{profile}"
        );
        if kind == "networkmanager" {
            ensure!(
                profile.contains(&format!("remote-identity={LISTEN_V6}\n")),
                "gate64's identity is its certificate's first subjectAltName:\n{profile}"
            );
        }
        let infrastructure_ts = format!("{CORP_HOST}/128");
        let mut cfg = CharonConfig::initiator(
            listen,
            certs.initiator(),
            vec![Tunnel::new(INFRASTRUCTURE, &[&infrastructure_ts])],
        );
        cfg.ike_proposals = vec![ike];
        cfg.esp_proposals = vec![esp];
        let initiator = Charon::start(&topo.cli, kind, cfg)?;
        let selected = if kind == "windows" {
            "IKE:AES_CBC_128/HMAC_SHA2_384_192/PRF_HMAC_SHA2_384/ECP_384"
        } else {
            "IKE:AES_GCM_16_256/PRF_HMAC_SHA2_512/CURVE_25519"
        };
        let result = (|| -> Result<()> {
            initiator.load_all()?;
            initiator.initiate(INFRASTRUCTURE, INFRASTRUCTURE, INITIATE_TIMEOUT)?;
            initiator.wait_established(1, 1, SETTLE_TIMEOUT)?;
            let log = std::fs::read_to_string(initiator.log_path())?;
            for needle in [selected, "ESP:AES_CBC_128/HMAC_SHA2_256_128"] {
                let needle = format!("selected proposal: {needle}");
                ensure!(log.contains(&needle), "charon did not log {needle:?}");
            }
            topo.ping6(&topo.cli, CORP_HOST, 1)?;
            topo.ping6_all(&topo.cli, CORP_HOST, 3)
                .context("ping the corporate host through the infrastructure tunnel")?;
            initiator.terminate(INFRASTRUCTURE, INITIATE_TIMEOUT)?;
            Ok(())
        })();
        with_charon_logs(result, &[&initiator]).with_context(|| format!("the {kind} profile"))?;
    }
    gate.ensure_running()
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
    let status = gate64_ctl(topo, &["status"])?;
    let client = format!("{outer}: native, inner ");
    for needle in [
        "2 child SAs, 1 clients",
        &client,
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

/// gate64's inner IPv4 pool in the dual-stack tests, and the corporate IPv4 network (the
/// topology's, `tcorp` 10.20.0.2 routed back through `tsrv`).
const POOL4: &str = "10.77.0.0/24";
const CORP_NET_V4: &str = "10.20.0.0/24";

/// gate64 with `[ipsec] listen = [listen]`, `pool4` and `corpnet.ipv4_prefixes`; charon in
/// `client` asks for an address of each family in its intranet tunnel (IPv6 and IPv4
/// corporate networks), pings the corporate IPv4 and IPv6 hosts through it, and gate64's
/// status shows the client's IPv4 address.
fn dual_stack_tunnel(topo: &Topology, client: &Netns, listen: IpAddr) -> Result<()> {
    let certs = LabCerts::generate(&topo.srv, &topo.srv.dir().join("certs"), listen)?;
    let opts = Gate64Options {
        without_ipsec: false,
        extra: ipsec_section_with_ca(
            topo,
            &certs,
            &certs.ca,
            &format!("listen = [\"{listen}\"]\npool4 = \"{POOL4}\"\n"),
        )?,
        ..Gate64Options::default()
    };
    let corp6 = "ipv6_prefixes = [\"2001:db8:100::/48\"]\n";
    let toml = opts.config_toml();
    ensure!(toml.contains(corp6), "the lab's [corpnet] changed:\n{toml}");
    let toml = toml.replace(
        corp6,
        &format!("{corp6}ipv4_prefixes = [\"{CORP_NET_V4}\"]\n"),
    );
    let mut gate = topo.start_gate64_with(&toml)?;
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;
    let mut config = CharonConfig::initiator(
        listen,
        certs.initiator(),
        vec![Tunnel::new(INTRANET, &["2001:db8:100::/48", CORP_NET_V4])],
    );
    config.vips = "0.0.0.0,::".to_owned();
    let initiator = Charon::start(client, "initiator", config)?;
    let pool4: ipnet::Ipv4Net = POOL4.parse()?;
    let result = (|| -> Result<std::net::Ipv4Addr> {
        initiator.load_all()?;
        initiator.initiate(INTRANET, INTRANET, INITIATE_TIMEOUT)?;
        let sas = initiator.wait_established(1, 1, SETTLE_TIMEOUT)?;
        let vips = &sas[0].local_vips;
        let v4 = vips
            .iter()
            .find_map(|a| match a {
                IpAddr::V4(v4) if pool4.contains(v4) => Some(*v4),
                _ => None,
            })
            .with_context(|| format!("no IPv4 virtual IP from {POOL4}: {:?}", sas[0]))?;
        ensure!(
            vips.iter().any(IpAddr::is_ipv6),
            "no IPv6 virtual IP: {:?}",
            sas[0]
        );
        ping4_all(client, CORP_HOST_V4, 3)
            .context("ping the corporate IPv4 host through the tunnel")?;
        topo.ping6(client, CORP_HOST, 1)?;
        topo.ping6_all(client, CORP_HOST, 3)
            .context("ping the corporate IPv6 host through the tunnel")?;
        Ok(v4)
    })();
    let v4 = with_charon_logs(result, &[&initiator])?;
    let status = status_json(topo)?;
    println!("{status:#}");
    let address4 = &status["clients"][0]["address4"];
    ensure!(
        address4.as_str() == Some(v4.to_string().as_str()),
        "gate64 status shows {address4} for the client's IPv4 address {v4}:\n{status:#}"
    );
    gate.ensure_running()
}

/// Three IPv4 echoes from `from` to `dst`, every one answered.
fn ping4_all(from: &Netns, dst: std::net::Ipv4Addr, count: u32) -> Result<()> {
    let count = count.to_string();
    let dst = dst.to_string();
    let out = from.exec(&["ping", "-4", "-c", &count, "-i", "0.2", "-W", "2", &dst])?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && text.contains(&format!("{count} received")),
        "ping {dst}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
