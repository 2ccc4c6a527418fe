//! RFC 4739 multiple authentication against a real strongSwan initiator (issue 8 item 3: a
//! machine certificate for the infrastructure tunnel, a second authentication for intranet).
//!
//! - `netns_ike_strongswan_second_auth_on_the_intranet_tunnel`: gate64's IKE driver with
//!   `intranet_second_auth = required` (in-process in `ikegw`, as `ike_interop` runs it) and
//!   strongSwan in `ikecli` whose intranet connection has `local-1` (the machine certificate)
//!   and `local-2` (a user certificate under the same CA), both `auth = pubkey`. Both tunnels
//!   come up: the intranet one only because gate64 accepted the second round, since
//!   `required` refuses an intranet tunnel authenticated once. Then strongSwan with the
//!   intranet connection reduced to one round gets AUTHENTICATION_FAILED from gate64.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use gate64_ike::responder::{Event, Refusal, SecondAuthPolicy};
use gate64_testkit::strongswan::{
    Charon, CharonConfig, INFRASTRUCTURE, INTRANET, LabCerts, SecondAuth, find_child,
    with_charon_logs,
};
use gate64_testkit::{Netns, find_tool, netns_or_skip};

use crate::ike_interop::{CLIENT, Driver, GATEWAY, responder_config, tunnels, wait_event};

const INITIATE_TIMEOUT: Duration = Duration::from_secs(30);
const SETTLE_TIMEOUT: Duration = Duration::from_secs(15);

#[test]
#[ignore = "netns: needs root"]
fn netns_ike_strongswan_second_auth_on_the_intranet_tunnel() {
    let name = "netns_ike_strongswan_second_auth_on_the_intranet_tunnel";
    if !netns_or_skip(name) {
        return;
    }
    let cli = Netns::new("ikecli").expect("netns");
    let gw = Netns::new("ikegw").expect("netns");
    if let Err(e) = second_auth(&cli, &gw) {
        panic!("{name}: {e:#}\n{}{}", cli.logs_report(), gw.logs_report());
    }
}

fn second_auth(cli: &Netns, gw: &Netns) -> Result<()> {
    cli.veth("vgw", gw, "vcli")?;
    cli.addr_add("vgw", &format!("{CLIENT}/64"))?;
    gw.addr_add("vcli", &format!("{GATEWAY}/64"))?;
    let server = IpAddr::V6(GATEWAY);
    let dir = gw.dir().join("certs");
    let certs = LabCerts::generate(gw, &dir, server)?;
    let (user_cert, user_key) = issue_user(gw, &dir, &certs)?;
    let mut config = responder_config(&certs)?;
    config.intranet_second_auth = SecondAuthPolicy::Required;
    let driver = Driver::start(gw, config)?;
    let mut two_rounds = CharonConfig::initiator(server, certs.initiator(), tunnels());
    two_rounds.second_auth = Some(SecondAuth {
        cert: user_cert,
        key: user_key,
        tunnels: vec![INTRANET.to_owned()],
    });
    let initiator = Charon::start(cli, "initiator", two_rounds)?;
    let outcome = with_charon_logs(both_tunnels(&initiator, &driver), &[&initiator]);
    drop(initiator);
    let outcome = outcome.and_then(|()| {
        let one_round = CharonConfig::initiator(server, certs.initiator(), tunnels());
        let initiator = Charon::start(cli, "one-round", one_round)?;
        with_charon_logs(intranet_refused(&initiator, &driver), &[&initiator])
    });
    let stopped = driver.stop();
    outcome?;
    stopped
}

