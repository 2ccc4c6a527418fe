//! RFC 4739 multiple authentication against a real strongSwan initiator (a
//! machine certificate for the infrastructure tunnel, a second authentication for intranet).
//!
//! - `netns_ike_strongswan_second_auth_on_the_intranet_tunnel`: gate64's IKE driver with
//!   `intranet_second_auth = required` (in-process in `ikegw`, as `ike_interop` runs it) and
//!   strongSwan in `ikecli` whose intranet connection has `local-1` (the machine certificate)
//!   and `local-2` (a user certificate under the same CA), both `auth = pubkey`. Both tunnels
//!   come up: the intranet one only because gate64 accepted the second round, since
//!   `required` refuses an intranet tunnel authenticated once. Then strongSwan with the
//!   intranet connection reduced to one round gets AUTHENTICATION_FAILED from gate64.
//! - `netns_ipsec_connect_user_cert_to_gate64`: `gate64 connect teredo --user-cert/--user-key`
//!   against `gate64 serve` with `intranet_second_auth = "required"`: both tunnels come up
//!   (gate64 counts two IKE SAs and two child SAs, so the intranet one ran the second round)
//!   and `gate64 status --json` shows the machine and the user identity of the intranet SA.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use gate64_ike::responder::{Event, Refusal, SecondAuthPolicy};
use gate64_testkit::strongswan::{
    Charon, CharonConfig, INFRASTRUCTURE, INTRANET, LabCerts, SecondAuth, find_child,
    with_charon_logs,
};
use gate64_testkit::{CORP_HOST, Gate64Options, SERVER_V4, Topology, gate64_binary, wait_for};
use gate64_testkit::{Netns, find_tool, netns_or_skip};

use crate::common::{gate64_ctl, gate64_lines, ipsec_keys, netns_test, path_str};
use crate::ike_interop::{CLIENT, Driver, GATEWAY, responder_config, tunnels, wait_event};
use crate::ipsec::GATE64_ADDRESS6;

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

#[test]
#[ignore = "netns: needs root"]
fn netns_ipsec_connect_user_cert_to_gate64() {
    netns_test(
        "netns_ipsec_connect_user_cert_to_gate64",
        Topology::builder(),
        connect_user_cert,
    );
}

fn connect_user_cert(topo: &Topology) -> Result<()> {
    let dir = topo.srv.dir().join("ike-certs");
    let ike = LabCerts::generate(&topo.srv, &dir, IpAddr::V6(GATE64_ADDRESS6))?;
    let (user_cert, user_key) = issue_user(&topo.srv, &dir, &ike)?;
    let infrastructure_ts = format!("{CORP_HOST}/128");
    let socket = topo.srv.dir().join("control.sock");
    let opts = Gate64Options {
        without_ipsec: false,
        extra: ipsec_keys(
            &ike,
            &format!(
                "intranet_second_auth = \"required\"\n[control]\nsocket = \"{}\"\n",
                path_str(&socket)?
            ),
        )?,
        ..Gate64Options::default()
    };
    let mut gate = topo.start_gate64(&opts)?;
    let bin = gate64_binary()?;
    let (server, endpoint) = (SERVER_V4.to_string(), GATE64_ADDRESS6.to_string());
    let mut client = topo.cli.spawn(
        "gate64-connect-user-cert",
        &[
            "env",
            "RUST_LOG=debug",
            path_str(&bin)?,
            "connect",
            "teredo",
            "--server",
            &server,
            "--ifname",
            "gate64u",
            "--ipsec-endpoint",
            &endpoint,
            "--ipsec-cert",
            path_str(&ike.initiator_cert)?,
            "--ipsec-key",
            path_str(&ike.initiator_key)?,
            "--ipsec-ca",
            path_str(&ike.ca)?,
            "--user-cert",
            path_str(&user_cert)?,
            "--user-key",
            path_str(&user_key)?,
            "--infrastructure-ts",
            &infrastructure_ts,
            "--intranet-ts",
            "2001:db8:100::/48",
        ],
    )?;
    let up = wait_for(Duration::from_secs(40), || {
        let m = topo.metrics().ok()?;
        let both = m.sum("gate64_ipsec_qmsa", &[]) == 2.0 && m.sum("gate64_ipsec_mmsa", &[]) == 2.0;
        both.then_some(())
    });
    client.ensure_running()?;
    ensure!(
        up.is_some(),
        "gate64 did not count 2 IKE SAs and 2 child SAs (intranet_second_auth = required)\n{}\n{}",
        gate64_lines(&topo.metrics()?),
        client.log()
    );
    let json = gate64_ctl(topo, &["status", "--json"])?;
    // Pretty JSON, one field per line: the intranet SA's lines carry both identities, the
    // infrastructure SA's none for the user.
    let users: Vec<&str> = json
        .lines()
        .filter(|l| l.contains("\"user_identity\""))
        .collect();
    ensure!(
        users.len() == 2
            && users
                .iter()
                .filter(|l| l.contains("alice.gate64.lab"))
                .count()
                == 1
            && users.iter().filter(|l| l.contains("null")).count() == 1,
        "gate64 status --json: expected one user identity (alice) and one null:\n{json}"
    );
    ensure!(
        json.lines()
            .filter(|l| l.contains("\"identity\"") && l.contains("client.gate64.lab"))
            .count()
            == 2,
        "both SAs carry the machine identity:\n{json}"
    );
    println!("gate64 status --json user identities: {users:?}");
    client.ensure_running()?;
    gate.ensure_running()
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
        &certs.ca,
        ("user", &format!("CN={san}"), san, "clientAuth"),
    )
}

/// A certificate and new ECDSA key under the CA certificate `ca` (its key `ca.key` and
/// `pki-strongswan.conf` in `dir`, as `LabCerts` and `gate64 certs` leave them), made with
/// `pki`: `stem`.pem and `stem`.key in `dir` with subject `dn`, subjectAltNames `san`
/// (separated by spaces) and extended key usage `flag`.
pub(crate) fn issue_under_lab_ca(
    ns: &Netns,
    dir: &Path,
    ca: &Path,
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
         --dn '{dn}' {sans} --flag {flag} --outform pem > '{cert}'",
        conf = path(&conf)?,
        key = path(&key)?,
        ca = path(ca)?,
        ca_key = path(&ca_key)?,
        cert = path(&cert)?,
        sans = san
            .split_whitespace()
            .map(|n| format!("--san '{n}'"))
            .collect::<Vec<_>>()
            .join(" "),
    );
    ns.exec_ok(&["sh", "-c", &script])?;
    Ok((cert, key))
}
