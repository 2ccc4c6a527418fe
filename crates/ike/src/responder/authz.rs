//! Authorization by RADIUS: what an Access-Accept grants an IKE SA, and how the responder
//! applies it.
//!
//! - Framed-IPv6-Address (else the first address of Framed-IPv6-Prefix: the prefix's
//!   address for a /128, else the one after its subnet-router anycast) and
//!   Framed-IP-Address become the client's inner addresses in place of pool leases, when the
//!   client asks for them (CFG_REQUEST). Each must lie inside `ipsec.pool6` / `ipsec.pool4`
//!   (so the TUN's route brings its traffic back), must not be one the pool reserves, and
//!   must not be held by another identity, nor this identity hold another; otherwise the
//!   IKE_AUTH is refused ([`Refusal::FramedAddress`]) and a log line names the user.
//! - Session-Timeout ends the IKE SA that many seconds after its authentication, through
//!   the same deadline a CoA-Request's Session-Timeout sets ([`Responder::set_session_end`]):
//!   the client hears a Delete, counted as `session_timeout`.
//! - Class (every one, RFC 2865 §5.25) and Filter-Id go out with [`super::Event::IkeSaUp`];
//!   Filter-Id, the RADIUS user name and how the client authenticated also show in
//!   [`super::IkeSaInfo`].

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use super::{Refusal, Responder};
use crate::auth::IdentityKey;

/// What an Access-Accept authorizes, as the driver parsed it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Authorization {
    /// Framed-IP-Address: the client's inner IPv4 address.
    pub framed_ip: Option<Ipv4Addr>,
    /// Framed-IPv6-Address: the client's inner IPv6 address.
    pub framed_ipv6: Option<Ipv6Addr>,
    /// Framed-IPv6-Prefix (prefix, length): its first address is the client's inner IPv6
    /// address when no Framed-IPv6-Address came.
    pub framed_ipv6_prefix: Option<(Ipv6Addr, u8)>,
    /// Session-Timeout in seconds.
    pub session_timeout: Option<u32>,
    /// Filter-Id: the name of the policy for the client's traffic.
    pub filter_id: Option<String>,
    /// Every Class, to echo in the session's Accounting-Requests.
    pub class: Vec<Vec<u8>>,
}

impl Authorization {
    /// The inner IPv6 address it assigns: Framed-IPv6-Address, else the first address of
    /// Framed-IPv6-Prefix.
    pub fn inner6(&self) -> Option<Ipv6Addr> {
        self.framed_ipv6.or_else(|| {
            self.framed_ipv6_prefix.map(|(prefix, len)| {
                if len >= 128 {
                    prefix
                } else {
                    Ipv6Addr::from(u128::from(prefix) | 1)
                }
            })
        })
    }
}

/// What an IKE SA keeps of its RADIUS authentication or authorization.
#[derive(Debug, Clone, Default)]
pub(crate) struct Grant {
    /// The RADIUS User-Name (the EAP identity, or the certificate identity sent).
    pub(crate) user: String,
    /// Whether the client authenticated by EAP (else by certificate).
    pub(crate) eap: bool,
    pub(crate) filter_id: Option<String>,
    pub(crate) class: Vec<Vec<u8>>,
    pub(crate) framed6: Option<Ipv6Addr>,
    pub(crate) framed4: Option<Ipv4Addr>,
}

/// Checks the addresses `authz` assigns against the pools for `identity`: `Err` with a
/// reason for the log when one cannot be given.
pub(super) fn check_framed(
    r: &Responder,
    identity: &IdentityKey,
    authz: &Authorization,
) -> Result<(), String> {
    if let Some(a) = authz.inner6() {
        r.pool
            .check(identity, a)
            .map_err(|e| format!("Framed-IPv6 {a} {}", e.text()))?;
    }
    if let Some(a) = authz.framed_ip {
        match r.pool4.as_ref() {
            Some(pool4) => pool4
                .check(identity, a)
                .map_err(|e| format!("Framed-IP-Address {a} {}", e.text()))?,
            None => return Err(format!("Framed-IP-Address {a} but no ipsec.pool4")),
        }
    }
    Ok(())
}

/// Keeps `authz` on IKE SA `spi_r`, authenticated now for RADIUS user `user`; its
/// Session-Timeout sets when the SA ends. Call before `establish`, which schedules it.
pub(super) fn grant(
    r: &mut Responder,
    spi_r: u64,
    now: Instant,
    (user, eap): (&str, bool),
    authz: Authorization,
) {
    let Some(sa) = r.sas.get_mut(&spi_r) else {
        return;
    };
    if let Some(secs) = authz.session_timeout.filter(|&s| s > 0) {
        sa.session_end = Some(now + Duration::from_secs(u64::from(secs)));
    }
    sa.radius = Some(Box::new(Grant {
        user: user.to_owned(),
        eap,
        framed6: authz.inner6(),
        framed4: authz.framed_ip,
        filter_id: authz.filter_id,
        class: authz.class,
    }));
}

/// Logs and refuses an IKE_AUTH whose framed address cannot be given.
pub(super) fn framed_refusal(peer: std::net::SocketAddr, user: &str, why: &str) -> Refusal {
    tracing::info!(%peer, user, why, "ike: RADIUS-assigned address refused");
    Refusal::FramedAddress
}
