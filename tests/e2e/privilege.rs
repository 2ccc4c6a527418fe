//! Least privilege (docs/security.md): once `gate64 serve` has created its TUN,
//! routes, sockets and listeners, every thread of the daemon holds no capability in any set,
//! the bounding set included, with `NoNewPrivs` set; and it still serves Teredo and IP-HTTPS.
//!
//! - `netns_privileges_dropped_after_start_without_ipsec`: gate64 started as root with Teredo and IP-HTTPS;
//!   `/proc/<pid>/task/*/status` is checked after start and again after a real Miredo client
//!   and a `gate64 connect iphttps` client have each pinged a corporate host through it.
//! - `netns_privileges_dropped_as_unprivileged_user`: as the systemd unit runs it, as an
//!   unprivileged user (here `nobody`, through `setpriv`) with the start-up capabilities
//!   ambient; the same checks with Teredo, and the user kept.
//! - `netns_privileges_switch_to_server_user_without_ipsec`: started as root with `[server] user =
//!   "nobody"`; the same checks, every thread switched to nobody.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gate64_testkit::{
    CORP_HOST, Gate64Options, Process, Topology, find_tool, gate64_binary, wait_until,
};

use crate::common::{connect_iphttps, make_certs, netns_test, path_str, start_gate64};

/// The capability sets the daemon documents after start-up: all empty.
const CAP_FIELDS: [&str; 5] = ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"];
/// The daemon logs this line once the drop is done in every thread.
const DROPPED_LINE: &str = "privileges dropped";
/// Debian's `nobody`: the unprivileged user of the second test.
const NOBODY: &str = "65534";
/// What the systemd unit grants as ambient capabilities (config/systemd/gate64.service).
const UNIT_CAPS: &str = "+net_admin,+net_bind_service,+setpcap";

#[test]
#[ignore = "netns: needs root"]
fn netns_privileges_dropped_after_start_without_ipsec() {
    netns_test(
        "netns_privileges_dropped_after_start_without_ipsec",
        Topology::builder(),
        dropped_and_serving,
    );
}

fn dropped_and_serving(topo: &Topology) -> Result<()> {
    let certs = make_certs(topo)?;
    let mut gate = start_gate64(topo, &certs, false, None)?;
    let logged = wait_until(Duration::from_secs(5), || gate.log().contains(DROPPED_LINE));
    ensure!(
        logged,
        "no {DROPPED_LINE:?} line within 5 s of /metrics answering; log:\n{}",
        gate.log()
    );
    let threads = check_every_thread(&gate, "0").context("right after start")?;
    println!(
        "gate64 (pid {}): {threads} threads, no capability",
        gate.pid()
    );

    {
        let (_miredo, addr) = crate::teredo::qualify(topo)?;
        topo.ping6_all(&topo.cli, CORP_HOST, 3)
            .context("ping tcli -> tcorp over Teredo, after the drop")?;
        topo.ping6_all(&topo.corp, addr, 3)
            .context("ping tcorp -> the Teredo client, after the drop")?;
    }
    let (_client, addr) = connect_iphttps(topo, &certs, false)?;
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping tcli -> tcorp over IP-HTTPS, after the drop")?;
    topo.ping6_all(&topo.corp, addr, 3)
        .context("ping tcorp -> the IP-HTTPS client, after the drop")?;
    gate.ensure_running()?;
    // Threads started since (tokio's blocking pool, for instance) inherit the dropped sets.
    let threads = check_every_thread(&gate, "0").context("after Teredo and IP-HTTPS traffic")?;
    println!("after traffic: {threads} threads, no capability");
    Ok(())
}

#[test]
#[ignore = "netns: needs root"]
fn netns_privileges_dropped_as_unprivileged_user() {
    netns_test(
        "netns_privileges_dropped_as_unprivileged_user",
        Topology::builder(),
        |topo| dropped_as_nobody(topo, Start::AmbientCapabilities),
    );
}

#[test]
#[ignore = "netns: needs root"]
fn netns_privileges_switch_to_server_user_without_ipsec() {
    netns_test(
        "netns_privileges_switch_to_server_user_without_ipsec",
        Topology::builder(),
        |topo| dropped_as_nobody(topo, Start::RootWithServerUser),
    );
}

