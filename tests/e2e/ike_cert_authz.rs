//! `[ipsec] authorize_certificates = "radius"`: Debian's FreeRADIUS in gate64's namespace on
//! 127.0.0.1:1812 authorizes certificate clients by their subject, from a users-file entry
//! with no password (`Auth-Type := Accept`, and `Message-Authenticator = 0x00` so that this
//! FreeRADIUS signs its Accept); strongSwan dials `[ipsec] listen` with a certificate of a CA
//! of the test's own.
//!
//! - `netns_cert_authz_radius_grants_and_refuses`: carol's entry carries
//!   `Filter-Id = "contractors"`: her tunnel comes up, the `contractors` policy lets her reach
//!   the corporate host and not a second one (dropped as `policy`), `gate64 status` shows
//!   method certificate, her subject as the RADIUS user and the Filter-Id. Dave, on a second
//!   host, has no entry: FreeRADIUS rejects him, the IKE_AUTH is refused
//!   (AUTHENTICATION_FAILED), counted under `gate64_ike_refused_total{reason="radius"}`, and
//!   gate64's log names his subject.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_testkit::freeradius::FreeRadius;
use gate64_testkit::strongswan::with_charon_logs;
use gate64_testkit::strongswan::{CertPaths, Charon, CharonConfig, INTRANET, LabCerts, Tunnel};
use gate64_testkit::{CORP_HOST, Gate64Options, Topology, wait_for};

use crate::common::{
    OTHER_CORP_HOST, assert_policy_cuts, gate64_ctl, gate64_lines, netns_test, path_str,
    status_json,
};
use crate::ike_eap::{ipv6_link, other_host};
use crate::ipsec::{INITIATE_TIMEOUT, POOL6, ipsec_section_with_ca};
use crate::openssl_ca::OpensslCa;

const SECRET: &str = "gate64-lab-authz-secret";
const CAROL: &str = "CN=carol.gate64.lab";
const DAVE: &str = "CN=dave.gate64.lab";
/// The policy carol's Filter-Id names: the corporate host and nothing else.
const CONTRACTORS: &str =
    "[[policy]]\nname = \"contractors\"\nprefixes = [\"2001:db8:100:1::2/128\"]\n";
/// A corporate host outside the `contractors` policy.
/// The intranet's selectors as a client proposes them.
const INTRANET_TS: &str = "2001:db8:100::/48";

#[test]
#[ignore = "netns: needs root"]
fn netns_cert_authz_radius_grants_and_refuses() {
    netns_test(
        "netns_cert_authz_radius_grants_and_refuses",
        Topology::builder().attacker(true),
        grants_and_refuses,
    );
}

/// `gate64_ike_refused_total{reason="radius"}`.
fn radius_refusals(topo: &Topology) -> Result<f64> {
    Ok(topo
        .metrics()?
        .sum("gate64_ike_refused_total", &[("reason", "radius")]))
}

