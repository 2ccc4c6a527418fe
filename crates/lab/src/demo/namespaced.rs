//! `gate64 demo` without root: the workload of `gate64 bench capacity`, short, in network
//! namespaces of an unprivileged user namespace.
//!
//! Unprivileged user namespaces (Linux ≥ 3.8, on by default in Debian since 11) give this
//! process CAP_SYS_ADMIN and CAP_NET_ADMIN over namespaces it creates, and nothing else: a
//! mount namespace of its own whose `/run` is a fresh tmpfs (so `ip netns add` can bind its
//! namespaces there without touching the host's), network namespaces, TUN devices and routes
//! inside them. The lab is therefore the capacity lab itself: the real daemon with its TUN and
//! kernel routing, the load generator's emulated Teredo and IP-HTTPS clients with both IPsec
//! tunnels each, TCP and UDP to a corporate IPv6 host and, by name through DNS64, through
//! NAT64 to an IPv4-only one. What differs: no Debian miredo or strongSwan client (a fresh
//! machine lacks them), and `gate64 bench zone` instead of Unbound as the corporate DNS.
//! Everything it made vanishes with the process: the namespaces are held only by its mounts.
//!
//! The namespace is entered by a re-executed child (`demo --in-user-namespace`), so that a
//! kernel that refuses it (user namespaces off, or restricted by AppArmor as on Ubuntu 24.04)
//! leaves this process as it was, to run the loopback demo instead.

use super::DemoArgs;
use crate::bench::{CapacityArgs, Row, measure_capacity, table};
use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use gate64_sys::{namespace, process};
use std::process::{Command, ExitStatus};

/// The child's exit status when it could not enter the namespace (its message says why).
pub const NO_USER_NAMESPACE: i32 = 3;
/// Length of a load step when `--seconds` is not given.
pub const STEP_SECONDS: u64 = 3;
/// The first offered load, Mbit/s: below what the smallest machine carries, so the search
/// doubles from a passing step.
const START_MBPS: &str = "100";

/// What the namespace attempt came to.
pub enum Outcome {
    /// The demo ran (it may have failed: the error says how).
    Ran(Result<()>),
    /// The kernel refused the user namespace; the loopback demo is the way left.
    Unavailable,
}

/// Runs the namespace demo in a re-executed child inside a new user namespace, or in this
/// process when it is root already.
pub fn run(args: &DemoArgs) -> Outcome {
    if process::geteuid() == 0 {
        return Outcome::Ran(measure(args));
    }
    let status = match spawn_child(args) {
        Ok(s) => s,
        Err(e) => return Outcome::Ran(Err(e)),
    };
    match status.code() {
        Some(0) => Outcome::Ran(Ok(())),
        Some(NO_USER_NAMESPACE) => Outcome::Unavailable,
        _ => Outcome::Ran(Err(anyhow::anyhow!(
            "the demo failed ({status}; its error is above)"
        ))),
    }
}

fn spawn_child(args: &DemoArgs) -> Result<ExitStatus> {
    let exe = std::env::current_exe().context("finding the gate64 binary")?;
    let mut cmd = Command::new(exe);
    cmd.args(["demo", "--in-user-namespace"]);
    cmd.args(["--clients", &args.clients.to_string()]);
    cmd.args(["--iphttps-share", &args.iphttps_share.to_string()]);
    cmd.args(["--workers", &args.workers.to_string()]);
    if let Some(s) = args.seconds {
        cmd.args(["--seconds", &s.to_string()]);
    }
    if let Some(a) = args.dns64_upstream {
        cmd.args(["--dns64-upstream", &a.to_string()]);
    }
    let mut child = cmd.spawn().context("starting the demo's lab")?;
    // Ctrl-C reaches the child too (same process group); it tears the lab down and exits,
    // and this process waits for that rather than leave it behind.
    let _ = process::ignore_signal(libc::SIGINT);
    child.wait().context("waiting for the demo's lab")
}

/// The child: enters the user namespace (or exits with [`NO_USER_NAMESPACE`]), then measures.
pub fn run_child(args: &DemoArgs) -> Result<()> {
    if let Err(e) = enter_user_namespace() {
        eprintln!(
            "gate64 demo: cannot make an unprivileged user namespace ({e:#}); running the \
             loopback demo instead"
        );
        std::process::exit(NO_USER_NAMESPACE);
    }
    measure(args)
}

