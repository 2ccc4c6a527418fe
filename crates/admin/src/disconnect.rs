//! `gate64 disconnect`: ends a client's IKE SAs and child SAs at once, over the daemon's
//! control socket. The daemon sends each removed IKE SA's client an INFORMATIONAL Delete,
//! and closes the IP-HTTPS link of a client reached over it; the client may connect again
//! (what keeps a lost laptop out for good is revoking its certificate).

use crate::terminal::printable;
use anyhow::{Result, bail};
use gate64_control::{Disconnected, Target, client};
use std::fmt::Write as _;
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
    if let Some(e) = &answer.error {
        bail!("the daemon refused: {}", printable(e));
    }
    print!("{}", render(&answer));
    if answer.removed.is_empty() {
        bail!("no IKE SA matched");
    }
    println!("{} IKE SA(s) removed", answer.removed.len());
    Ok(())
}

/// The lines `gate64 disconnect` prints of what was removed. The identities are the
/// clients' (and the other fields the daemon's text): shown through [`printable`], so a
/// control character in them reaches the terminal escaped.
fn render(answer: &Disconnected) -> String {
    let mut out = String::new();
    for r in &answer.removed {
        let _ = writeln!(
            out,
            "removed IKE SA {} of {} from {} ({}, {} child SA{})",
            printable(&r.spi),
            printable(r.identity.as_deref().unwrap_or("?")),
            printable(&r.peer),
            printable(r.tunnel.as_deref().unwrap_or("no tunnel")),
            r.child_sas,
            if r.child_sas == 1 { "" } else { "s" }
        );
    }
    for link in &answer.links_closed {
        let _ = writeln!(out, "closed the IP-HTTPS link of {}", printable(link));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gate64_control::Removed;

    #[test]
    fn removed_identities_are_escaped() {
        let answer = Disconnected {
            removed: vec![Removed {
                spi: "0x00000000000000ab".to_owned(),
                identity: Some("CN=a\x1b]0;owned\x07\nremoved IKE SA forged".to_owned()),
                peer: "[2001:db8::1]:4500".to_owned(),
                tunnel: Some("intranet".to_owned()),
                child_sas: 1,
            }],
            links_closed: vec!["2001:db8:1:5::77\r".to_owned()],
            error: None,
        };
        let out = render(&answer);
        assert_eq!(
            out,
            "removed IKE SA 0x00000000000000ab of CN=a\\1b]0;owned\\07\\0aremoved IKE SA forged \
             from [2001:db8::1]:4500 (intranet, 1 child SA)\n\
             closed the IP-HTTPS link of 2001:db8:1:5::77\\0d\n"
        );
    }
}
