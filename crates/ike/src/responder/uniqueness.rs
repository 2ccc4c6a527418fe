//! One IKE SA per identity and tunnel (`[ipsec] unique_ids`), and RFC 7296 §2.4
//! INITIAL_CONTACT.
//!
//! An identity is the certificate's issuer and subject together ([`IdentityKey`]), so a
//! client whose subject merely renders like another's, or the same subject from another CA,
//! never replaces or blocks the other. The tunnel is part of the rule: a DirectAccess client
//! holds one IKE SA for the infrastructure tunnel and one for the intranet, and strongSwan may
//! send INITIAL_CONTACT on the second one too.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{EndReason, Event, Refusal, Responder, liveness};
use crate::auth::IdentityKey;
use crate::child_sa::TunnelKind;

/// What a new IKE_AUTH of an identity that already holds an IKE SA for the same tunnel does
/// (`[ipsec] unique_ids`; strongSwan's `unique` has the same three meanings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UniqueIds {
    /// The new IKE SA replaces the old ones (each is sent a Delete): a laptop that restarted,
    /// or a second machine with a copied certificate, keeps one set of tunnels.
    #[default]
    Replace,
    /// The new IKE_AUTH is refused (AUTHENTICATION_FAILED, counted `duplicate_identity`)
    /// while the old IKE SA stands, INITIAL_CONTACT or not: the first machine keeps its
    /// tunnels until it deletes them or its liveness check fails.
    Keep,
    /// Nothing is replaced, INITIAL_CONTACT included: an identity may hold up to
    /// `max_ike_sas_per_identity` IKE SAs on one tunnel (shared certificates).
    Never,
}

/// The established IKE SAs of `key` for `tunnel`, other than `except`.
fn holding(r: &Responder, key: &IdentityKey, tunnel: Option<TunnelKind>, except: u64) -> Vec<u64> {
    r.by_identity.get(key).map_or_else(Vec::new, |spis| {
        spis.iter()
            .filter_map(|spi| r.sas.get(spi))
            .filter(|s| s.spi_r != except && s.established && s.tunnel == tunnel)
            .map(|s| s.spi_r)
            .collect()
    })
}

/// Under `replace`, how long an IKE SA is kept from being replaced by a new IKE_AUTH of the
/// same identity, for the same tunnel, from the same client ([`same_client`]: address, and
/// port for a native client) and without INITIAL_CONTACT. Two
/// IKE SAs of one client that end up as the same tunnel (a client that asks for the same
/// selectors in both, or for `::/0` in both) would otherwise replace each other in turn as
/// fast as the client rebuilds the one it lost. What replaces legitimately is older or says
/// so: a client that restarted sends INITIAL_CONTACT (RFC 7296 §2.4; so does `gate64
/// connect` when it renews), strongSwan's make-before-break reauthentication comes at
/// `reauth_secs` (60 s at the least), a laptop on a new network comes from a new address.
pub const REPLACE_HOLDOFF: Duration = Duration::from_secs(20);

/// Whether an IKE SA at `remote` (on our `local`) and an IKE_AUTH from `asked` come from one
/// client: the same address, and for a native client (`local` an `[ipsec] listen` address)
/// the same port too. Machines behind one NAT share its address and differ by port, so two
/// of them with one certificate are two clients here; one machine's IKE SAs share its
/// socket and so its mapping. A Teredo or IP-HTTPS address is one client's whatever the port.
fn same_client(r: &Responder, local: SocketAddr, remote: SocketAddr, asked: SocketAddr) -> bool {
    if r.config.native_addresses.contains(&local.ip()) {
        remote == asked
    } else {
        remote.ip() == asked.ip()
    }
}

/// What a verified IKE_AUTH asks for, as [`admit`] judges it.
pub(super) struct Ask<'a> {
    /// The tunnel chosen for the IKE SA ([`super::tunnel_rules::choose`]).
    pub(super) tunnel: Option<TunnelKind>,
    pub(super) initial_contact: bool,
    pub(super) remote: SocketAddr,
    pub(super) now: Instant,
    /// The verified certificate subject, for the log.
    pub(super) subject: &'a str,
}

