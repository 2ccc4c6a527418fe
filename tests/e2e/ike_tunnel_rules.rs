//! `[[ipsec.tunnel_rule]]` against `gate64 serve` in namespaces, with strongSwan's charon as a
//! Windows-style client over Teredo.
//!
//! - `netns_ike_tunnel_rule_sorts_two_any_clients_by_ca`: gate64 trusts the lab's clients CA and
//!   a second "device" CA (made with `openssl ca`), with one rule: certificates of the device CA
//!   are the infrastructure tunnel. One charon builds two IKE SAs, as a Windows machine builds
//!   its device and user tunnels: the first with a machine certificate of the device CA, the
//!   second with the lab's client certificate, both proposing `remote_ts = ::/0` and neither
//!   naming its tunnel. Both come up (no TS_UNACCEPTABLE, nothing replaced): the first as the
//!   infrastructure tunnel, its selectors narrowed to `infrastructure_prefixes`, the second as
//!   the intranet, in charon's SAs, `gate64 status --json`, the MMSA/QMSA gauges and the
//!   session log (the session's connect line and its tunnel_up line).

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::{Charon, VerbatimConfig, with_charon_logs};
use gate64_testkit::{CORP_HOST, Topology, wait_for};

use crate::common::{gate64_lines, netns_test, path_str, status_json};
use crate::ipsec::{
    GATE64_ADDRESS6, INITIATE_TIMEOUT, SETTLE_TIMEOUT, TeredoIpsecLab, session_records,
};
use crate::openssl_ca::OpensslCa;

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_tunnel_rule_sorts_two_any_clients_by_ca() {
    netns_test(
        "netns_ike_tunnel_rule_sorts_two_any_clients_by_ca",
        Topology::builder(),
        two_any_clients_by_ca,
    );
}

/// charon's settings: those of docs/clients/strongswan.md (kernel-libipsec installs a child
/// SA only with its virtual IP and route in place), one IKE SA per connection.
const STRONGSWAN_CONF: &str = "charon {\n  load = random nonce openssl pem pkcs1 pkcs8 pubkey \
     x509 revocation constraints aes sha1 sha2 hmac gcm kdf attr kernel-libipsec \
     kernel-netlink socket-default vici\n  reuse_ikesa = no\n  install_routes = yes\n  \
     install_virtual_ip = yes\n  retransmit_timeout = 2\n  retransmit_tries = 5\n}\n";

/// One connection named `name` (its child too) authenticating with the certificate file
/// `cert`, asking for `::/0` without naming a tunnel.
fn connection(name: &str, cert: &str) -> String {
    format!(
        "  {name} {{\n    version = 2\n    remote_addrs = {GATE64_ADDRESS6}\n    vips = ::\n    \
         proposals = aes256gcm16-prfsha256-ecp256\n    fragmentation = yes\n    \
         unique = never\n    local {{\n      auth = pubkey\n      certs = {cert}\n    }}\n    \
         remote {{\n      auth = pubkey\n      id = %any\n    }}\n    children {{\n      \
         {name} {{\n        remote_ts = ::/0\n        esp_proposals = aes256gcm16\n        \
         mode = tunnel\n        start_action = none\n      }}\n    }}\n  }}\n"
    )
}

fn file_name(path: &std::path::Path) -> Result<String> {
    Ok(path
        .file_name()
        .with_context(|| format!("{} has no file name", path.display()))?
        .to_string_lossy()
        .into_owned())
}

