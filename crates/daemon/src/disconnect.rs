//! `gate64 disconnect`: ends a client's IKE SAs and child SAs at once, over the control
//! socket ([`crate::status`]). Each removed IKE SA's client is sent an INFORMATIONAL Delete,
//! so strongSwan and `gate64 connect` learn at once that their tunnels are gone; the client
//! may connect again (what keeps a lost laptop out for good is revoking its certificate).
//!
//! Requests on the control socket: `disconnect identity <TEXT>` (the subject DN as `gate64
//! status` shows it, a subjectAltName of the certificate, the user identity of a second round,
//! or the client's IDi: an FQDN, address or email; names compare without regard to case, IP
//! addresses by value), `disconnect spi <HEX>` (either
//! SPI of the IKE SA), `disconnect all`. The answer is a JSON [`Disconnected`].
//!
//! A client reached over IP-HTTPS also loses its link: its outer address lies in the /64 its
//! connection owns, and that connection is closed ([`close_iphttps_links`]), as it is when a
//! CRL revokes the client.

use std::net::{IpAddr, Ipv6Addr};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use gate64_ike::responder::{DisconnectTarget, IkeSaInfo};
use serde::{Deserialize, Serialize};

use crate::status::ControlHandlers;

/// `gate64 disconnect`'s arguments.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["identity", "ike_spi", "all"])))]
pub struct DisconnectArgs {
    /// The client's identity: its subject DN as `gate64 status` shows it, a subjectAltName of
    /// its certificate (DNS name, email or IP address), its user identity, or the IDi it sent
    /// (e.g. client1.example.com).
    identity: Option<String>,
    /// The IKE SA with this SPI (hexadecimal, either side's, as `gate64 status` shows it).
    #[arg(long, value_name = "SPI", value_parser = parse_spi)]
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

fn parse_spi(s: &str) -> Result<u64, String> {
    let hex = s.trim_start_matches("0x");
    u64::from_str_radix(hex, 16).map_err(|e| format!("not a hexadecimal SPI: {e}"))
}

/// What a disconnect ended in the daemon.
#[derive(Debug, Clone, Default)]
pub struct Ended {
    /// The IKE SAs removed.
    pub ike_sas: Vec<IkeSaInfo>,
    /// The clients whose IP-HTTPS link was closed.
    pub links_closed: Vec<Ipv6Addr>,
}

/// Closes the IP-HTTPS links of the clients of `removed` (a client on IP-HTTPS has its outer
/// address in the /64 its connection owns; a Teredo client has none); returns their
/// addresses. The connections end once what they hold is written.
pub fn close_iphttps_links(
    shared: &gate64_dataplane::Shared,
    removed: &[IkeSaInfo],
) -> Vec<Ipv6Addr> {
    let mut closed: Vec<Ipv6Addr> = Vec::new();
    for sa in removed {
        let IpAddr::V6(outer) = sa.peer.ip() else {
            continue;
        };
        if !closed.contains(&outer) && shared.iphttps_clients().close(&outer) {
            tracing::info!(client = %outer, "IP-HTTPS link closed with its IKE SAs");
            closed.push(outer);
        }
    }
    closed
}

/// What the daemon answers a disconnect request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Disconnected {
    /// The IKE SAs removed.
    pub removed: Vec<Removed>,
    /// The clients whose IP-HTTPS link was closed with them.
    #[serde(default)]
    pub links_closed: Vec<String>,
    /// Why nothing could be done (IPsec not running, a bad request).
    pub error: Option<String>,
}

/// One removed IKE SA.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Removed {
    /// gate64's SPI of it, hexadecimal.
    pub spi: String,
    /// The authenticated identity.
    pub identity: Option<String>,
    /// The client's outer address and port.
    pub peer: String,
    /// The tunnel it carried, when any.
    pub tunnel: Option<String>,
    /// The child SAs that went with it.
    pub child_sas: usize,
}

