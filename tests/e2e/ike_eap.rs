//! IKEv2 EAP (RFC 7296 §2.16) relayed to RADIUS (RFC 3579): Debian's FreeRADIUS with its
//! `eap` module runs in gate64's namespace on 127.0.0.1:1812, `[[ipsec.eap_radius]]` points
//! at it, and strongSwan on `tcli` dials `[ipsec] listen` directly with an EAP method and an
//! `eap_id` that differs from its IKE identity (its address), authenticating gate64 by its
//! certificate:
//!
//! - `netns_eap_mschapv2_user_tunnel_through_freeradius`: alice's tunnel comes up as the
//!   intranet tunnel and pings the corporate host; then bob, with a wrong password, is
//!   refused: `gate64_ike_refused_total{reason="eap"}` rises and gate64's log names bob.
//! - `netns_eap_machine_certificate_then_mschapv2_second_round`: strongSwan's
//!   `ikev2-cert-eap` (RFC 4739): `local-1` proves the lab machine certificate, `local-2` runs
//!   EAP-MSCHAPv2 as alice, under `intranet_second_auth = "required"`. bob (wrong password
//!   in the second round) is refused under `reason="eap"`, the log naming him; alice's
//!   intranet tunnel comes up and pings, and `gate64 status` shows the machine identity,
//!   `eap:alice` as the user identity and the method `certificate+eap`.
//! - `netns_eap_windows_device_and_user_tunnels_from_one_host`: one charon with Windows'
//!   proposals (AES-256-CBC, SHA2-256, MODP-2048; ESP AES-256-CBC with SHA2-256) holds the
//!   device tunnel (machine certificate, infrastructure) and alice's EAP-MSCHAPv2 user tunnel
//!   (intranet) as two IKE SAs: gate64 shows one client with both (MMSA = QMSA = 2), the
//!   session log and FreeRADIUS's accounting detail name both identities.
//! - `netns_eap_tls_user_certificate_through_freeradius`: FreeRADIUS with its own CA and
//!   server certificate does EAP-TLS; charon proves a user certificate of that CA, connects
//!   and pings.
//! - `netns_eap_radius_servers_down`: the first of two `[[ipsec.eap_radius]]` servers has
//!   nothing listening, the client connects through the second within the first's retry
//!   budget; with FreeRADIUS stopped too the client is refused within its budget, while a
//!   certificate client on another host keeps pinging throughout.
//! - `netns_eap_radius_authorization_applies_the_access_accept`: carol's users-file entry
//!   carries `Framed-IPv6-Address`, `Session-Timeout = 8`, `Class` and `Filter-Id`: her inner
//!   address is the framed one, the `contractors` policy the Filter-Id names lets her reach
//!   the corporate host and not a second one (dropped as `policy`), `gate64 status` shows
//!   method eap, her user name and the Filter-Id, the IKE SA ends after the timeout (`reason="session_timeout"`), and
//!   FreeRADIUS's accounting detail shows the Class in the Accounting-Requests.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use gate64_testkit::freeradius::{EapTls, FreeRadius};
use gate64_testkit::strongswan::{
    Charon, CharonConfig, INFRASTRUCTURE, LabCerts, Tunnel, VerbatimConfig, with_charon_logs,
};
use gate64_testkit::{CORP_HOST, Gate64Options, Netns, Process, Topology, wait_for};

use crate::common::{
    OTHER_CORP_HOST, assert_policy_cuts, gate64_ctl, gate64_lines, netns_test, path_str,
    status_json,
};
use crate::ipsec::{
    INITIATE_TIMEOUT, POOL6, SETTLE_TIMEOUT, ipsec_section_with_ca, session_records,
};
use crate::openssl_ca::OpensslCa;

const SECRET: &str = "gate64-lab-eap-secret";
const LISTEN_V6: &str = "2001:db8:200::1";
const CLIENT_V6: &str = "2001:db8:200::10";
/// The second client host (`tatk`), routed to the listen address through `tsrv`.
const OTHER_ROUTER_V6: &str = "2001:db8:203::1";
const OTHER_V6: &str = "2001:db8:203::20";
const ALICE_PASSWORD: &str = "alice-Pa55word";
const BOB_PASSWORD: &str = "bob-Pa55word";
const CAROL_PASSWORD: &str = "carol-Pa55word";
/// Inside `ipsec.pool6` (fd00:c1::100/120).
const CAROL_FRAMED: &str = "fd00:c1::1c0";
/// The policy carol's Filter-Id names: the corporate host and nothing else.
const CONTRACTORS: &str =
    "[[policy]]\nname = \"contractors\"\nprefixes = [\"2001:db8:100:1::2/128\"]\n";
