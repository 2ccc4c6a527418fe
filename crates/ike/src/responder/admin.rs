//! What the driver and `gate64 status` use besides the protocol: the snapshot of an IKE SA
//! and the changes a reload makes to a running responder.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::{Responder, SecondAuthPolicy};
use crate::auth::{CertSummary, Credentials, Crls, TrustAnchors};
use crate::child_sa::TunnelKind;

/// A snapshot of one IKE SA, for `gate64 status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IkeSaInfo {
    /// Our SPI (SPIr).
    pub spi_r: u64,
    /// The initiator's SPI.
    pub spi_i: u64,
    /// The client's address and port.
    pub peer: SocketAddr,
    /// Our address and port.
    pub local: SocketAddr,
    /// Whether IKE_AUTH completed.
    pub established: bool,
    /// The authenticated identity, once established (the first round's: the machine).
    pub identity: Option<String>,
    /// The second round's identity (RFC 4739: the user), when the client ran one.
    pub user_identity: Option<String>,
    /// The first round's certificate: issuer, serial, notAfter.
    pub certificate: Option<CertSummary>,
    /// The tunnel of its child SA.
    pub tunnel: Option<TunnelKind>,
    /// The inner address given to the client.
    pub inner: Option<IpAddr>,
    /// The inner IPv4 address given to the client (`[ipsec] pool4`), if it asked for one.
    pub inner4: Option<std::net::Ipv4Addr>,
    /// gate64's inbound SPIs of its child SAs.
    pub child_spis: Vec<u32>,
    /// How long ago it was created.
    pub age: Duration,
    /// How often it was rekeyed (IKE and child).
    pub rekeys: u32,
    /// How its client authenticated once established: `certificate` (one or two rounds),
    /// `eap`, or `certificate+eap` (RFC 4739: a machine certificate, then EAP).
    pub auth_method: Option<&'static str>,
    /// The RADIUS User-Name it was authenticated (EAP) or authorized
    /// (`authorize_certificates = "radius"`) under.
    pub radius_user: Option<String>,
    /// The Filter-Id of its Access-Accept: the name of the `[[policy]]` for its traffic.
    pub filter_id: Option<String>,
}

/// Which IKE SAs [`Responder::disconnect`] ends (`gate64 disconnect`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DisconnectTarget {
    /// Those whose authenticated identity (the subject DN as `gate64 status` shows it), one of
    /// its certificate's subjectAltNames, user identity (RFC 4739) or IDi is this text; names
    /// compare without regard to case, IP addresses by value.
    Identity(String),
    /// The one whose SPIr or SPIi is this.
    IkeSpi(u64),
    /// Every established IKE SA.
    All,
    /// Those whose SPIr is one of these (what a RADIUS Disconnect-Request matched).
    IkeSpis(Vec<u64>),
}

impl DisconnectTarget {
    fn matches(&self, sa: &IkeSaInfo, peer_id: Option<&str>, alt_names: &[Box<str>]) -> bool {
        match self {
            DisconnectTarget::All => true,
            DisconnectTarget::IkeSpi(spi) => sa.spi_r == *spi || sa.spi_i == *spi,
            DisconnectTarget::IkeSpis(spis) => spis.contains(&sa.spi_r),
            DisconnectTarget::Identity(id) => {
                let wanted_ip = id.parse::<IpAddr>().ok();
                [sa.identity.as_deref(), sa.user_identity.as_deref(), peer_id]
                    .into_iter()
                    .flatten()
                    .chain(alt_names.iter().map(|n| &**n))
                    .any(|have| {
                        have.eq_ignore_ascii_case(id)
                            || wanted_ip.is_some() && have.parse::<IpAddr>().ok() == wanted_ip
                    })
            }
        }
    }
}

impl Responder {
    /// Ends the established IKE SAs `target` names, with their child SAs: each client is sent
    /// an INFORMATIONAL Delete (it learns at once that its tunnels are gone), the SA database
    /// hears `ChildSaDown` and `IkeSaDown`. Returns what was removed; a client may connect
    /// again at once.
    pub fn disconnect(
        &mut self,
        now: std::time::Instant,
        target: &DisconnectTarget,
    ) -> Vec<IkeSaInfo> {
        self.disconnect_for(now, target, super::EndReason::Administrator)
    }

