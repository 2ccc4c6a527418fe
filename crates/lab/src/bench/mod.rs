//! `gate64 bench`: the capacity harness and the processes it runs inside its
//! network namespaces.
//!
//! - `capacity` ([`capacity`]): builds the reference workload in namespaces around the real
//!   daemon (its TUN, kernel routing, IPsec on every client, NAT64 and DNS64), raises the
//!   offered load step by step and reports the highest load that completes with < 1% loss and
//!   bounded latency, in the reference's columns; `--sweep` repeats it over client counts and
//!   writes JSON and SVG plots.
//! - `sink` ([`traffic`]): the corporate servers' end of the traffic (TCP and UDP), run in the
//!   corporate namespace.
//! - `flows` ([`traffic`]): the clients' end, bound to the load generator's inner addresses
//!   (`IPV6_FREEBIND`), run in the load generator's namespace.
//! - `load` (branch `capload`): the load generator itself, N real clients in one process.
//!
//! The contract between the harness and the load generator (the spec and status files) is in
//! [`spec`].

mod capacity;
mod lab;
mod load;
mod measure;
mod report;
mod spec;
mod svg;
mod traffic;

use anyhow::Result;

pub use capacity::{CapacityArgs, measure as measure_capacity};
pub use report::{Row, table};

/// `gate64 bench <command>`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Debug, clap::Subcommand)]
enum BenchCommand {
    /// Measure capacity: namespaces with the real daemon, N real clients (Teredo and
    /// IP-HTTPS, both IPsec tunnels each), TCP and UDP through native IPv6 and NAT64/DNS64.
    /// Needs root.
    Capacity(capacity::CapacityArgs),
    /// The corporate servers' end of the capacity traffic (run by `capacity`).
    #[command(hide = true)]
    Sink(traffic::SinkArgs),
    /// The clients' end of the capacity traffic (run by `capacity`).
    #[command(hide = true)]
    Flows(traffic::FlowsArgs),
    /// The corporate DNS server of `gate64 demo`'s lab (run by `capacity --builtin-dns`).
    #[command(hide = true)]
    Zone(traffic::ZoneArgs),
    /// The load generator: N emulated Teredo and IP-HTTPS clients with both IPsec tunnels
    /// each, their inner traffic on one TUN device (run by `gate64 bench capacity`).
    #[command(hide = true)]
    Load(load::LoadArgs),
}

/// Runs `gate64 bench`.
pub fn run(args: BenchArgs) -> Result<()> {
    match args.command {
        BenchCommand::Capacity(a) => capacity::run(&a),
        BenchCommand::Sink(a) => traffic::run_sink(&a),
        BenchCommand::Flows(a) => traffic::run_flows(&a),
        BenchCommand::Zone(a) => traffic::run_zone(&a),
        BenchCommand::Load(a) => load::run(&a),
    }
}