/// A corporate host outside the `contractors` policy.
/// FreeRADIUS (authentication; accounting is on 1813).
const RADIUS: &str = "127.0.0.1:1812";
/// A server that takes requests and never answers (a hung or overloaded RADIUS server): a
/// socket bound in gate64's namespace that nobody reads.
const RADIUS_SILENT: (&str, u16) = ("127.0.0.1", 1912);
/// The intranet's selectors as a client proposes them.
const INTRANET_TS: &str = "2001:db8:100::/48";
/// Proposals of a current strongSwan client.
const MODERN: (&str, &str) = ("aes256gcm16-prfsha256-ecp256", "aes256gcm16");
/// Windows with `NegotiateDH2048_AES256 = 2` (../shared/docs/native-ikev2-clients.md).
const WINDOWS: (&str, &str) = ("aes256-sha256-modp2048", "aes256-sha256");
/// gate64's retry budget per server (docs/config.md): 3 tries, 2 s apart.
const SERVER_BUDGET: Duration = Duration::from_secs(6);

#[test]
#[ignore = "netns: needs root"]
fn netns_eap_mschapv2_user_tunnel_through_freeradius() {
    netns_test(
        "netns_eap_mschapv2_user_tunnel_through_freeradius",
        Topology::builder(),
        eap_mschapv2,
    );
}

#[test]
#[ignore = "netns: needs root"]
fn netns_eap_machine_certificate_then_mschapv2_second_round() {
    netns_test(
        "netns_eap_machine_certificate_then_mschapv2_second_round",
        Topology::builder(),
        machine_then_mschapv2,
    );
}

#[test]
#[ignore = "netns: needs root"]
fn netns_eap_windows_device_and_user_tunnels_from_one_host() {
    netns_test(
        "netns_eap_windows_device_and_user_tunnels_from_one_host",
        Topology::builder(),
        windows_both_tunnels,
    );
}

#[test]
#[ignore = "netns: needs root"]
fn netns_eap_tls_user_certificate_through_freeradius() {
    netns_test(
        "netns_eap_tls_user_certificate_through_freeradius",
        Topology::builder(),
        eap_tls,
    );
}

#[test]
#[ignore = "netns: needs root"]
fn netns_eap_radius_servers_down() {
    netns_test(
        "netns_eap_radius_servers_down",
        Topology::builder().attacker(true),
        servers_down,
    );
}

#[test]
#[ignore = "netns: needs root"]
fn netns_eap_radius_authorization_applies_the_access_accept() {
    netns_test(
        "netns_eap_radius_authorization_applies_the_access_accept",
        Topology::builder(),
        eap_authorization,
    );
}

/// IPv6 between `tcli` and gate64's listen address, as the native-client tests set it up.
pub(crate) fn ipv6_link(topo: &Topology) -> Result<IpAddr> {
    topo.srv.addr_add("vcli", &format!("{LISTEN_V6}/64"))?;
    topo.cli.addr_add("vsrv", &format!("{CLIENT_V6}/64"))?;
    for (ns, dev) in [(&topo.srv, "vcli"), (&topo.cli, "vsrv")] {
        ns.sysctl(&format!("net.ipv6.conf.{dev}.accept_dad"), "0")?;
    }
    reaches_listen(&topo.cli)?;
    Ok(LISTEN_V6.parse()?)
}

fn reaches_listen(ns: &Netns) -> Result<()> {
    wait_for(Duration::from_secs(5), || {
        ns.exec(&["ping", "-6", "-c", "1", "-W", "1", LISTEN_V6])
            .ok()
            .filter(|o| o.status.success())
    })
    .with_context(|| {
        format!(
            "gate64's IPv6 listen address answers no ping from {}",
            ns.name()
        )
    })?;
    Ok(())
}

/// gate64 listening on [`LISTEN_V6`] with one `[[ipsec.eap_radius]]` table per server (in
/// order, all with [`SECRET`]) and, with `accounting`, FreeRADIUS's 127.0.0.1:1813 as its
/// RADIUS accounting server; the corporate host routes the pool back to it. Returns the
/// daemon, its certificates under the lab CA (with the lab client certificate) and the
/// listen address.
fn start_gate(
    topo: &Topology,
    servers: &[&str],
    accounting: bool,
    tables: &str,
) -> Result<(Process, LabCerts, IpAddr)> {
    start_gate_with(topo, servers, (accounting, tables), "")
}