/// Before we sign: under `keep`, an identity that holds the tunnel asked for is refused; under
/// `replace`, a second IKE SA of a client that asks for the tunnel its other IKE SA took a
/// moment ago is refused ([`REPLACE_HOLDOFF`]) and logged with what to change.
pub(super) fn admit(r: &Responder, key: &IdentityKey, ask: &Ask<'_>) -> Result<(), Refusal> {
    let tunnel = ask.tunnel;
    match r.config.unique_ids {
        UniqueIds::Keep if !holding(r, key, tunnel, 0).is_empty() => {
            Err(Refusal::DuplicateIdentity)
        }
        UniqueIds::Replace if !ask.initial_contact => {
            let young = holding(r, key, tunnel, 0).into_iter().find_map(|spi| {
                let sa = r.sas.get(&spi)?;
                let age = ask.now.saturating_duration_since(sa.authenticated?);
                (same_client(r, sa.local, sa.remote, ask.remote) && age < REPLACE_HOLDOFF)
                    .then_some(age)
            });
            match young {
                Some(age) => {
                    tracing::warn!(
                        peer = %ask.remote,
                        identity = %ask.subject,
                        tunnel = ?tunnel,
                        established_secs_ago = age.as_secs(),
                        "ike: refused a second IKE SA of this identity for the same tunnel, \
                         asked from the same client address (and port, for a native client) without INITIAL_CONTACT: both of the \
                         client's IKE SAs end up as one tunnel and would replace each other; \
                         give each its own traffic selectors (inside infrastructure_prefixes \
                         for one, intranet_prefixes for the other)"
                    );
                    Err(Refusal::SameTunnel)
                }
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// Whether a new IKE SA replaces the identity's old ones on its tunnel: always under
/// `replace`, on INITIAL_CONTACT under `keep` (where [`admit`] already refused a duplicate),
/// never under `never`.
pub(super) fn replaces(r: &Responder, initial_contact: bool) -> bool {
    match r.config.unique_ids {
        UniqueIds::Replace => true,
        UniqueIds::Keep => initial_contact,
        UniqueIds::Never => false,
    }
}

/// Ends the identity's other IKE SAs on `tunnel` (after the new lease, so the inner address
/// stays), each with a Delete, and reports them as replaced.
pub(super) fn forget_stale(
    r: &mut Responder,
    spi_r: u64,
    key: &IdentityKey,
    tunnel: Option<TunnelKind>,
) {
    for spi in holding(r, key, tunnel, spi_r) {
        end_replaced(
            r,
            spi,
            "ike SA replaced by a new one of the same identity and tunnel",
        );
    }
}

/// Ends IKE SA `spi` with a Delete, reported as replaced, logging `why`.
fn end_replaced(r: &mut Responder, spi: u64, why: &'static str) {
    tracing::info!(spi = format!("{spi:016x}"), "{why}");
    r.event(Event::IkeSaEnded {
        spi_r: spi,
        reason: EndReason::Replaced,
    });
    liveness::delete_one(r, spi);
}

/// Before a synced IKE SA of `key` made at `made` is installed, when the identity holds
/// another inner address here: ends every IKE SA of the identity on this node (each with a
/// Delete, reported as replaced), so that their lease goes, if all were made before `made`
/// and `unique_ids` lets a new IKE SA replace old ones on INITIAL_CONTACT. The client
/// negotiated anew on the peer after it made those (from another address, as a client does
/// that moved between the nodes), so they are stale, as INITIAL_CONTACT would say. Returns
/// whether it ended them; none ends when one of them is as new or newer (the client came
/// here after the peer's).
pub(super) fn retire_older_than_synced(
    r: &mut Responder,
    key: &IdentityKey,
    made: Instant,
) -> bool {
    if !replaces(r, true) {
        return false;
    }
    let own: Vec<(u64, Instant)> = r.by_identity.get(key).map_or_else(Vec::new, |spis| {
        (spis.iter().filter_map(|spi| r.sas.get(spi)))
            .map(|s| (s.spi_r, s.started))
            .collect()
    });
    if own.is_empty() || own.iter().any(|&(_, started)| started >= made) {
        return false;
    }
    for (spi, _) in own {
        let why = "ike SA replaced by a newer one of the same identity synced from the HA peer";
        end_replaced(r, spi, why);
    }
    true
}