/// How `gate64 serve` is started in [`dropped_as_nobody`].
#[derive(Debug, Clone, Copy)]
enum Start {
    /// As `nobody` with the unit's ambient capabilities, through `setpriv`.
    AmbientCapabilities,
    /// As root, with `[server] user = "nobody"` in the configuration.
    RootWithServerUser,
}

fn dropped_as_nobody(topo: &Topology, start: Start) -> Result<()> {
    let bin = gate64_binary()?;
    let mut toml = Gate64Options::default().config_toml();
    if let Start::RootWithServerUser = start {
        toml = toml.replacen("[server]\n", "[server]\nuser = \"nobody\"\n", 1);
        ensure!(
            toml.contains("user = \"nobody\""),
            "no [server] section in\n{toml}"
        );
    }
    let conf = topo.srv.write_file("gate64-user.toml", &toml)?;
    let serve = [path_str(&bin)?, "serve", "--config", path_str(&conf)?];
    let mut gate = match start {
        Start::RootWithServerUser => topo.srv.spawn("gate64", &serve)?,
        Start::AmbientCapabilities => {
            let setpriv =
                find_tool("setpriv").context("`setpriv` not found: apt-get install util-linux")?;
            let id = format!("--reuid={NOBODY}");
            let gid = format!("--regid={NOBODY}");
            let inh = format!("--inh-caps={UNIT_CAPS}");
            let amb = format!("--ambient-caps={UNIT_CAPS}");
            let mut argv = vec![path_str(&setpriv)?, &id, &gid, "--clear-groups", &inh, &amb];
            argv.extend(serve);
            topo.srv.spawn("gate64", &argv)?
        }
    };
    let ready = wait_until(Duration::from_secs(15), || {
        gate.is_running() && gate.log().contains(DROPPED_LINE) && topo.metrics_text().is_ok()
    });
    gate.ensure_running()?;
    ensure!(
        ready,
        "gate64 ({start:?}) did not drop privileges and serve /metrics within 15 s; log:\n{}",
        gate.log()
    );
    let threads = check_every_thread(&gate, NOBODY).context("right after start")?;
    println!("gate64 ({start:?}) as uid {NOBODY}: {threads} threads, no capability");
    let (_miredo, addr) = crate::teredo::qualify(topo)?;
    topo.ping6_all(&topo.cli, CORP_HOST, 3)
        .context("ping tcli -> tcorp over Teredo, after the drop")?;
    topo.ping6_all(&topo.corp, addr, 3)
        .context("ping tcorp -> the Teredo client, after the drop")?;
    gate.ensure_running()?;
    check_every_thread(&gate, NOBODY).context("after Teredo traffic")?;
    Ok(())
}

/// Checks every thread of `gate` against the documented set, and that its real, effective,
/// saved and filesystem uid are all `uid`; returns how many threads there were.
fn check_every_thread(gate: &Process, uid: &str) -> Result<usize> {
    let dir = format!("/proc/{}/task", gate.pid());
    let mut threads = 0;
    for entry in std::fs::read_dir(&dir).with_context(|| format!("listing {dir}"))? {
        let path = entry?.path().join("status");
        let Ok(status) = std::fs::read_to_string(&path) else {
            // The thread ended between the listing and the read.
            continue;
        };
        for field in CAP_FIELDS {
            let value = field_of(&status, field)
                .with_context(|| format!("{}: no {field} line", path.display()))?;
            ensure!(
                value == "0000000000000000",
                "{}: {field} is {value}, expected none; status:\n{status}",
                path.display()
            );
        }
        let nnp = field_of(&status, "NoNewPrivs")
            .with_context(|| format!("{}: no NoNewPrivs line", path.display()))?;
        ensure!(
            nnp == "1",
            "{}: NoNewPrivs is {nnp}; status:\n{status}",
            path.display()
        );
        let uids =
            field_of(&status, "Uid").with_context(|| format!("{}: no Uid line", path.display()))?;
        ensure!(
            uids.split_whitespace().all(|u| u == uid),
            "{}: Uid is {uids}, expected {uid} throughout",
            path.display()
        );
        threads += 1;
    }
    ensure!(
        threads > 1,
        "{dir}: {threads} thread(s); gate64 runs several"
    );
    Ok(threads)
}

fn field_of<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}
