//! `ike-auth-flood`: completes IKE_SA_INIT with a responder and sends IKE_AUTH carrying a
//! leaf and `--certs` self-issued certificates named like its issuer, round after round from
//! one thread, for `--secs`; prints what it sent and what was answered. See
//! `gate64_testkit::ike_auth_flood`.

use std::net::{Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use gate64_testkit::ike_auth_flood::{AttackChain, FloodConfig, flood};

const USAGE: &str = "\
usage: ike-auth-flood --server ADDR [options]
  --server ADDR   the responder's IPv6 address                      (required)
  --port N        the responder's IKE port                        (default 500)
  --bind ADDR     local IPv6 address                              (default ::)
  --certs N       self-issued certificates sent after the leaf     (default 55:
                  56 CERT payloads and 8 others, the 64 payloads an IKE message
                  may hold in gate64's parser; more are dropped before the
                  certificate checks)
  --secs S        how long to flood                                (default 30)
  -h, --help      this text";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    match run(args.into_iter()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ike-auth-flood: {e:#}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn run(mut args: impl Iterator<Item = String>) -> Result<()> {
    let (mut server, mut port, mut bind, mut certs, mut secs) =
        (None, 500u16, Ipv6Addr::UNSPECIFIED, 55usize, 30.0f64);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        let ctx = || format!("{flag} {value}");
        match flag.as_str() {
            "--server" => server = Some(value.parse::<Ipv6Addr>().with_context(ctx)?),
            "--port" => port = value.parse().with_context(ctx)?,
            "--bind" => bind = value.parse().with_context(ctx)?,
            "--certs" => certs = value.parse().with_context(ctx)?,
            "--secs" => secs = value.parse().with_context(ctx)?,
            _ => bail!("unknown option {flag}"),
        }
    }
    let cfg = FloodConfig {
        bind: SocketAddr::from((bind, 0)),
        server: SocketAddr::from((server.context("--server is required")?, port)),
        duration: Duration::try_from_secs_f64(secs).context("--secs")?,
        answer_timeout: Duration::from_secs(1),
    };
    let chain = AttackChain::generate(certs)?;
    let report = flood(&chain, &cfg, &AtomicBool::new(false))?;
    println!("ike-auth-flood -> {}: {report}", cfg.server);
    Ok(())
}