    /// [`Responder::disconnect`], for `reason` (the administrator's, or a RADIUS
    /// Disconnect-Request's), which the `IkeSaEnded` events carry.
    pub fn disconnect_for(
        &mut self,
        now: std::time::Instant,
        target: &DisconnectTarget,
        reason: super::EndReason,
    ) -> Vec<IkeSaInfo> {
        let removed: Vec<IkeSaInfo> = self
            .ike_sas(now)
            .into_iter()
            .filter(|sa| sa.established)
            .filter(|sa| {
                let held = self.sas.get(&sa.spi_r);
                let peer_id = held.and_then(|s| s.peer_id.as_deref());
                let alt_names = held
                    .and_then(|s| s.identity.as_ref())
                    .map_or(&[][..], |n| &n.alt_names[..]);
                target.matches(sa, peer_id, alt_names)
            })
            .collect();
        for sa in &removed {
            let spi = format!("{:016x}", sa.spi_r);
            match reason {
                super::EndReason::Radius => {
                    tracing::info!(peer = %sa.peer, identity = ?sa.identity, spi, "ike SA disconnected by a RADIUS Disconnect-Request")
                }
                _ => {
                    tracing::info!(peer = %sa.peer, identity = ?sa.identity, spi, "ike SA disconnected by the administrator")
                }
            }
            self.events.push_back(super::Event::IkeSaEnded {
                spi_r: sa.spi_r,
                reason,
            });
            super::liveness::delete_one(self, sa.spi_r);
        }
        removed
    }

    /// Ends the established IKE SAs among `spis` (SPIr) at `end`, whatever their client
    /// does (a RADIUS CoA-Request's Session-Timeout): then each is deleted as
    /// [`Responder::disconnect`] does, its `IkeSaEnded` with [`super::EndReason::SessionTimeout`].
    /// A later end replaces an earlier one. Returns the SPIs it was set for.
    pub fn set_session_end(&mut self, spis: &[u64], end: std::time::Instant) -> Vec<u64> {
        let mut set = Vec::new();
        for &spi in spis {
            let Some(sa) = self.sas.get_mut(&spi).filter(|sa| sa.established) else {
                continue;
            };
            sa.session_end = Some(end);
            // An earlier end than the timer's is scheduled now; a later one is found when
            // the earlier entry fires.
            self.schedule(spi);
            set.push(spi);
        }
        set
    }

    /// Ends, as [`Responder::disconnect`] does, the established IKE SAs authenticated with a
    /// certificate that a CRL of the current anchors (first round, and second round's) now
    /// revokes: what a reload bringing a new CRL does to a lost machine already connected.
    /// Returns what was removed.
    pub fn disconnect_revoked(&mut self, now: std::time::Instant) -> Vec<IkeSaInfo> {
        let lists = [
            Some(self.config.anchors.crls()),
            self.config.user_anchors.as_ref().map(|a| a.crls()),
        ];
        if lists.iter().flatten().all(|crls| crls.is_empty()) {
            return Vec::new();
        }
        // One pass over the SAs (a reload, not an event): each certificate is a lookup per CRL.
        let revoked: std::collections::HashSet<u64> = self
            .sas
            .values()
            .filter(|sa| sa.established && self.revokes_any(&sa.certificates))
            .map(|sa| sa.spi_r)
            .collect();
        if revoked.is_empty() {
            return Vec::new();
        }
        let removed: Vec<IkeSaInfo> = self
            .ike_sas(now)
            .into_iter()
            .filter(|sa| revoked.contains(&sa.spi_r))
            .collect();
        for sa in &removed {
            tracing::info!(peer = %sa.peer, identity = ?sa.identity, spi = format!("{:016x}", sa.spi_r), "ike SA ended: its certificate is revoked");
            self.events.push_back(super::Event::IkeSaEnded {
                spi_r: sa.spi_r,
                reason: super::EndReason::Revoked,
            });
            super::liveness::delete_one(self, sa.spi_r);
        }
        removed
    }

    /// Whether a CRL in force (of either round's anchors) lists one of `certificates`.
    pub(crate) fn revokes_any(&self, certificates: &[crate::auth::RevocationKey]) -> bool {
        let lists = [
            Some(self.config.anchors.crls()),
            self.config.user_anchors.as_ref().map(|a| a.crls()),
        ];
        certificates
            .iter()
            .any(|key| lists.iter().flatten().any(|crls| crls.revokes(key)))
    }

    /// New CRLs for both rounds' anchors (a CRL file that changed), for IKE SAs negotiated
    /// from now on; [`Responder::disconnect_revoked`] applies them to established ones.
    pub fn replace_crls(&mut self, crls: Crls) {
        self.config.anchors = self.config.anchors.clone().with_crls(crls.clone());
        if let Some(user) = self.config.user_anchors.take() {
            self.config.user_anchors = Some(user.with_crls(crls));
        }
    }