impl From<&IkeSaInfo> for Removed {
    fn from(sa: &IkeSaInfo) -> Self {
        Removed {
            spi: format!("{:016x}", sa.spi_r),
            identity: sa.identity.clone(),
            peer: sa.peer.to_string(),
            tunnel: sa.tunnel.map(|t| format!("{t:?}").to_lowercase()),
            child_sas: sa.child_spis.len(),
        }
    }
}

/// The request line for `target`.
fn request_line(target: &DisconnectTarget) -> String {
    match target {
        DisconnectTarget::Identity(id) => format!("disconnect identity {id}"),
        DisconnectTarget::IkeSpi(spi) => format!("disconnect spi {spi:x}"),
        DisconnectTarget::All => "disconnect all".to_owned(),
    }
}

/// The target of a request line's arguments (after `disconnect`).
fn parse_target(args: &str) -> Result<DisconnectTarget, String> {
    let (kind, rest) = args.split_once(' ').unwrap_or((args, ""));
    let rest = rest.trim();
    match kind {
        "all" if rest.is_empty() => Ok(DisconnectTarget::All),
        "identity" if !rest.is_empty() => Ok(DisconnectTarget::Identity(rest.to_owned())),
        "spi" => parse_spi(rest).map(DisconnectTarget::IkeSpi),
        _ => Err(format!("unknown disconnect request {args:?}")),
    }
}

/// The daemon's answer to one control-socket request line (JSON).
pub fn answer(request: &str, handlers: &ControlHandlers) -> Vec<u8> {
    match request.split_once(' ') {
        Some(("disconnect", args)) => {
            let body = match parse_target(args.trim()) {
                Ok(target) => match (handlers.disconnect)(target) {
                    Some(ended) => Disconnected {
                        removed: ended.ike_sas.iter().map(Removed::from).collect(),
                        links_closed: ended.links_closed.iter().map(|a| a.to_string()).collect(),
                        error: None,
                    },
                    None => Disconnected {
                        removed: Vec::new(),
                        links_closed: Vec::new(),
                        error: Some("IPsec is not running, or its driver did not answer".into()),
                    },
                },
                Err(e) => Disconnected {
                    removed: Vec::new(),
                    links_closed: Vec::new(),
                    error: Some(e),
                },
            };
            serde_json::to_vec(&body).unwrap_or_default()
        }
        _ => serde_json::to_vec(&(handlers.read)()).unwrap_or_default(),
    }
}

/// Runs `gate64 disconnect`: prints what was removed; an error when nothing matched.
pub fn run(args: DisconnectArgs) -> Result<()> {
    let target = match (&args.identity, args.ike_spi, args.all) {
        (Some(id), _, _) => DisconnectTarget::Identity(id.clone()),
        (_, Some(spi), _) => DisconnectTarget::IkeSpi(spi),
        (_, _, true) => DisconnectTarget::All,
        _ => bail!("give an identity, --ike-spi or --all"),
    };
    let socket = crate::serve::control_socket(args.socket, args.config)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a runtime")?;
    let body = rt.block_on(crate::status::request(&socket, &request_line(&target)))?;
    let answer: Disconnected =
        serde_json::from_slice(&body).context("the daemon's answer is not a disconnect result")?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_round_trip_and_bad_ones_are_refused() {
        for target in [
            DisconnectTarget::Identity("CN=client1.gate64.lab, O=lab".into()),
            DisconnectTarget::IkeSpi(0x1234_abcd_0000_0001),
            DisconnectTarget::All,
        ] {
            let line = request_line(&target);
            let args = line.strip_prefix("disconnect ").expect("prefix");
            assert_eq!(parse_target(args), Ok(target));
        }
        for bad in [
            "",
            "all now",
            "identity",
            "identity  ",
            "spi zz",
            "everyone",
        ] {
            assert!(parse_target(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_spi("0xff"), Ok(255));
    }
}
