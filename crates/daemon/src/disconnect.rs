//! What `gate64 disconnect` ends in the daemon: a client's IKE SAs and child SAs at once (the
//! control socket's [`crate::control`] asks the IKE driver). Each removed IKE SA's client is
//! sent an INFORMATIONAL Delete, so strongSwan and `gate64 connect` learn at once that their
//! tunnels are gone; the client may connect again (what keeps a lost laptop out for good is
//! revoking its certificate).
//!
//! A disconnect names its IKE SAs by identity (the subject DN as `gate64 status` shows it, a
//! subjectAltName of the certificate, the user identity of a second round, or the client's
//! IDi: an FQDN, address or email; names compare without regard to case, IP addresses by
//! value), by either SPI of the IKE SA, or all of them ([`gate64_control::Target`]).
//!
//! A client reached over IP-HTTPS also loses its link: its outer address lies in the /64 its
//! connection owns, and that connection is closed ([`close_iphttps_links`]), as it is when a
//! CRL revokes the client.

use gate64_control::Removed;
use gate64_ike::responder::IkeSaInfo;
use std::net::{IpAddr, Ipv6Addr};

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

/// What the answer says of one removed IKE SA.
pub fn removed(sa: &IkeSaInfo) -> Removed {
    Removed {
        spi: format!("{:016x}", sa.spi_r),
        identity: sa.identity.clone(),
        peer: sa.peer.to_string(),
        tunnel: sa.tunnel.map(|t| format!("{t:?}").to_lowercase()),
        child_sas: sa.child_spis.len(),
    }
}