    /// New credentials and trust anchors (a reload): IKE SAs negotiated from now on get
    /// them; established ones are not touched (their AUTH is done, and rekeys sign nothing).
    /// The new anchors start with an empty chain cache that counts on into the old anchors'
    /// counters ([`Responder::chain_cache`]).
    pub fn replace_credentials(&mut self, credentials: Credentials, anchors: TrustAnchors) {
        self.config.credentials = std::sync::Arc::new(credentials);
        let stats = std::sync::Arc::clone(self.config.anchors.cache_stats());
        self.config.anchors = super::anchors_for_clients(anchors).with_cache_stats(stats);
    }

    /// New CAs for RFC 4739 second rounds (`[ipsec] user_ca`, a reload); `None`: the first
    /// round's. Their chain cache counts into the first round's counters.
    pub fn replace_user_anchors(&mut self, anchors: Option<TrustAnchors>) {
        self.config.user_anchors = anchors.map(super::anchors_for_clients);
        self.config.share_chain_cache_stats();
    }

    /// A new reauthentication lifetime (a reload): announced to IKE SAs authenticated from
    /// now on, and the deadline of established ones from their next timer on.
    pub fn set_reauth(&mut self, lifetime: Option<std::time::Duration>) {
        self.config.reauth = lifetime;
    }

    /// New ESP suites (a reload, `[ipsec] esp_proposals`), in order of preference: child
    /// SAs negotiated from now on (rekeys included) choose from them; those up keep theirs.
    pub fn set_esp_suites(&mut self, suites: Vec<crate::child_sa::Cipher>) {
        self.config.esp_suites = suites;
    }

    /// A new integrity-only prefix (a reload, `[ipsec] iphttps_integrity_only`): child SAs
    /// negotiated from now on (rekeys included) follow it; those up keep their transform.
    pub fn set_integrity_only_prefix(&mut self, prefix: Option<ipnet::Ipv6Net>) {
        self.config.integrity_only_prefix = prefix;
    }

    /// New tunnel rules (a reload), for IKE_AUTHs from now on; established IKE SAs keep
    /// their tunnel.
    pub fn set_tunnel_rules(&mut self, rules: Vec<super::TunnelRule>) {
        self.config.tunnel_rules = rules;
    }

    /// A new `unique_ids` rule (a reload), for IKE_AUTHs from now on.
    pub fn set_unique_ids(&mut self, rule: super::UniqueIds) {
        self.config.unique_ids = rule;
    }

    /// A new RFC 4739 policy (a reload), for IKE SAs negotiated from now on.
    pub fn set_intranet_second_auth(&mut self, policy: SecondAuthPolicy) {
        self.config.intranet_second_auth = policy;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa() -> IkeSaInfo {
        IkeSaInfo {
            spi_r: 1,
            spi_i: 2,
            peer: "[2001:db8::1]:4500".parse().expect("peer"),
            local: "[2001:db8::2]:4500".parse().expect("local"),
            established: true,
            identity: Some("CN=laptop7, O=Example".into()),
            user_identity: Some("CN=alice".into()),
            certificate: None,
            tunnel: None,
            inner: None,
            inner4: None,
            child_spis: Vec::new(),
            age: Duration::ZERO,
            rekeys: 0,
            auth_method: Some("certificate"),
            radius_user: None,
            filter_id: None,
        }
    }

    #[test]
    fn an_identity_matches_the_subject_a_subject_alt_name_the_user_or_the_idi() {
        let names: Vec<Box<str>> = vec!["laptop7.corp.example".into(), "2001:db8:0:0::7".into()];
        let id = |s: &str| DisconnectTarget::Identity(s.to_owned());
        for yes in [
            "cn=LAPTOP7, o=example",
            "LAPTOP7.corp.example",
            "2001:db8::7",
            "CN=alice",
            "idi.example",
        ] {
            assert!(id(yes).matches(&sa(), Some("idi.example"), &names), "{yes}");
        }
        for no in ["laptop7", "2001:db8::8", "CN=bob", "corp.example"] {
            assert!(!id(no).matches(&sa(), Some("idi.example"), &names), "{no}");
        }
        assert!(!id("laptop7.corp.example").matches(&sa(), None, &[]));
        assert!(DisconnectTarget::IkeSpi(2).matches(&sa(), None, &[]));
        assert!(DisconnectTarget::All.matches(&sa(), None, &[]));
    }
}
