//! IKEv2 EAP (RFC 7296 §2.16) relayed to RADIUS (RFC 3579): Debian's FreeRADIUS with its
//! `eap` module and a users file runs in gate64's namespace on 127.0.0.1:1812,
//! `[[ipsec.eap_radius]]` points at it, and strongSwan on `tcli` dials `[ipsec] listen`
//! directly with `auth = eap-mschapv2` and an `eap_id` that differs from its IKE identity
//! (its address), authenticating gate64 by its certificate:
//!
//! - `netns_eap_mschapv2_user_tunnel_through_freeradius`: alice's tunnel comes up as the
//!   intranet tunnel and pings the corporate host; then bob, with a wrong password, is
//!   refused: `gate64_ike_refused_total{reason="eap"}` rises and gate64's log names bob.
//! - `netns_eap_radius_authorization_applies_the_access_accept`: carol's users-file entry
//!   carries `Framed-IPv6-Address`, `Session-Timeout = 8`, `Class` and `Filter-Id`: her inner
//!   address is the framed one, `gate64 status` shows method eap, her user name and the
//!   Filter-Id, the IKE SA ends after the timeout (`reason="session_timeout"`), and
//!   FreeRADIUS's accounting detail shows the Class in the Accounting-Requests.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_testkit::freeradius::FreeRadius;
use gate64_testkit::strongswan::{Charon, LabCerts, VerbatimConfig, with_charon_logs};
use gate64_testkit::{CORP_HOST, Gate64Options, Topology, wait_for};

use crate::common::{gate64_lines, netns_test, path_str};
use crate::ipsec::{INITIATE_TIMEOUT, POOL6, SETTLE_TIMEOUT, ipsec_section_with_ca};

const SECRET: &str = "gate64-lab-eap-secret";
const LISTEN_V6: &str = "2001:db8:200::1";
const CLIENT_V6: &str = "2001:db8:200::10";
const ALICE_PASSWORD: &str = "alice-Pa55word";
const BOB_PASSWORD: &str = "bob-Pa55word";
const CAROL_PASSWORD: &str = "carol-Pa55word";
/// Inside `ipsec.pool6` (fd00:c1::100/120).
const CAROL_FRAMED: &str = "fd00:c1::1c0";

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
fn netns_eap_radius_authorization_applies_the_access_accept() {
    netns_test(
        "netns_eap_radius_authorization_applies_the_access_accept",
        Topology::builder(),
        eap_authorization,
    );
}

/// IPv6 between `tcli` and gate64's listen address, as the native-client tests set it up.
fn ipv6_link(topo: &Topology) -> Result<IpAddr> {
    topo.srv.addr_add("vcli", &format!("{LISTEN_V6}/64"))?;
    topo.cli.addr_add("vsrv", &format!("{CLIENT_V6}/64"))?;
    for (ns, dev) in [(&topo.srv, "vcli"), (&topo.cli, "vsrv")] {
        ns.sysctl(&format!("net.ipv6.conf.{dev}.accept_dad"), "0")?;
    }
    wait_for(Duration::from_secs(5), || {
        topo.cli
            .exec(&["ping", "-6", "-c", "1", "-W", "1", LISTEN_V6])
            .ok()
            .filter(|o| o.status.success())
    })
    .context("gate64's IPv6 listen address answers no ping from tcli")?;
    Ok(LISTEN_V6.parse()?)
}

/// charon with the EAP plugins; two connections, alice's (right password) and bob's (wrong).
fn client_config(listen: IpAddr, ca: &std::path::Path) -> VerbatimConfig {
    client_config_for(
        listen,
        ca,
        &[
            ("alice", ALICE_PASSWORD),
            ("bob", &format!("not-{BOB_PASSWORD}")),
        ],
    )
}

/// charon with the EAP plugins and one connection per `(user, password)`.
fn client_config_for(
    listen: IpAddr,
    ca: &std::path::Path,
    users: &[(&str, &str)],
) -> VerbatimConfig {
    let strongswan_conf = "charon-systemd {\n  load = random nonce openssl pem pkcs1 pkcs8 \
        pubkey x509 revocation constraints aes sha1 sha2 md5 hmac gcm kdf attr kernel-libipsec \
        kernel-netlink socket-default vici eap-identity eap-mschapv2\n  reuse_ikesa = no\n  \
        port = 500\n  port_nat_t = 4500\n  install_routes = yes\n  install_virtual_ip = yes\n  \
        plugins {\n    openssl {\n      load_legacy = yes\n    }\n  }\n}\n"
        .to_owned();
    let connection = |name: &str, user: &str| {
        format!(
            "  {name} {{\n    version = 2\n    remote_addrs = {listen}\n    vips = ::\n    \
             proposals = aes256gcm16-prfsha256-ecp256\n    fragmentation = yes\n    \
             local {{\n      auth = eap-mschapv2\n      eap_id = {user}\n    }}\n    \
             remote {{\n      auth = pubkey\n      id = %any\n    }}\n    children {{\n      \
             {name} {{\n        remote_ts = 2001:db8:100::/48\n        \
             esp_proposals = aes256gcm16\n      }}\n    }}\n  }}\n"
        )
    };
    let connections: String = users.iter().map(|(u, _)| connection(u, u)).collect();
    let secrets: String = users
        .iter()
        .map(|(u, p)| format!("  eap-{u} {{\n    id = {u}\n    secret = \"{p}\"\n  }}\n"))
        .collect();
    let swanctl_conf = format!("connections {{\n{connections}}}\nsecrets {{\n{secrets}}}\n");
    VerbatimConfig {
        strongswan_conf,
        swanctl_conf,
        files: vec![("x509ca".to_owned(), ca.to_path_buf())],
    }
}