/// [`start_gate`] with more `[ipsec]` keys (`ipsec_keys`, lines of their own).
fn start_gate_with(
    topo: &Topology,
    servers: &[&str],
    (accounting, tables): (bool, &str),
    ipsec_keys: &str,
) -> Result<(Process, LabCerts, IpAddr)> {
    let listen = ipv6_link(topo)?;
    let secret = topo
        .srv
        .write_file("eap-radius.secret", &format!("{SECRET}\n"))?;
    // gate64 refuses a secret file its group or others may read.
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    let secret = path_str(&secret)?;
    let mut keys = format!("listen = [\"{listen}\"]\n{ipsec_keys}");
    for server in servers {
        keys.push_str(&format!(
            "[[ipsec.eap_radius]]\nserver = \"{server}\"\nsecret_file = \"{secret}\"\n"
        ));
    }
    let certs = LabCerts::generate(&topo.srv, &topo.srv.dir().join("certs"), listen)?;
    let mut extra = ipsec_section_with_ca(topo, &certs, &certs.ca, &keys)?;
    if accounting {
        // Follows the `[accounting]` section ipsec_section_with_ca ends with.
        extra.push_str(&format!(
            "[[accounting.radius]]\nserver = \"127.0.0.1:1813\"\nsecret_file = \"{secret}\"\n"
        ));
    }
    extra.push_str(tables);
    let opts = Gate64Options {
        without_ipsec: false,
        extra,
        ..Gate64Options::default()
    };
    let gate = topo.start_gate64(&opts)?;
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;
    Ok((gate, certs, listen))
}

/// One swanctl connection towards gate64, with one child of the same name.
struct Conn<'a> {
    name: &'a str,
    /// The body of its `local` section (authentication and credentials); with `second`, of
    /// its `local-1` section.
    local: String,
    /// The body of a `local-2` section: an RFC 4739 second authentication round.
    second: Option<String>,
    /// More lines of its `remote` section (gate64 proves its certificate to any identity).
    remote: &'a str,
    /// The corporate selectors (`remote_ts`).
    ts: &'a str,
    /// IKE and ESP proposals.
    proposals: (&'a str, &'a str),
}