/// Both tunnels up; gate64 reports two established negotiations and two child SAs.
fn both_tunnels(initiator: &Charon<'_>, driver: &Driver) -> Result<()> {
    initiator.load_all()?;
    for tunnel in [INFRASTRUCTURE, INTRANET] {
        initiator
            .initiate(tunnel, tunnel, INITIATE_TIMEOUT)
            .with_context(|| format!("initiating {tunnel}"))?;
    }
    let sas = initiator.wait_established(2, 2, SETTLE_TIMEOUT)?;
    for tunnel in [INFRASTRUCTURE, INTRANET] {
        let child = find_child(&sas, tunnel).with_context(|| format!("no child SA {tunnel}"))?;
        ensure!(child.is_installed(), "{tunnel}: {child:?}");
    }
    // strongSwan's own account: its intranet IKE SA sent a second IKE_AUTH request (the
    // user's round, message ID 2) and was answered with the child SA.
    let log = std::fs::read_to_string(initiator.log_path()).context("charon.log")?;
    ensure!(
        log.lines()
            .any(|l| l.contains("<intranet|") && l.contains("generating IKE_AUTH request 2")),
        "strongSwan ran no second IKE_AUTH round on the intranet tunnel"
    );
    ensure!(
        !log.lines()
            .any(|l| l.contains("<infrastructure|") && l.contains("IKE_AUTH request 2")),
        "the infrastructure tunnel ran a second round"
    );
    let ups = std::cell::Cell::new(0);
    let seen = wait_event(&driver.events, "two child SAs", |e| {
        if matches!(e, Event::ChildSaUp(_)) {
            ups.set(ups.get() + 1);
        }
        ups.get() == 2
    })?;
    ensure!(
        !seen
            .iter()
            .any(|e| matches!(e, Event::Negotiation { result: Err(_), .. })),
        "a negotiation failed: {seen:#?}"
    );
    Ok(())
}

/// One round on the intranet tunnel under `required`: AUTHENTICATION_FAILED, named by gate64.
fn intranet_refused(initiator: &Charon<'_>, driver: &Driver) -> Result<()> {
    initiator.load_all()?;
    let err = match initiator.initiate(INTRANET, INTRANET, INITIATE_TIMEOUT) {
        Ok(out) => bail!("an intranet tunnel authenticated once got in:\n{out}"),
        Err(e) => format!("{e:#}"),
    };
    ensure!(
        err.contains("AUTHENTICATION_FAILED"),
        "not AUTHENTICATION_FAILED: {err}"
    );
    let seen = wait_event(&driver.events, "a failed negotiation", |e| {
        matches!(e, Event::Negotiation { result: Err(_), .. })
    })?;
    ensure!(
        seen.iter().any(|e| matches!(
            e,
            Event::Negotiation { result: Err(Refusal::Authentication(why)), .. }
                if why.contains("second authentication")
        )),
        "gate64 names the missing second round: {seen:#?}"
    );
    Ok(())
}

/// A user certificate (`CN=alice.gate64.lab`, clientAuth) under the lab CA; returns
/// (certificate, key).
fn issue_user(ns: &Netns, dir: &Path, certs: &LabCerts) -> Result<(PathBuf, PathBuf)> {
    let san = "alice.gate64.lab";
    issue_under_lab_ca(
        ns,
        dir,
        certs,
        ("user", &format!("CN={san}"), san, "clientAuth"),
    )
}

/// A certificate and new ECDSA key under the lab CA of `certs` (whose files are in `dir`),
/// made with `pki` as `LabCerts` makes the others: `stem`.pem and `stem`.key in `dir` with
/// subject `dn`, subjectAltName `san` and extended key usage `flag`.
pub(crate) fn issue_under_lab_ca(
    ns: &Netns,
    dir: &Path,
    certs: &LabCerts,
    (stem, dn, san, flag): (&str, &str, &str, &str),
) -> Result<(PathBuf, PathBuf)> {
    let pki = find_tool("pki").context("`pki` not found: apt-get install strongswan-pki")?;
    let pki = pki.to_str().context("pki path")?;
    let conf = dir.join("pki-strongswan.conf");
    let (cert, key) = (
        dir.join(format!("{stem}.pem")),
        dir.join(format!("{stem}.key")),
    );
    let ca_key = dir.join("ca.key");
    let path = |p: &Path| -> Result<String> { Ok(p.to_str().context("path")?.to_owned()) };
    let script = format!(
        "export STRONGSWAN_CONF='{conf}'; \
         '{pki}' --gen --type ecdsa --size 256 --outform pem > '{key}' && \
         '{pki}' --pub --in '{key}' --type ecdsa --outform pem | \
         '{pki}' --issue --lifetime 30 --type pub --cacert '{ca}' --cakey '{ca_key}' \
         --dn '{dn}' --san '{san}' --flag {flag} --outform pem > '{cert}'",
        conf = path(&conf)?,
        key = path(&key)?,
        ca = path(&certs.ca)?,
        ca_key = path(&ca_key)?,
        cert = path(&cert)?,
    );
    ns.exec_ok(&["sh", "-c", &script])?;
    Ok((cert, key))
}