fn grants_and_refuses(topo: &Topology) -> Result<()> {
    // Carol is authorized with a Filter-Id; dave has no entry, which FreeRADIUS rejects.
    // Debian's FreeRADIUS (before 3.2.5) signs no reply to a password-less request unless the
    // entry asks for a Message-Authenticator, and gate64 takes no unsigned Access-Accept.
    let entry = format!(
        "\"{CAROL}\" Auth-Type := Accept\n\tFilter-Id = \"contractors\",\n\t\
         Message-Authenticator = 0x00\n"
    );
    let radius = FreeRadius::start_with_users_file(&topo.srv, "127.0.0.1", SECRET, &entry)?;
    let listen = ipv6_link(topo)?;
    let secret = topo
        .srv
        .write_file("authz-radius.secret", &format!("{SECRET}\n"))?;
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    let clients = OpensslCa::new(
        &topo.srv,
        topo.srv.dir().join("clients-ca"),
        "gate64 lab contractors CA",
    )?;
    let carol = clients.issue("carol", (&format!("/{CAROL}"), "carol.gate64.lab"), None)?;
    let dave = clients.issue("dave", (&format!("/{DAVE}"), "dave.gate64.lab"), None)?;
    let certs = LabCerts::generate(&topo.srv, &topo.srv.dir().join("certs"), listen)?;
    let keys = format!(
        "listen = [\"{listen}\"]\nauthorize_certificates = \"radius\"\n\
         [[ipsec.eap_radius]]\nserver = \"127.0.0.1:1812\"\nsecret_file = \"{}\"\n",
        path_str(&secret)?
    );
    let mut extra = ipsec_section_with_ca(topo, &certs, &clients.dir.join("ca.pem"), &keys)?;
    extra.push_str(CONTRACTORS);
    let opts = Gate64Options {
        without_ipsec: false,
        extra,
        ..Gate64Options::default()
    };
    let mut gate = topo.start_gate64(&opts)?;
    topo.corp
        .ip(&["-6", "route", "replace", POOL6, "via", "2001:db8:100:1::1"])?;
    topo.corp
        .addr_add("vsrv", &format!("{OTHER_CORP_HOST}/64"))?;
    let client = |(cert, key): &(std::path::PathBuf, std::path::PathBuf)| {
        CharonConfig::initiator(
            listen,
            CertPaths::new(&certs.ca, cert, key),
            vec![Tunnel::new(INTRANET, &[INTRANET_TS])],
        )
    };
    let carol_charon = Charon::start(&topo.cli, "carol", client(&carol))?;
    let atk = other_host(topo)?;
    let dave_charon = Charon::start(atk, "dave", client(&dave))?;
    let result = (|| -> Result<()> {
        carol_charon.load_all()?;
        carol_charon.initiate(INTRANET, INTRANET, INITIATE_TIMEOUT)?;
        topo.ping6(&topo.cli, CORP_HOST, 1)?;
        topo.ping6_all(&topo.cli, CORP_HOST, 3)?;
        assert_policy_cuts(topo, "carol's policy", 0.0)?;
        let text = gate64_ctl(topo, &["status"])?;
        ensure!(
            text.contains(&format!(
                "auth certificate, RADIUS user {CAROL}, policy contractors"
            )),
            "gate64 status shows carol's method, RADIUS user and Filter-Id:\n{text}"
        );
        let doc = status_json(topo)?;
        let sa = &doc["clients"][0]["sas"][0];
        ensure!(
            sa["auth_method"] == "certificate"
                && sa["radius_user"] == CAROL
                && sa["filter_id"] == "contractors",
            "status --json: {doc}"
        );

        let before = radius_refusals(topo)?;
        dave_charon.load_all()?;
        let refused = dave_charon.initiate(INTRANET, INTRANET, INITIATE_TIMEOUT);
        ensure!(refused.is_err(), "dave connected without a RADIUS entry");
        let after = wait_for(Duration::from_secs(5), || {
            radius_refusals(topo).ok().filter(|n| *n > before)
        });
        ensure!(
            after.is_some(),
            "gate64_ike_refused_total{{reason=\"radius\"}} did not rise from {before}\n{}",
            gate64_lines(&topo.metrics()?)
        );
        let charon_log = std::fs::read_to_string(dave_charon.log_path())?;
        ensure!(
            charon_log.contains("AUTHENTICATION_FAILED"),
            "dave's charon did not hear AUTHENTICATION_FAILED"
        );
        // Carol's tunnel stands.
        topo.ping6_all(&topo.cli, CORP_HOST, 3).map(drop)
    })();
    with_charon_logs(result, &[&carol_charon, &dave_charon]).with_context(|| radius.log())?;
    let log = gate.log();
    ensure!(
        log.contains("not authorized by RADIUS") && log.contains(DAVE),
        "gate64's log names dave's refusal:\n{log}"
    );
    gate.ensure_running()
}