impl<'a> Conn<'a> {
    /// An EAP-MSCHAPv2 user tunnel as `user` to the intranet.
    fn mschapv2(name: &'a str, user: &str, proposals: (&'a str, &'a str)) -> Conn<'a> {
        Conn {
            name,
            local: format!("auth = eap-mschapv2\n      eap_id = {user}"),
            second: None,
            remote: "",
            ts: INTRANET_TS,
            proposals,
        }
    }
}

/// charon with the EAP plugins dialling `listen`: `conns`, the EAP `passwords` (identity,
/// secret), and credential files (`x509ca` for gate64's CA and more).
fn client_config(
    listen: IpAddr,
    conns: &[Conn<'_>],
    passwords: &[(&str, &str)],
    files: Vec<(String, PathBuf)>,
) -> VerbatimConfig {
    let strongswan_conf = "charon-systemd {\n  load = random nonce openssl pem pkcs1 pkcs8 \
        pubkey x509 revocation constraints aes sha1 sha2 md5 hmac gcm kdf attr kernel-libipsec \
        kernel-netlink socket-default vici eap-identity eap-mschapv2 eap-tls\n  \
        reuse_ikesa = no\n  port = 500\n  port_nat_t = 4500\n  install_routes = yes\n  \
        install_virtual_ip = yes\n  plugins {\n    openssl {\n      load_legacy = yes\n    \
        }\n  }\n}\n"
        .to_owned();
    let mut swanctl_conf = "connections {\n".to_owned();
    for c in conns {
        let (name, ike, esp) = (c.name, c.proposals.0, c.proposals.1);
        let locals = match &c.second {
            None => format!("local {{\n      {}\n    }}", c.local),
            Some(second) => format!(
                "local-1 {{\n      {}\n    }}\n    local-2 {{\n      {second}\n    }}",
                c.local
            ),
        };
        swanctl_conf.push_str(&format!(
            "  {name} {{\n    version = 2\n    remote_addrs = {listen}\n    vips = ::\n    \
             proposals = {ike}\n    fragmentation = yes\n    {locals}\n    \
             remote {{\n      auth = pubkey\n      id = %any\n{}    }}\n    children {{\n      \
             {name} {{\n        remote_ts = {}\n        esp_proposals = {esp}\n      }}\n    \
             }}\n  }}\n",
            c.remote, c.ts
        ));
    }
    swanctl_conf.push_str("}\nsecrets {\n");
    for (i, (id, secret)) in passwords.iter().enumerate() {
        swanctl_conf.push_str(&format!(
            "  eap-{i} {{\n    id = {id}\n    secret = \"{secret}\"\n  }}\n"
        ));
    }
    swanctl_conf.push_str("}\n");
    VerbatimConfig {
        strongswan_conf,
        swanctl_conf,
        files,
    }
}

/// FreeRADIUS authenticating alice and bob (EAP-MSCHAPv2), accounting on 1813.
fn radius_with_users(topo: &Topology) -> Result<FreeRadius> {
    FreeRadius::start_with_users(
        &topo.srv,
        "127.0.0.1",
        SECRET,
        &[("alice", ALICE_PASSWORD), ("bob", BOB_PASSWORD)],
    )
}

/// Brings up `conn` of `charon` and pings the corporate host through it.
fn connect_and_ping(topo: &Topology, charon: &Charon<'_>, conn: &str) -> Result<()> {
    charon.initiate(conn, conn, INITIATE_TIMEOUT)?;
    topo.ping6(&topo.cli, CORP_HOST, 1)?;
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .with_context(|| format!("ping the corporate host through {conn}'s tunnel"))?;
    Ok(())
}

/// `gate64_ike_refused_total{reason="eap"}`.
fn eap_refusals(topo: &Topology) -> Result<f64> {
    Ok(topo
        .metrics()?
        .sum("gate64_ike_refused_total", &[("reason", "eap")]))
}

fn eap_mschapv2(topo: &Topology) -> Result<()> {
    let radius = radius_with_users(topo)?;
    let (mut gate, certs, listen) = start_gate(topo, &[RADIUS], false, "")?;
    let config = client_config(
        listen,
        &[
            Conn::mschapv2("alice", "alice", MODERN),
            Conn::mschapv2("bob", "bob", MODERN),
        ],
        &[
            ("alice", ALICE_PASSWORD),
            ("bob", &format!("not-{BOB_PASSWORD}")),
        ],
        vec![("x509ca".to_owned(), certs.ca.clone())],
    );
    let charon = Charon::start_verbatim(&topo.cli, "eap", &config)?;
    let result = (|| -> Result<()> {
        charon.load_all()?;
        connect_and_ping(topo, &charon, "alice")?;
        let status = gate64_ctl(topo, &["status"])?;
        ensure!(
            status.contains("eap:alice") && status.contains("intranet"),
            "gate64 status shows alice's intranet tunnel:\n{status}"
        );
        let refused = charon.initiate("bob", "bob", INITIATE_TIMEOUT);
        ensure!(refused.is_err(), "bob's wrong password was accepted");
        Ok(())
    })();
    with_charon_logs(result, &[&charon]).with_context(|| radius.log())?;
    let m = topo.metrics()?;
    let eap = m.sum("gate64_ike_refused_total", &[("reason", "eap")]);
    ensure!(eap >= 1.0, "refused eap: {eap}\n{}", gate64_lines(&m));
    let log = gate.log();
    ensure!(
        log.contains("EAP authentication refused") && log.contains("eap:bob"),
        "gate64's log names bob's refusal:\n{log}"
    );
    gate.ensure_running()
}

/// The lab client certificate's subject: the Windows machine's device certificate.
const MACHINE: &str = "CN=client.gate64.lab";

/// A strongSwan `ikev2-cert-eap` client: the machine certificate in the first round, then
/// EAP-MSCHAPv2 as `user` in the second (RFC 4739).
fn machine_then<'a>(name: &'a str, user: &str) -> Conn<'a> {
    Conn {
        name,
        local: "auth = pubkey\n      certs = initiator.pem".to_owned(),
        second: Some(format!("auth = eap-mschapv2\n      eap_id = {user}")),
        remote: "",
        ts: INTRANET_TS,
        proposals: MODERN,
    }
}