fn two_any_clients_by_ca(topo: &Topology) -> Result<()> {
    let device = OpensslCa::new(
        &topo.srv,
        topo.srv.dir().join("device-ca"),
        "gate64 device CA",
    )?;
    let (machine_cert, machine_key) =
        device.issue("pc1", ("/CN=pc1.gate64.lab", "pc1.gate64.lab"), None)?;
    let device_ca = device.dir.join("ca.pem");
    // After the lab's [accounting] section: the rule's table belongs to [ipsec] all the same.
    let rule = format!(
        "[[ipsec.tunnel_rule]]\ntunnel = \"infrastructure\"\nca = \"{}\"\n",
        path_str(&device_ca)?
    );
    let mut lab =
        TeredoIpsecLab::start_accounting(topo, Some(&device_ca), "", Some("info"), &rule, |_| {
            Ok(())
        })?;
    let user_cert = lab.certs.initiator_cert.clone();
    let swanctl_conf = format!(
        "connections {{\n{}{}}}\n",
        connection("device", &file_name(&machine_cert)?),
        connection("user", &file_name(&user_cert)?)
    );
    let config = VerbatimConfig {
        strongswan_conf: STRONGSWAN_CONF.to_owned(),
        swanctl_conf,
        files: vec![
            ("x509".to_owned(), machine_cert.clone()),
            ("private".to_owned(), machine_key.clone()),
            ("x509".to_owned(), user_cert.clone()),
            ("private".to_owned(), lab.certs.initiator_key.clone()),
            ("x509ca".to_owned(), lab.certs.ca.clone()),
        ],
    };
    let charon = Charon::start_verbatim(&topo.cli, "windows-like", &config)?;
    let result = (|| -> Result<Vec<gate64_testkit::strongswan::IkeSa>> {
        charon.load_all()?;
        for name in ["device", "user"] {
            charon.initiate(name, name, INITIATE_TIMEOUT)?;
        }
        charon.wait_established(2, 2, SETTLE_TIMEOUT)
    })();
    let sas = with_charon_logs(result, &[&charon])?;
    let remote_ts = |name: &str| -> Vec<String> {
        gate64_testkit::strongswan::find_child(&sas, name)
            .map(|c| c.remote_ts.clone())
            .unwrap_or_default()
    };
    ensure!(
        remote_ts("device") == [format!("{CORP_HOST}/128")],
        "the device tunnel's selectors are not narrowed to infrastructure_prefixes: {:?}",
        remote_ts("device")
    );
    ensure!(
        remote_ts("user").iter().any(|ts| ts == "2001:db8:100::/48"),
        "the user tunnel's selectors are not the intranet's: {:?}",
        remote_ts("user")
    );

    // gate64 status: two IKE SAs, one per tunnel, the infrastructure one the machine's.
    let status = status_json(topo)?;
    let sas_seen: Vec<(String, String)> = status["clients"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["sas"].as_array().into_iter().flatten())
        .map(|sa| {
            (
                sa["tunnel"].as_str().unwrap_or_default().to_owned(),
                sa["identity"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let mut tunnels: Vec<&str> = sas_seen.iter().map(|(t, _)| t.as_str()).collect();
    tunnels.sort_unstable();
    ensure!(
        status["ike_sas"] == 2 && tunnels == ["infrastructure", "intranet"],
        "one IKE SA per tunnel expected:\n{status:#}"
    );
    ensure!(
        sas_seen
            .iter()
            .any(|(t, id)| t == "infrastructure" && id.contains("pc1.gate64.lab")),
        "the infrastructure tunnel is not the machine certificate's:\n{status:#}"
    );

    // The gauges and counters: both up, nothing refused or replaced.
    let m = topo.metrics()?;
    for (name, want) in [("gate64_ipsec_mmsa", 2.0), ("gate64_ipsec_qmsa", 2.0)] {
        let v = m.sum(name, &[]);
        ensure!(v == want, "{name} is {v}\n{}", gate64_lines(&m));
    }
    let count = |name: &str, label: (&str, &str)| m.sum(name, &[label]);
    ensure!(
        count("gate64_ike_negotiations_total", ("result", "ok")) == 2.0
            && count(
                "gate64_ike_negotiations_total",
                ("result", "ts_unacceptable")
            ) == 0.0
            && count("gate64_ipsec_disconnects_total", ("reason", "replaced")) == 0.0,
        "two negotiations, none refused or replaced, expected:\n{}",
        gate64_lines(&m)
    );

    // The session log: the session's connect line with the first tunnel, a tunnel_up line
    // with the second (one client address, one session).
    let tunnels_logged = || -> Option<Vec<String>> {
        let records = session_records(topo).ok()?;
        let mut seen: Vec<String> = Vec::new();
        for r in &records {
            if r["event"] == "connect" {
                let list = r["tunnels"].as_array()?;
                seen.extend(list.iter().filter_map(|t| t.as_str().map(str::to_owned)));
            } else if r["event"] == "tunnel_up" {
                seen.extend(r["tunnel"].as_str().map(str::to_owned));
            }
        }
        seen.sort();
        (seen.len() == 2).then_some(seen)
    };
    let logged = wait_for(Duration::from_secs(10), tunnels_logged);
    ensure!(
        logged.as_deref() == Some(&["infrastructure".to_owned(), "intranet".to_owned()][..]),
        "the session log's tunnels: {logged:?}\n{}",
        std::fs::read_to_string(crate::ipsec::session_log(topo)).unwrap_or_default()
    );
    lab.gate.ensure_running()
}
