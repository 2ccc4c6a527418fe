//! IKEv2 EAP (RFC 7296 §2.16) relayed to RADIUS (RFC 3579): Debian's FreeRADIUS with its
//! `eap` module and a users file runs in gate64's namespace on 127.0.0.1:1812,
//! `[[ipsec.eap_radius]]` points at it, and strongSwan on `tcli` dials `[ipsec] listen`
//! directly with `auth = eap-mschapv2` and an `eap_id` that differs from its IKE identity
//! (its address), authenticating gate64 by its certificate:
//!
//! - `netns_eap_mschapv2_user_tunnel_through_freeradius`: alice's tunnel comes up as the
//!   intranet tunnel and pings the corporate host; then bob, with a wrong password, is
//!   refused: `gate64_ike_refused_total{reason="eap"}` rises and gate64's log names bob.

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

#[test]
#[ignore = "netns: needs root"]
fn netns_eap_mschapv2_user_tunnel_through_freeradius() {
    netns_test(
        "netns_eap_mschapv2_user_tunnel_through_freeradius",
        Topology::builder(),
        eap_mschapv2,
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
    let swanctl_conf = format!(
        "connections {{\n{}{}}}\nsecrets {{\n  eap-alice {{\n    id = alice\n    \
         secret = \"{ALICE_PASSWORD}\"\n  }}\n  eap-bob {{\n    id = bob\n    \
         secret = \"not-{BOB_PASSWORD}\"\n  }}\n}}\n",
        connection("alice", "alice"),
        connection("bob", "bob"),
    );
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