/// Makes this (single-threaded) process root of a new user namespace, in an empty network
/// namespace and a private mount namespace whose `/run` is an empty tmpfs holding
/// `/run/netns`.
fn enter_user_namespace() -> Result<()> {
    // If the parent dies, end too: the lab's processes go with this one's namespaces.
    let _ = process::set_parent_death_signal(libc::SIGTERM);
    let (uid, gid) = (process::geteuid(), process::getegid());
    // Fails with EINVAL if threads exist, reported below. A network namespace of its own too:
    // `ip netns add` returns to the namespace it started in, which must be one this user
    // namespace owns.
    let flags = namespace::CLONE_NEWUSER | namespace::CLONE_NEWNS | namespace::CLONE_NEWNET;
    namespace::unshare(flags).context("unshare(CLONE_NEWUSER)")?;
    // An unprivileged process may map only its own ids, and only after giving up setgroups.
    std::fs::write("/proc/self/setgroups", "deny").context("writing /proc/self/setgroups")?;
    std::fs::write("/proc/self/uid_map", format!("0 {uid} 1"))
        .context("writing /proc/self/uid_map")?;
    std::fs::write("/proc/self/gid_map", format!("0 {gid} 1"))
        .context("writing /proc/self/gid_map")?;
    let private = namespace::MS_REC | namespace::MS_PRIVATE;
    namespace::mount(None, c"/", None, private).context("making / private")?;
    namespace::mount(Some(c"tmpfs"), c"/run", Some(c"tmpfs"), 0)
        .context("mounting a tmpfs on /run")?;
    std::fs::create_dir("/run/netns").context("creating /run/netns")?;
    Ok(())
}

/// `gate64 bench capacity` with the demo's knobs, then the check that every client passed.
fn measure(args: &DemoArgs) -> Result<()> {
    let capacity = capacity_args(args)?;
    eprintln!(
        "gate64 demo: {} clients ({:.0}% IP-HTTPS, the rest Teredo; both IPsec tunnels each) \
         and the real daemon with its TUN, in network namespaces; TCP and UDP to a corporate \
         IPv6 host and through DNS64 and NAT64 to an IPv4-only one; the offered load doubles \
         from {START_MBPS} Mbit/s in {} s steps until one loses >= 1% or falls behind, and the \
         highest passing step is the capacity (`sudo gate64 bench capacity` runs the full size)",
        capacity.clients,
        capacity.iphttps_share * 100.0,
        capacity.seconds
    );
    let report = measure_capacity(&capacity)?;
    print!("{}", table(&report.rows));
    let row = report.rows.first().context("no figures")?;
    check(row)
}

fn capacity_args(args: &DemoArgs) -> Result<CapacityArgs> {
    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        capacity: CapacityArgs,
    }
    let seconds = args.seconds.unwrap_or(STEP_SECONDS).to_string();
    let upstream = args.dns64_upstream.map(|a| a.to_string());
    let (clients, share) = (args.clients.to_string(), args.iphttps_share.to_string());
    let workers = args.workers.to_string();
    let mut argv = vec![
        "demo",
        "--clients",
        &clients,
        "--iphttps-share",
        &share,
        "--seconds",
        &seconds,
        "--workers",
        &workers,
        "--start-mbps",
        START_MBPS,
        "--refine",
        "1",
        "--no-third-party",
        "--builtin-dns",
    ];
    if let Some(upstream) = &upstream {
        argv.extend(["--dns64-upstream", upstream]);
    }
    Ok(Wrapper::try_parse_from(argv)
        .context("the demo's capacity options")?
        .capacity)
}

/// Every client connected, built both tunnels and passed traffic; a step passed.
fn check(row: &Row) -> Result<()> {
    if let Some(e) = &row.error {
        bail!("the lab failed: {e}");
    }
    ensure!(
        row.path_failures.is_empty(),
        "claimed paths did not work: {}",
        row.path_failures.join("; ")
    );
    ensure!(
        row.clients == row.clients_requested && row.clients_failed == 0,
        "{} of {} clients connected ({} failed)",
        row.clients,
        row.clients_requested,
        row.clients_failed
    );
    ensure!(
        row.clients_passed_traffic == row.clients,
        "{} of {} clients passed traffic through their tunnels",
        row.clients_passed_traffic,
        row.clients
    );
    ensure!(
        row.mmsa == 2 * row.clients && row.qmsa == 2 * row.clients,
        "{} IKE SAs and {} child SAs for {} clients (2 each expected)",
        row.mmsa,
        row.qmsa,
        row.clients
    );
    ensure!(
        row.corpnet_mbps > 0.0,
        "no load step passed: {:?}",
        row.steps.iter().map(|s| &s.failure).collect::<Vec<_>>()
    );
    println!(
        "demo ok: {}/{} clients ({} Teredo, {} IP-HTTPS) connected and passed traffic through \
         both IPsec tunnels; capacity {:.1} Mbit/s corpnet at {:.0}% of a core of gate64's own",
        row.clients_passed_traffic,
        row.clients,
        row.teredo,
        row.iphttps,
        row.corpnet_mbps,
        row.cpu_percent
    );
    Ok(())
}