fn machine_then_mschapv2(topo: &Topology) -> Result<()> {
    let radius = radius_with_users(topo)?;
    let required = "intranet_second_auth = \"required\"\n";
    let (mut gate, certs, listen) = start_gate_with(topo, &[RADIUS], (false, ""), required)?;
    let config = client_config(
        listen,
        &[machine_then("alice", "alice"), machine_then("bob", "bob")],
        &[
            ("alice", ALICE_PASSWORD),
            ("bob", &format!("not-{BOB_PASSWORD}")),
        ],
        vec![
            ("x509ca".to_owned(), certs.ca.clone()),
            ("x509".to_owned(), certs.initiator_cert.clone()),
            ("private".to_owned(), certs.initiator_key.clone()),
        ],
    );
    let charon = Charon::start_verbatim(&topo.cli, "cert-eap", &config)?;
    let result = (|| -> Result<()> {
        charon.load_all()?;
        let before = eap_refusals(topo)?;
        let refused = charon.initiate("bob", "bob", INITIATE_TIMEOUT);
        ensure!(refused.is_err(), "bob's wrong password was accepted");
        let after = eap_refusals(topo)?;
        ensure!(after >= before + 1.0, "refused eap: {before} -> {after}");
        connect_and_ping(topo, &charon, "alice")?;
        let status = status_json(topo)?;
        let sas: Vec<serde_json::Value> = status["clients"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["sas"].as_array().cloned().unwrap_or_default())
            .collect();
        ensure!(
            sas.len() == 1
                && sas[0]["identity"] == MACHINE
                && sas[0]["user_identity"] == "eap:alice"
                && sas[0]["auth_method"] == "certificate+eap"
                && sas[0]["radius_user"] == "alice"
                && sas[0]["tunnel"] == "intranet",
            "one intranet IKE SA of the machine and alice:\n{status:#}"
        );
        let text = gate64_ctl(topo, &["status"])?;
        ensure!(
            text.contains(MACHINE)
                && text.contains("eap:alice")
                && text.contains("certificate+eap"),
            "gate64 status shows both identities and the method:\n{text}"
        );
        Ok(())
    })();
    with_charon_logs(result, &[&charon]).with_context(|| radius.log())?;
    let log = gate.log();
    ensure!(
        log.contains("EAP authentication refused") && log.contains("eap:bob"),
        "gate64's log names bob's refusal:\n{log}"
    );
    gate.ensure_running()
}

fn windows_both_tunnels(topo: &Topology) -> Result<()> {
    let radius = radius_with_users(topo)?;
    let (mut gate, certs, listen) = start_gate(topo, &[RADIUS], true, "")?;
    let device = Conn {
        name: "device",
        local: "auth = pubkey\n      certs = initiator.pem".to_owned(),
        second: None,
        remote: "",
        ts: &format!("{CORP_HOST}/128"),
        proposals: WINDOWS,
    };
    let config = client_config(
        listen,
        &[device, Conn::mschapv2("user", "alice", WINDOWS)],
        &[("alice", ALICE_PASSWORD)],
        vec![
            ("x509ca".to_owned(), certs.ca.clone()),
            ("x509".to_owned(), certs.initiator_cert.clone()),
            ("private".to_owned(), certs.initiator_key.clone()),
        ],
    );
    let charon = Charon::start_verbatim(&topo.cli, "windows", &config)?;
    let result = (|| -> Result<()> {
        charon.load_all()?;
        charon.initiate("device", "device", INITIATE_TIMEOUT)?;
        connect_and_ping(topo, &charon, "user")?;
        charon.wait_established(2, 2, SETTLE_TIMEOUT)?;
        Ok(())
    })();
    with_charon_logs(result, &[&charon]).with_context(|| radius.log())?;

    // gate64's view: one client (one outer address), both tunnels, one IKE SA each.
    let m = topo.metrics()?;
    for name in ["gate64_ipsec_mmsa", "gate64_ipsec_qmsa"] {
        let v = m.sum(name, &[]);
        ensure!(v == 2.0, "{name} is {v}\n{}", gate64_lines(&m));
    }
    let status = status_json(topo)?;
    let clients = status["clients"].as_array().cloned().unwrap_or_default();
    ensure!(
        status["ike_sas"] == 2 && status["child_sas"] == 2 && clients.len() == 1,
        "one client with two IKE SAs and two child SAs expected:\n{status:#}"
    );
    let mut seen: Vec<(String, String)> = clients[0]["sas"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|sa| {
            let text = |k: &str| sa[k].as_str().unwrap_or_default().to_owned();
            (text("tunnel"), text("identity"))
        })
        .collect();
    seen.sort();
    let want = [
        ("infrastructure".to_owned(), MACHINE.to_owned()),
        ("intranet".to_owned(), "eap:alice".to_owned()),
    ];
    ensure!(
        clients[0]["outer"] == CLIENT_V6 && seen == want,
        "the device tunnel is the machine's, the user tunnel alice's:\n{status:#}"
    );

    // The session log: both tunnels of that client, each with its own identity.
    let logged = wait_for(Duration::from_secs(10), || {
        let mut seen: Vec<(String, String)> = Vec::new();
        for r in session_records(topo).ok()? {
            let id = r["identity"].as_str().unwrap_or_default().to_owned();
            if r["event"] == "connect" {
                for t in r["tunnels"].as_array()? {
                    seen.push((t.as_str()?.to_owned(), id.clone()));
                }
            } else if r["event"] == "tunnel_up" {
                seen.push((r["tunnel"].as_str()?.to_owned(), id));
            }
        }
        seen.sort();
        (seen == want).then_some(())
    });
    ensure!(
        logged.is_some(),
        "the session log lacks a tunnel or its identity:\n{}",
        std::fs::read_to_string(crate::ipsec::session_log(topo)).unwrap_or_default()
    );

    // RADIUS accounting: a Start per tunnel, the user's and the machine's.
    let starts = wait_for(Duration::from_secs(15), || {
        let records = radius.records().ok()?;
        let mut starts: Vec<(String, String)> = records
            .iter()
            .filter(|r| r.get("Acct-Status-Type").is_some_and(|s| s == "Start"))
            .map(|r| {
                let get = |k: &str| r.get(k).cloned().unwrap_or_default();
                (get("User-Name"), get("Acct-Session-Id"))
            })
            .collect();
        starts.sort();
        (starts.len() >= 2).then_some(starts)
    })
    .with_context(|| format!("fewer than two Starts: {:?}", radius.records()))?;
    println!("FreeRADIUS Starts (User-Name, Acct-Session-Id): {starts:?}");
    let has = |user: &str, tunnel: &str| {
        starts
            .iter()
            .any(|(u, id)| u == user && id.ends_with(&format!("-{tunnel}")))
    };
    ensure!(
        has("eap:alice", "intranet") && has(MACHINE, "infrastructure"),
        "accounting names both tunnels' identities: {starts:?}"
    );
    gate.ensure_running()
}

