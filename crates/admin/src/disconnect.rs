//! `gate64 disconnect`: ends a client's IKE SAs and child SAs at once, over the daemon's
//! control socket. The daemon sends each removed IKE SA's client an INFORMATIONAL Delete,
//! and closes the IP-HTTPS link of a client reached over it; the client may connect again
//! (what keeps a lost laptop out for good is revoking its certificate).

use anyhow::{Result, bail};
use gate64_control::{Target, client};
use std::path::PathBuf;

/// `gate64 disconnect`'s arguments.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["identity", "ike_spi", "all"])))]
pub struct DisconnectArgs {
    /// The client's identity: its subject DN as `gate64 status` shows it, a subjectAltName of
    /// its certificate (DNS name, email or IP address), its user identity, or the IDi it sent
    /// (e.g. client1.example.com).
    identity: Option<String>,
    /// The IKE SA with this SPI (hexadecimal, either side's, as `gate64 status` shows it).
    #[arg(long, value_name = "SPI", value_parser = gate64_control::parse_spi)]
    ike_spi: Option<u64>,
    /// Every client.
    #[arg(long)]
    all: bool,
    /// The control socket; default `control.socket` of `--config`, else
    /// /run/gate64/control.sock.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// The daemon's configuration file, to find its control socket.
    #[arg(long, short)]
    config: Option<PathBuf>,
}

/// Runs `gate64 disconnect`: prints what was removed; an error when nothing matched.
pub fn run(args: DisconnectArgs) -> Result<()> {
    let target = match (&args.identity, args.ike_spi, args.all) {
        (Some(id), _, _) => Target::Identity(id.clone()),
        (_, Some(spi), _) => Target::IkeSpi(spi),
        (_, _, true) => Target::All,
        _ => bail!("give an identity, --ike-spi or --all"),
    };
    let socket = crate::socket::control_socket(args.socket, args.config)?;
    let answer = client::disconnect(&socket, target)?;
    if let Some(e) = answer.error {
        bail!("the daemon refused: {e}");
    }
    for r in &answer.removed {
        println!(
            "removed IKE SA {} of {} from {} ({}, {} child SA{})",
            r.spi,
            r.identity.as_deref().unwrap_or("?"),
            r.peer,
            r.tunnel.as_deref().unwrap_or("no tunnel"),
            r.child_sas,
            if r.child_sas == 1 { "" } else { "s" }
        );
    }
    for link in &answer.links_closed {
        println!("closed the IP-HTTPS link of {link}");
    }
    if answer.removed.is_empty() {
        bail!("no IKE SA matched");
    }
    println!("{} IKE SA(s) removed", answer.removed.len());
    Ok(())
}
