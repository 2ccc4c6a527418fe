//! The status page (`/status` on the metrics listener) in Debian's headless Chromium:
//!
//! - `netns_status_page_in_chromium_shows_components_and_clients_as_text`: strongSwan over
//!   Debian's Miredo client holds a tunnel with a certificate whose subject carries HTML
//!   (`CN=<b id="injected">x</b>.lab`) and pings the corporate host; Chromium in gate64's
//!   namespace loads `/status`, runs its script, and the rendered page shows every component,
//!   the client with its transport, and the identity as text (escaped in the DOM, no element
//!   made of it). A screenshot is written and its path printed.

use std::net::IpAddr;
use std::path::Path;

use anyhow::{Context, Result, ensure};
use gate64_testkit::strongswan::{
    CertPaths, Charon, CharonConfig, INFRASTRUCTURE, Tunnel, with_charon_logs,
};
use gate64_testkit::{CORP_HOST, METRICS_ADDR, Topology, find_tool, wait_for};

use crate::common::{netns_test, path_str};
use crate::ike_multi_auth::issue_under_lab_ca;
use crate::ipsec::{GATE64_ADDRESS6, INITIATE_TIMEOUT, SETTLE_TIMEOUT, TeredoIpsecLab};

/// A subject a browser would turn into markup if the page let it.
const HTML_DN: &str = "CN=<b id=\"injected\">x</b>.lab";

#[test]
#[ignore = "netns: needs root"]
fn netns_status_page_in_chromium_shows_components_and_clients_as_text() {
    netns_test(
        "netns_status_page_in_chromium_shows_components_and_clients_as_text",
        Topology::builder(),
        status_page,
    );
}

fn status_page(topo: &Topology) -> Result<()> {
    let chromium =
        find_tool("chromium").context("chromium is not installed (Debian package chromium)")?;
    let dir = topo.srv.dir().join("certs");
    let marked = (dir.join("marked.pem"), dir.join("marked.key"));
    let mut lab = TeredoIpsecLab::start_prepared(topo, None, "", None, |certs| {
        issue_under_lab_ca(
            &topo.srv,
            &dir,
            &certs.ca,
            ("marked", HTML_DN, "marked.gate64.lab", "clientAuth"),
        )
        .map(drop)
    })?;
    let tunnels = vec![Tunnel::new(INFRASTRUCTURE, &[&format!("{CORP_HOST}/128")])];
    let charon = Charon::start(
        &topo.cli,
        "initiator",
        CharonConfig::initiator(
            IpAddr::V6(GATE64_ADDRESS6),
            CertPaths::new(&lab.certs.ca, &marked.0, &marked.1),
            tunnels,
        ),
    )?;
    let scenario = || -> Result<()> {
        charon.load_all()?;
        charon.initiate(INFRASTRUCTURE, INFRASTRUCTURE, INITIATE_TIMEOUT)?;
        charon.wait_established(1, 1, SETTLE_TIMEOUT)?;
        topo.ping6(&topo.cli, CORP_HOST, 1)?;
        // Traffic while the page is loaded.
        let _pings = topo.cli.spawn(
            "pings",
            &[
                "ping",
                "-6",
                "-n",
                "-i",
                "0.2",
                "-c",
                "150",
                &CORP_HOST.to_string(),
            ],
        )?;
        // The page's data is rebuilt every 2 s: wait until it lists the client.
        let url = format!("http://{METRICS_ADDR}/status");
        let json_url = format!("http://{METRICS_ADDR}/status.json");
        wait_for(SETTLE_TIMEOUT, || {
            let json = topo.srv.exec_ok(&["curl", "-s", &json_url]).ok()?;
            json.contains("marked.gate64.lab")
                .then_some(())
                .or_else(|| json.contains("injected").then_some(()))
        })
        .context("status.json never listed the client")?;
        let profile = topo.srv.dir().join("chromium-profile");
        let shot = topo.srv.dir().join("status.png");
        let common = [
            path_str(&chromium)?.to_owned(),
            "--headless".into(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--no-first-run".into(),
            format!("--user-data-dir={}", path_str(&profile)?),
            "--window-size=1280,900".into(),
            // Let the script fetch and render before the DOM is dumped or the shot taken.
            "--virtual-time-budget=5000".into(),
        ];
        let mut dump: Vec<&str> = common.iter().map(String::as_str).collect();
        dump.extend(["--dump-dom", &url]);
        let dom = topo.srv.exec_ok(&dump)?;
        let shot_arg = format!("--screenshot={}", path_str(&shot)?);
        let mut take: Vec<&str> = common.iter().map(String::as_str).collect();
        take.extend([shot_arg.as_str(), url.as_str()]);
        topo.srv.exec_ok(&take)?;
        check_dom(&dom)?;
        check_screenshot(&shot)?;
        // Kept past the namespace's directory, for a person to look at.
        let kept = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
        std::fs::copy(&shot, &kept)?;
        println!("status page screenshot: {}", kept.display());
        Ok(())
    };
    with_charon_logs(scenario(), &[&charon])?;
    lab.gate.ensure_running()
}

fn check_dom(dom: &str) -> Result<()> {
    for component in ["Teredo", "IP-HTTPS", "IKE", "NAT64", "DNS64", "GRE"] {
        ensure!(
            dom.contains(&format!("<span class=\"name\">{component}</span>")),
            "component {component} not on the page:\n{dom}"
        );
    }
    ensure!(
        dom.contains("<li class=\"up\"><span class=\"name\">IKE</span>"),
        "IKE is not shown up:\n{dom}"
    );
    // The identity (as the certificate subject prints, RFC 4514 backslashes included), as
    // text: escaped in the serialized DOM, and no element made of it.
    let cell = dom
        .split("<td class=\"identity\">")
        .nth(1)
        .and_then(|rest| rest.split("</td>").next())
        .with_context(|| format!("no identity cell:\n{dom}"))?;
    ensure!(
        cell.contains("&lt;b id=") && cell.contains("injected") && cell.contains("&lt;/b"),
        "the identity is not shown as text: {cell}"
    );
    ensure!(
        !dom.contains("<b id=\"injected\"") && !dom.contains("<b id=\\\"injected"),
        "the identity became markup:\n{dom}"
    );
    ensure!(
        dom.contains("<td>teredo</td>") && dom.contains("infrastructure"),
        "the client's transport or tunnel is missing:\n{dom}"
    );
    ensure!(dom.contains("<polyline"), "no chart drawn:\n{dom}");
    Ok(())
}

fn check_screenshot(shot: &Path) -> Result<()> {
    let png = std::fs::read(shot).with_context(|| format!("reading {}", shot.display()))?;
    ensure!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{} is not a screenshot of a page ({} bytes)",
        shot.display(),
        png.len()
    );
    Ok(())
}
