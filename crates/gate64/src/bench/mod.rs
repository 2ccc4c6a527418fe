//! `gate64 bench`: the capacity harness of issue 9 and its hidden helpers.

mod load;

use anyhow::Result;

/// The `gate64 bench` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// The load generator: N emulated Teredo and IP-HTTPS clients with both IPsec tunnels
    /// each, their inner traffic on one TUN device (run by `gate64 bench capacity`).
    #[command(hide = true)]
    Load(load::LoadArgs),
}

/// Runs a `gate64 bench` subcommand.
pub fn run(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Load(args) => load::run(&args),
    }
}