fn eap_mschapv2(topo: &Topology) -> Result<()> {
    let listen = ipv6_link(topo)?;
    let radius = FreeRadius::start_with_users(
        &topo.srv,
        "127.0.0.1",
        SECRET,
        &[("alice", ALICE_PASSWORD), ("bob", BOB_PASSWORD)],
    )?;
    let secret = topo
        .srv
        .write_file("eap-radius.secret", &format!("{SECRET}\n"))?;
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    let certs = LabCerts::generate(&topo.srv, &topo.srv.dir().join("certs"), listen)?;
    let opts = Gate64Options {
        without_ipsec: false,
        extra: ipsec_section_with_ca(
            topo,
            &certs,
            &certs.ca,
            &format!(
                "listen = [\"{listen}\"]\n[[ipsec.eap_radius]]\nserver = \"127.0.0.1:1812\"\n\
                 secret_file = \"{}\"\n",
                path_str(&secret)?
            ),
        )?,
        ..Gate64Options::default()
    };
    let mut gate = topo.start_gate64(&opts)?;
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;
    let charon = Charon::start_verbatim(&topo.cli, "eap", &client_config(listen, &certs.ca))?;
    let result = (|| -> Result<()> {
        charon.load_all()?;
        charon.initiate("alice", "alice", INITIATE_TIMEOUT)?;
        charon.wait_established(1, 1, SETTLE_TIMEOUT)?;
        topo.ping6(&topo.cli, CORP_HOST, 1)?;
        topo.ping6_all(&topo.cli, CORP_HOST, 3)
            .context("ping the corporate host through alice's EAP tunnel")?;
        let status = topo.srv.exec_ok(&[
            path_str(&gate64_testkit::gate64_binary()?)?,
            "status",
            "--socket",
            path_str(&topo.srv.dir().join("control.sock"))?,
        ])?;
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

fn eap_authorization(topo: &Topology) -> Result<()> {
    let listen = ipv6_link(topo)?;
    let entry = format!(
        "carol Cleartext-Password := \"{CAROL_PASSWORD}\"\n\tFramed-IPv6-Address = \
         {CAROL_FRAMED},\n\tSession-Timeout = 8,\n\tClass = \"grp-a\",\n\t\
         Filter-Id = \"contractors\"\n"
    );
    let radius = FreeRadius::start_with_users_file(&topo.srv, "127.0.0.1", SECRET, &entry)?;
    let secret = topo
        .srv
        .write_file("eap-radius.secret", &format!("{SECRET}\n"))?;
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    let certs = LabCerts::generate(&topo.srv, &topo.srv.dir().join("certs"), listen)?;
    let secret = path_str(&secret)?;
    // The same secret for accounting: FreeRADIUS knows 127.0.0.1 by one.
    let extra = format!(
        "{}[[accounting.radius]]\nserver = \"127.0.0.1:1813\"\nsecret_file = \"{secret}\"\n",
        ipsec_section_with_ca(
            topo,
            &certs,
            &certs.ca,
            &format!(
                "listen = [\"{listen}\"]\n[[ipsec.eap_radius]]\nserver = \"127.0.0.1:1812\"\n\
                 secret_file = \"{secret}\"\n"
            ),
        )?
    );
    let opts = Gate64Options {
        without_ipsec: false,
        extra,
        ..Gate64Options::default()
    };
    let mut gate = topo.start_gate64(&opts)?;
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;
    let config = client_config_for(listen, &certs.ca, &[("carol", CAROL_PASSWORD)]);
    let charon = Charon::start_verbatim(&topo.cli, "eap-authz", &config)?;
    let status = || -> Result<String> {
        topo.srv.exec_ok(&[
            path_str(&gate64_testkit::gate64_binary()?)?,
            "status",
            "--socket",
            path_str(&topo.srv.dir().join("control.sock"))?,
        ])
    };
    let result = (|| -> Result<()> {
        charon.load_all()?;
        charon.initiate("carol", "carol", INITIATE_TIMEOUT)?;
        charon.wait_established(1, 1, SETTLE_TIMEOUT)?;
        let text = status()?;
        ensure!(
            text.contains(&format!("inner {CAROL_FRAMED}"))
                && text.contains("auth eap, RADIUS user carol, policy contractors"),
            "gate64 status shows carol's framed address, method, user and Filter-Id:\n{text}"
        );
        let json = topo.srv.exec_ok(&[
            path_str(&gate64_testkit::gate64_binary()?)?,
            "status",
            "--json",
            "--socket",
            path_str(&topo.srv.dir().join("control.sock"))?,
        ])?;
        ensure!(
            json.contains(r#""auth_method":"eap""#)
                && json.contains(r#""radius_user":"carol""#)
                && json.contains(r#""filter_id":"contractors""#),
            "status --json: {json}"
        );
        topo.ping6_all(&topo.cli, CORP_HOST, 3)
            .context("ping the corporate host through carol's tunnel")?;
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
            status().ok().filter(|t| !t.contains("carol"))
        });
        ensure!(gone.is_some(), "carol still in status:\n{}", status()?);
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
