//! Runs the DNS64 server alone, for benchmarks and experiments (no TUN, no root needed for
//! high ports): `cargo run --release -p gate64-io --example dns64-serve -- --listen
//! 127.0.0.1:5353 --upstream 127.0.0.1:5300 [--prefix 64:ff9b::/96] [--threads N]
//! [--cache N] [--hickory-udp]`. Stops on Ctrl-C or SIGTERM.
#![allow(missing_docs)]

use std::net::SocketAddr;
use std::sync::Arc;

use gate64_dataplane::{Dns64Result, Dns64Stats};
use gate64_io::dns64::{Settings, serve};
use gate64_nat64::Prefix;

fn main() {
    let mut listen: Vec<SocketAddr> = Vec::new();
    let mut upstream: Vec<SocketAddr> = Vec::new();
    let mut prefix = Prefix::WELL_KNOWN.allow_private(true);
    let mut threads = 0;
    let mut cache = 65_536;
    let mut hickory_udp = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--listen" => listen.push(val().parse().expect("--listen ADDR:PORT")),
            "--upstream" => upstream.push(val().parse().expect("--upstream ADDR:PORT")),
            "--prefix" => {
                let n: ipnet::Ipv6Net = val().parse().expect("--prefix PREFIX/LEN");
                prefix = Prefix::new(n.network(), n.prefix_len())
                    .expect("an RFC 6052 prefix")
                    .allow_private(true);
            }
            "--threads" => threads = val().parse().expect("--threads N"),
            "--cache" => cache = val().parse().expect("--cache N"),
            "--hickory-udp" => hickory_udp = true,
            other => panic!("unknown argument {other}"),
        }
    }
    let mut s = Settings::new(upstream, prefix);
    s.listen = listen;
    s.udp_threads = threads;
    s.cache_entries = cache;
    s.udp_fast_path = !hickory_udp;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
        .enable_all()
        .build()
        .expect("tokio runtime");
    let stats = Arc::new(Dns64Stats::default());
    let st = Arc::clone(&stats);
    rt.block_on(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
        serve(s, st, async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        })
        .await
        .expect("serve");
    });
    let counts: Vec<String> = Dns64Result::ALL
        .iter()
        .map(|r| format!("{}={}", r.as_str(), stats.queries(*r)))
        .collect();
    eprintln!(
        "dns64-serve: {} cache_hits={}",
        counts.join(" "),
        stats.cache_hits()
    );
}