/// FreeRADIUS's own CA and server certificate, and alice's user certificate under that CA.
struct RadiusPki {
    tls: EapTls,
    /// alice's certificate and key.
    user: (PathBuf, PathBuf),
}

/// alice's user certificate: subject, DNS name and EAP identity.
const USER_CERT: &str = "alice.users.gate64.lab";

/// `listen` is gate64's IKE identity: charon's EAP-TLS checks the server's certificate
/// against it (strongSwan's `aaa_id` would name another, but charon checks that constraint
/// on gate64's certificate round, before EAP ran, and refuses).
fn radius_pki(ns: &Netns, dir: PathBuf, listen: IpAddr) -> Result<RadiusPki> {
    let ca = OpensslCa::new(ns, dir, "gate64 lab RADIUS CA")?;
    let (certificate, private_key) =
        ca.issue_server("radius", "/CN=radius.gate64.lab", &format!("IP:{listen}"))?;
    let user = ca.issue("alice", (&format!("/CN={USER_CERT}"), USER_CERT), None)?;
    Ok(RadiusPki {
        tls: EapTls {
            ca: ca.dir.join("ca.pem"),
            certificate,
            private_key,
        },
        user,
    })
}

fn eap_tls(topo: &Topology) -> Result<()> {
    let (mut gate, certs, listen) = start_gate(topo, &[RADIUS], false, "")?;
    let pki = radius_pki(&topo.srv, topo.srv.dir().join("radius-ca"), listen)?;
    let radius = FreeRadius::start_eap_tls(&topo.srv, "127.0.0.1", SECRET, &pki.tls)?;
    let user = Conn {
        name: "user",
        local: format!(
            "auth = eap-tls\n      id = {USER_CERT}\n      eap_id = {USER_CERT}\n      \
             certs = alice.pem"
        ),
        second: None,
        remote: "",
        ts: INTRANET_TS,
        proposals: MODERN,
    };
    // Beside gate64's CA (`ca.pem` in swanctl/x509ca), under a name of its own.
    let radius_ca = topo.srv.dir().join("radius-ca.pem");
    std::fs::copy(&pki.tls.ca, &radius_ca)?;
    let config = client_config(
        listen,
        &[user],
        &[],
        vec![
            ("x509ca".to_owned(), certs.ca.clone()),
            ("x509ca".to_owned(), radius_ca),
            ("x509".to_owned(), pki.user.0.clone()),
            ("private".to_owned(), pki.user.1.clone()),
        ],
    );
    let charon = Charon::start_verbatim(&topo.cli, "eap-tls", &config)?;
    let result = (|| -> Result<()> {
        charon.load_all()?;
        connect_and_ping(topo, &charon, "user")
    })();
    with_charon_logs(result, &[&charon]).with_context(|| radius.log())?;
    let status = status_json(topo)?;
    ensure!(
        status.to_string().contains(&format!("eap:{USER_CERT}")),
        "gate64 status names the EAP-TLS identity:\n{status:#}"
    );
    let log = std::fs::read_to_string(charon.log_path())?;
    let rounds = log
        .lines()
        .filter(|l| l.contains("generating IKE_AUTH request") && l.contains("EAP/RES"))
        .count();
    println!("EAP-TLS took {rounds} EAP responses from the client (gate64's cap: 12)");
    gate.ensure_running()
}

