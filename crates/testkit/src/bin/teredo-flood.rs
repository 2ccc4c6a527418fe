//! `teredo-flood`: sends seeded random and malformed Teredo datagrams to a server, from many
//! source ports, at a bounded rate; prints what it sent. See `gate64_testkit::flood`.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use gate64_testkit::flood::{self, FloodConfig};

const USAGE: &str = "\
usage: teredo-flood [options]
  --target IPV4:PORT   server to flood             (default 192.0.2.1:3544)
  --count N            datagrams to send           (default 1000000)
  --pps N              max datagrams per second, 0 = unlimited (default 150000)
  --seed N             PRNG seed                   (default 1)
  --sources N          source sockets / ports      (default 256)
  --bind IPV4          local address               (default 0.0.0.0)
  --duration SECS      stop after SECS seconds     (default: no limit)
  --victim IPV6        destination of spoofed packets (default 2001:db8:100:1::2)
  -h, --help           this text";

fn main() -> ExitCode {
    match parse(std::env::args().skip(1)) {
        Ok(Some(cfg)) => match flood::run(&cfg, &AtomicBool::new(false)) {
            Ok(report) => {
                println!("teredo-flood -> {} (seed {}):", cfg.target, cfg.seed);
                print!("{report}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("teredo-flood: {e}");
                ExitCode::FAILURE
            }
        },
        Ok(None) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("teredo-flood: {e}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<FloodConfig>, String> {
    let mut cfg = FloodConfig::default();
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            return Ok(None);
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--target" => cfg.target = value.parse::<SocketAddrV4>().map_err(|e| bad(&e))?,
            "--count" => cfg.count = value.parse().map_err(|e| bad(&e))?,
            "--pps" => cfg.pps = value.parse().map_err(|e| bad(&e))?,
            "--seed" => cfg.seed = value.parse().map_err(|e| bad(&e))?,
            "--sources" => cfg.sources = value.parse().map_err(|e| bad(&e))?,
            "--bind" => cfg.bind = value.parse::<Ipv4Addr>().map_err(|e| bad(&e))?,
            "--duration" => {
                let secs: f64 = value.parse().map_err(|e| bad(&e))?;
                cfg.max_duration = Some(Duration::try_from_secs_f64(secs).map_err(|e| bad(&e))?);
            }
            "--victim" => cfg.context.victim = value.parse::<Ipv6Addr>().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    cfg.context.server = *cfg.target.ip();
    Ok(Some(cfg))
}