/// IPv6 from `tatk` to gate64's listen address, routed through `tsrv`.
pub(crate) fn other_host(topo: &Topology) -> Result<&Netns> {
    let atk = topo.atk()?;
    topo.srv
        .addr_add("vatk", &format!("{OTHER_ROUTER_V6}/64"))?;
    atk.addr_add("vsrv", &format!("{OTHER_V6}/64"))?;
    for (ns, dev) in [(&topo.srv, "vatk"), (atk, "vsrv")] {
        ns.sysctl(&format!("net.ipv6.conf.{dev}.accept_dad"), "0")?;
    }
    atk.ip(&["-6", "route", "add", "default", "via", OTHER_ROUTER_V6])?;
    reaches_listen(atk)?;
    Ok(atk)
}

/// How long the client's refusal may take with both servers down: each server's budget,
/// plus the IKE exchanges, with room for a loaded machine.
const REFUSAL_BOUND: Duration = Duration::from_secs(25);
/// How long connecting through the second server may take: the first's budget plus room.
const FAILOVER_BOUND: Duration = Duration::from_secs(15);

fn servers_down(topo: &Topology) -> Result<()> {
    let mut radius = radius_with_users(topo)?;
    let (host, port) = RADIUS_SILENT;
    let silent_server = topo.srv.spawn(
        "silent-radius",
        &[
            "python3",
            "-c",
            &format!(
                "import socket, time\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
                 s.bind(('{host}', {port}))\nprint('bound', flush=True)\ntime.sleep(600)\n"
            ),
        ],
    )?;
    wait_for(Duration::from_secs(10), || {
        silent_server.log().contains("bound").then_some(())
    })
    .with_context(|| format!("the silent server did not bind:\n{}", silent_server.log()))?;
    let silent = format!("{host}:{port}");
    let (mut gate, certs, listen) = start_gate(topo, &[&silent, RADIUS], false, "")?;
    // A certificate client on another host, connected before anything fails.
    let atk = other_host(topo)?;
    let device = Charon::start(
        atk,
        "device",
        CharonConfig::initiator(
            listen,
            certs.initiator(),
            vec![Tunnel::new(INFRASTRUCTURE, &[&format!("{CORP_HOST}/128")])],
        ),
    )?;
    let config = client_config(
        listen,
        &[Conn::mschapv2("alice", "alice", MODERN)],
        &[("alice", ALICE_PASSWORD)],
        vec![("x509ca".to_owned(), certs.ca.clone())],
    );
    let user = Charon::start_verbatim(&topo.cli, "eap", &config)?;
    let mut pinger: Option<Process> = None;
    let mut scenario = || -> Result<()> {
        device.load_all()?;
        device.initiate(INFRASTRUCTURE, INFRASTRUCTURE, INITIATE_TIMEOUT)?;
        topo.ping6_all(atk, CORP_HOST, 3)
            .context("the certificate client's tunnel")?;
        // Pings every 0.2 s from here until SIGINT, which makes ping print its summary.
        let deadline = (SERVER_BUDGET + FAILOVER_BOUND + REFUSAL_BOUND).as_secs();
        pinger = Some(atk.spawn(
            "device-ping",
            &[
                "ping",
                "-6",
                "-n",
                "-i",
                "0.2",
                "-w",
                &deadline.to_string(),
                &CORP_HOST.to_string(),
            ],
        )?);
        user.load_all()?;

        // The first server is silent: the second answers within the first's budget.
        let t0 = Instant::now();
        user.initiate("alice", "alice", INITIATE_TIMEOUT)?;
        let took = t0.elapsed();
        println!("EAP through the second server took {took:?}");
        ensure!(
            took >= Duration::from_secs(2) && took <= FAILOVER_BOUND,
            "connecting past the silent server took {took:?} (its budget {SERVER_BUDGET:?}, \
             bound {FAILOVER_BOUND:?})"
        );
        topo.ping6_all(&topo.cli, CORP_HOST, 3)
            .context("alice's tunnel through the second server")?;
        user.terminate("alice", SETTLE_TIMEOUT)?;

        // Both down: refused within the budget, counted.
        radius.stop();
        let before = eap_refusals(topo)?;
        let t0 = Instant::now();
        let refused = user.initiate("alice", "alice", INITIATE_TIMEOUT);
        let took = t0.elapsed();
        println!("the refusal with both servers down took {took:?}");
        ensure!(refused.is_err(), "alice connected with both servers down");
        ensure!(
            took <= REFUSAL_BOUND,
            "refusing alice with both servers down took {took:?} (bound {REFUSAL_BOUND:?})"
        );
        let after = wait_for(Duration::from_secs(5), || {
            eap_refusals(topo).ok().filter(|n| *n > before)
        });
        ensure!(
            after.is_some(),
            "gate64_ike_refused_total{{reason=\"eap\"}} did not rise from {before}\n{}",
            topo.metrics_text().unwrap_or_default()
        );
        Ok(())
    };
    let result = scenario();
    with_charon_logs(result, &[&device, &user]).with_context(|| radius.log())?;
    // The certificate client's pings, while the servers failed one by one.
    let mut pinger = pinger.context("the certificate client's pinger never started")?;
    let interrupted = std::process::Command::new("kill")
        .args(["-INT", &pinger.pid().to_string()])
        .status()?;
    ensure!(interrupted.success(), "kill -INT the pinger: {interrupted}");
    ensure!(
        pinger.wait_timeout(Duration::from_secs(5)).is_some(),
        "the certificate client's ping did not finish"
    );
    let out = pinger.log();
    ensure!(
        out.contains(" 0% packet loss"),
        "the certificate client lost pings while the RADIUS servers were down:\n{out}"
    );
    topo.ping6_all(atk, CORP_HOST, 3)
        .context("the certificate client after the servers went down")?;
    gate.ensure_running()
}

fn eap_authorization(topo: &Topology) -> Result<()> {
    let entry = format!(
        "carol Cleartext-Password := \"{CAROL_PASSWORD}\"\n\tFramed-IPv6-Address = \
         {CAROL_FRAMED},\n\tSession-Timeout = 8,\n\tClass = \"grp-a\",\n\t\
         Filter-Id = \"contractors\"\n"
    );
    let radius = FreeRadius::start_with_users_file(&topo.srv, "127.0.0.1", SECRET, &entry)?;
    let (mut gate, certs, listen) = start_gate(topo, &[RADIUS], true, CONTRACTORS)?;
    // A second corporate host, inside the intranet tunnel but outside carol's policy.
    topo.corp
        .addr_add("vsrv", &format!("{OTHER_CORP_HOST}/64"))?;
    let config = client_config(
        listen,
        &[Conn::mschapv2("carol", "carol", MODERN)],
        &[("carol", CAROL_PASSWORD)],
        vec![("x509ca".to_owned(), certs.ca.clone())],
    );
    let charon = Charon::start_verbatim(&topo.cli, "eap-authz", &config)?;
    let result = (|| -> Result<()> {
        charon.load_all()?;
        connect_and_ping(topo, &charon, "carol")?;
        let text = gate64_ctl(topo, &["status"])?;
        ensure!(
            text.contains(&format!("inner {CAROL_FRAMED}"))
                && text.contains("auth eap, RADIUS user carol, policy contractors"),
            "gate64 status shows carol's framed address, method, user and Filter-Id:\n{text}"
        );
        assert_policy_cuts(topo, "carol's policy", 0.0)?;
        let doc = status_json(topo)?;
        let sa = &doc["clients"][0]["sas"][0];
        ensure!(
            sa["auth_method"] == "eap"
                && sa["radius_user"] == "carol"
                && sa["filter_id"] == "contractors",
            "status --json: {doc}"
        );
        // Session-Timeout = 8: gone well within 60 s (the bound is loose on purpose).
        let ended = wait_for(Duration::from_secs(60), || {
            topo.metrics()
                .ok()
                .map(|m| {
                    m.sum(
                        "gate64_ipsec_disconnects_total",
                        &[("reason", "session_timeout")],
                    )
                })
                .filter(|n| *n >= 1.0)
        });
        ensure!(
            ended.is_some(),
            "carol's IKE SA did not end after its Session-Timeout"
        );
        let gone = wait_for(Duration::from_secs(20), || {
            gate64_ctl(topo, &["status"])
                .ok()
                .filter(|t| !t.contains("carol"))
        });
        ensure!(
            gone.is_some(),
            "carol still in status:\n{}",
            gate64_ctl(topo, &["status"])?
        );
        Ok(())
    })();
    with_charon_logs(result, &[&charon]).with_context(|| radius.log())?;
    // FreeRADIUS's detail records: the Start and the Stop carry the Class (octets, shown
    // as hex: "grp-a" is 0x6772702d61).
    let records = wait_for(Duration::from_secs(20), || {
        radius.records().ok().filter(|r| {
            r.iter()
                .any(|r| r.get("Acct-Status-Type").is_some_and(|s| s == "Stop"))
        })
    })
    .context("no Stop in FreeRADIUS's accounting detail")?;
    let classes: Vec<&str> = records
        .iter()
        .filter_map(|r| r.get("Class").map(String::as_str))
        .collect();
    ensure!(
        records.len() >= 2
            && classes.len() == records.len()
            && classes
                .iter()
                .all(|c| *c == "0x6772702d61" || *c == "grp-a"),
        "every Accounting-Request carries Class grp-a: {records:#?}"
    );
    gate.ensure_running()
}
