//! Child SAs: the ESP proposal, traffic-selector narrowing into gate64's two tunnels
//! (RFC 7296 §2.9) for both address families, KEYMAT (§2.17) and CREATE_CHILD_SA
//! (§1.3: new and rekeyed child SAs, IKE SA rekey §2.18).

use std::net::IpAddr;
use std::time::Instant;

use super::traffic_selectors::selectors;
pub(crate) use super::traffic_selectors::{choose_tunnel, fit_selectors};
use super::{ChildRecord, EndReason, Event, IkeSa, Refusal, RekeyKind, Responder, proposal};
use crate::child_sa::{ChildSaPair, Cipher, Lifetime, Peer, SaKeys, SaParams, TunnelKind};
use crate::keys::{self, Group, IkeKeys, KeyExchange, Secret};
use crate::message::{
    Header, Notify, Payload, Proposal, TrafficSelector, Transform, find_notify, notify, transform,
};

/// The ESP proposal chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EspChoice {
    pub(crate) number: u8,
    pub(crate) peer_spi: u32,
    pub(crate) cipher: Cipher,
    pub(crate) esn: bool,
    pub(crate) group: Option<Group>,
}

/// Why a child SA was not built: the notify to send and the reason to report.
pub(crate) type ChildError = (u16, Refusal);

/// How the KE payload of the request bears on the ESP proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeRule {
    /// IKE_AUTH: KE transforms are ignored (RFC 7296 §1.2, the keys come from the IKE SA).
    Ignore,
    /// CREATE_CHILD_SA without a KE payload: no PFS, so a proposal demanding a group is out.
    Absent,
    /// CREATE_CHILD_SA with a KE payload of this group: PFS with it.
    Group(u16),
}

/// ESP suites gate64 accepts unless `[ipsec] esp_proposals` narrows them, in its order of
/// preference: AES-GCM-16 (256-, then 128-bit key), then AES-CBC with HMAC-SHA2-256-128
/// (256, 128), what macOS, iOS and Windows propose by default.
pub const DEFAULT_ESP_SUITES: [Cipher; 4] = [
    Cipher::AesGcm16_256,
    Cipher::AesGcm16_128,
    Cipher::AesCbc256HmacSha256,
    Cipher::AesCbc128HmacSha256,
];

/// The AES-GMAC suites (integrity only, RFC 4543) in gate64's order of preference, offered
/// to IP-HTTPS clients alone and only with `[ipsec] iphttps_integrity_only`
/// ([`ResponderConfig::integrity_only_prefix`](super::ResponderConfig::integrity_only_prefix)).
pub const INTEGRITY_ONLY_SUITES: [Cipher; 3] = [
    Cipher::NullAesGmac256,
    Cipher::NullAesGmac192,
    Cipher::NullAesGmac128,
];

/// The Teredo prefix `2001:0::/32` (RFC 4380 §2.6): never integrity-only, whatever prefix the
/// configuration names.
const TEREDO_PREFIX: [u16; 2] = [0x2001, 0];

/// True when child SAs of the IKE SA between `local` (gate64) and `remote` may use AES-GMAC:
/// `remote` lies in [`ResponderConfig::integrity_only_prefix`](super::ResponderConfig)
/// (the IP-HTTPS prefix, whose hop TLS already encrypts), is no Teredo address, and `local`
/// is none of the native addresses (a native client's ESP crosses the network bare).
pub(crate) fn integrity_only_allowed(
    config: &super::ResponderConfig,
    local: std::net::SocketAddr,
    remote: std::net::SocketAddr,
) -> bool {
    let IpAddr::V6(remote) = remote.ip() else {
        return false;
    };
    let teredo = remote.segments()[..2] == TEREDO_PREFIX;
    config
        .integrity_only_prefix
        .is_some_and(|p| p.contains(&remote))
        && !teredo
        && remote.to_ipv4_mapped().is_none()
        && !config.native_addresses.contains(&local.ip())
}

/// The ESP suites a child SA of the IKE SA between `local` and `remote` may use, in gate64's
/// order: the AES-GMAC ones first where [`integrity_only_allowed`] (the point of the setting
/// is to not encrypt twice), then `[ipsec] esp_proposals`, which never adds AES-GMAC.
pub(crate) fn esp_suites_for(
    config: &super::ResponderConfig,
    local: std::net::SocketAddr,
    remote: std::net::SocketAddr,
) -> Vec<Cipher> {
    let gmac = integrity_only_allowed(config, local, remote);
    let extra: &[Cipher] = if gmac { &INTEGRITY_ONLY_SUITES } else { &[] };
    extra
        .iter()
        .chain(config.esp_suites.iter().filter(|c| !c.is_gmac()))
        .copied()
        .collect()
}

/// Picks an ESP proposal: the one offering the suite earliest in `accepted` (gate64's
/// preference; among equals, the client's first), ESN either way, the KE transform as
/// [`KeRule`] says. AES-GCM and AES-GMAC take no integrity transform (or NONE), AES-CBC
/// takes AUTH_HMAC_SHA2_256_128.
pub(crate) fn choose_esp_proposal(
    proposals: &[Proposal],
    ke: KeRule,
    accepted: &[Cipher],
) -> Result<EspChoice, ChildError> {
    let mut wrong_group = false;
    let mut best: Option<(usize, EspChoice)> = None;
    for p in proposals
        .iter()
        .filter(|p| p.protocol == transform::PROTO_ESP)
    {
        let known = [
            transform::ENCR,
            transform::INTEG,
            transform::KE,
            transform::ESN,
        ];
        if !p.only_understood(&known) {
            continue;
        }
        let Ok(spi) = <[u8; 4]>::try_from(p.spi.as_slice()) else {
            continue;
        };
        let (Some((rank, cipher)), esn) = esp_transforms(p, accepted) else {
            continue;
        };
        if best.as_ref().is_some_and(|(r, _)| *r <= rank) {
            continue;
        }
        let groups: Vec<u16> = p
            .transforms
            .iter()
            .filter(|t| t.kind == transform::KE)
            .map(|t| t.id)
            .collect();
        let group = match ke {
            KeRule::Ignore => None,
            KeRule::Absent if groups.iter().all(|&g| g == 0) => None,
            KeRule::Absent => continue,
            KeRule::Group(g) => match Group::from_id(g).filter(|_| groups.contains(&g)) {
                Some(g) => Some(g),
                None => {
                    wrong_group |= groups.iter().any(|&g| Group::from_id(g).is_some());
                    continue;
                }
            },
        };
        let choice = EspChoice {
            number: p.number,
            peer_spi: u32::from_be_bytes(spi),
            cipher,
            esn,
            group,
        };
        best = Some((rank, choice));
    }
    if let Some((_, choice)) = best {
        return Ok(choice);
    }
    if wrong_group {
        Err((notify::INVALID_KE_PAYLOAD, Refusal::InvalidKe))
    } else {
        Err((notify::NO_PROPOSAL_CHOSEN, Refusal::NoProposal))
    }
}

/// The best suite of `accepted` the proposal offers (its index there and the suite) and the
/// ESN choice (RFC 7296 §3.3.2: ESN is mandatory for ESP; an initiator that omits it gets
/// none).
fn esp_transforms(p: &Proposal, accepted: &[Cipher]) -> (Option<(usize, Cipher)>, bool) {
    let offers_encr = |id: u16, bits: u16| {
        p.transforms
            .iter()
            .any(|t| t.kind == transform::ENCR && t.id == id && t.key_length() == Some(bits))
    };
    let mut integ = p.transforms.iter().filter(|t| t.kind == transform::INTEG);
    // RFC 5282 §8 / RFC 4106: a combined-mode cipher takes no integrity transform, or NONE.
    let integ_none = integ.clone().all(|t| t.id == 0);
    let hmac_sha256 = integ.any(|t| t.id == transform::AUTH_HMAC_SHA2_256_128);
    let cipher = accepted.iter().enumerate().find_map(|(rank, &c)| {
        let bits = u16::try_from(c.aes_key_len() * 8).unwrap_or(0);
        let offered = if c.is_cbc() {
            offers_encr(transform::ENCR_AES_CBC, bits) && hmac_sha256
        } else if c.is_gmac() {
            offers_encr(transform::ENCR_NULL_AUTH_AES_GMAC, bits) && integ_none
        } else {
            offers_encr(transform::ENCR_AES_GCM_16, bits) && integ_none
        };
        offered.then_some((rank, c))
    });
    let esn = p
        .transforms
        .iter()
        .filter(|t| t.kind == transform::ESN)
        .find_map(|t| match t.id {
            transform::ESN_NONE => Some(false),
            transform::ESN_ENABLED => Some(true),
            _ => None,
        });
    (cipher, esn.unwrap_or(false))
}

/// The group to ask for in INVALID_KE_PAYLOAD when the KE payload did not fit.
pub(crate) fn wanted_esp_group(proposals: &[Proposal]) -> Option<Group> {
    proposals
        .iter()
        .filter(|p| p.protocol == transform::PROTO_ESP)
        .flat_map(|p| p.transforms.iter())
        .filter(|t| t.kind == transform::KE)
        .find_map(|t| Group::from_id(t.id))
}

fn esp_reply(choice: &EspChoice, our_spi: u32) -> Proposal {
    let cipher = choice.cipher;
    let bits = u16::try_from(cipher.aes_key_len() * 8).unwrap_or(0);
    let encr = if cipher.is_cbc() {
        transform::ENCR_AES_CBC
    } else if cipher.is_gmac() {
        transform::ENCR_NULL_AUTH_AES_GMAC
    } else {
        transform::ENCR_AES_GCM_16
    };
    let mut transforms = vec![Transform::with_key_length(transform::ENCR, encr, bits)];
    if cipher.is_cbc() {
        transforms.push(Transform::new(
            transform::INTEG,
            transform::AUTH_HMAC_SHA2_256_128,
        ));
    }
    transforms.extend([Transform::new(
        transform::ESN,
        if choice.esn {
            transform::ESN_ENABLED
        } else {
            transform::ESN_NONE
        },
    )]);
    if let Some(g) = choice.group {
        transforms.push(Transform::new(transform::KE, g.id()));
    }
    Proposal {
        number: choice.number,
        protocol: transform::PROTO_ESP,
        spi: our_spi.to_be_bytes().to_vec(),
        transforms,
    }
}

/// A fresh inbound ESP SPI (RFC 4303 §2.1: 1-255 are reserved).
fn fresh_esp_spi(r: &Responder) -> Result<u32, keys::CryptoError> {
    loop {
        let b = keys::random_bytes(4)?;
        let spi = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        if spi >= 256 && !r.inbound_spis.contains_key(&spi) {
            return Ok(spi);
        }
    }
}

/// Everything a child SA is built from.
pub(crate) struct ChildPlan<'a> {
    pub(crate) choice: EspChoice,
    pub(crate) tunnel: TunnelKind,
    pub(crate) tsi: Vec<TrafficSelector>,
    pub(crate) tsr: Vec<TrafficSelector>,
    pub(crate) inner: IpAddr,
    /// Its IPv4 lease, when it has one and the child SA carries IPv4.
    pub(crate) inner4: Option<std::net::Ipv4Addr>,
    pub(crate) ni: &'a [u8],
    pub(crate) nr: &'a [u8],
    pub(crate) pfs: Option<&'a Secret>,
}

/// Derives the keys, records the child on its IKE SA and returns the pair plus the SA reply.
pub(crate) fn build_child(
    r: &mut Responder,
    now: Instant,
    spi_r: u64,
    plan: ChildPlan<'_>,
) -> Result<(ChildSaPair, Proposal), keys::CryptoError> {
    let our_spi = fresh_esp_spi(r)?;
    let sa = r.sas.get_mut(&spi_r).ok_or(keys::CryptoError::Library)?;
    let (i_to_r, r_to_i) = keys::child_keymat(
        &sa.keys.sk_d,
        plan.pfs,
        plan.ni,
        plan.nr,
        // RFC 7296 §2.17: per direction, the encryption key then the integrity key (AES-CBC)
        // or the key then the salt (AES-GCM, RFC 4106 §8.1): the cipher's KEYMAT length.
        plan.choice.cipher.keymat_len(),
    );
    let soft = r.config.child_lifetime;
    let lifetime = Lifetime {
        soft_bytes: u64::MAX,
        hard_bytes: u64::MAX,
        soft_after: soft,
        hard_after: soft + soft / 10,
    };
    let (local_ts, remote_ts) = (selectors(&plan.tsr), selectors(&plan.tsi));
    let params = |spi, key: Secret| SaParams {
        spi,
        keys: SaKeys {
            cipher: plan.choice.cipher,
            key: key.into_bytes(),
        },
        esn: plan.choice.esn,
        lifetime,
        created: now,
        local_ts: local_ts.clone(),
        remote_ts: remote_ts.clone(),
    };
    let outer = match sa.remote.ip() {
        IpAddr::V6(a) => a,
        IpAddr::V4(a) => a.to_ipv6_mapped(),
    };
    // RFC 3948: the client's IKE moved to 4500, so its ESP comes UDP-encapsulated there.
    let udp_encap = (sa.local.port() == r.config.nat_t_port).then_some(sa.remote.port());
    let pair = ChildSaPair {
        inbound: params(our_spi, i_to_r),
        outbound: params(plan.choice.peer_spi, r_to_i),
        peer: Peer {
            outer,
            native: r
                .config
                .native_addresses
                .contains(&sa.local.ip())
                .then_some(sa.local),
            udp_encap,
            inner: std::iter::once(plan.inner)
                .chain(plan.inner4.map(IpAddr::V4))
                .collect(),
        },
        tunnel: plan.tunnel,
        ike_spi: sa.spi_i,
    };
    sa.children.push(ChildRecord {
        inbound_spi: our_spi,
        outbound_spi: plan.choice.peer_spi,
        created: now,
        past_soft: false,
    });
    r.inbound_spis.insert(our_spi, spi_r);
    r.schedule(spi_r);
    Ok((pair, esp_reply(&plan.choice, our_spi)))
}

struct CreateRequest<'a> {
    proposals: &'a [Proposal],
    ni: &'a [u8],
    ke: Option<(u16, &'a [u8])>,
    tsi: &'a [TrafficSelector],
    tsr: &'a [TrafficSelector],
    rekey: Option<&'a Notify>,
}

fn create_parts(inner: &[Payload]) -> Option<CreateRequest<'_>> {
    let (mut proposals, mut ni, mut ke, mut tsi, mut tsr) = (None, None, None, &[][..], &[][..]);
    for p in inner {
        match p {
            Payload::Sa(l) => proposals = Some(l.as_slice()),
            Payload::Nonce(n) => ni = Some(n.as_slice()),
            Payload::Ke { group, data } => ke = Some((*group, data.as_slice())),
            Payload::TsI(l) => tsi = l.as_slice(),
            Payload::TsR(l) => tsr = l.as_slice(),
            _ => {}
        }
    }
    let rekey = find_notify(inner, notify::REKEY_SA);
    Some(CreateRequest {
        proposals: proposals?,
        ni: ni?,
        ke,
        tsi,
        tsr,
        rekey,
    })
}

/// Handles a CREATE_CHILD_SA request on an established IKE SA.
pub(super) fn handle_create(r: &mut Responder, now: Instant, h: Header, inner: Vec<Payload>) {
    // A rekey or a new child SA authenticates nobody, but it is where a certificate revoked
    // since (a CRL in force now lists it) is looked at again: the IKE SA ends instead.
    if r.sas
        .get(&h.spi_r)
        .is_some_and(|sa| r.revokes_any(&sa.certificates))
    {
        tracing::info!(
            spi = format!("{:016x}", h.spi_r),
            "ike SA ended at a CREATE_CHILD_SA: its certificate is revoked"
        );
        r.event(Event::IkeSaEnded {
            spi_r: h.spi_r,
            reason: EndReason::Revoked,
        });
        return super::liveness::delete_one(r, h.spi_r);
    }
    let remote = r.sas.get(&h.spi_r).map(|s| s.remote);
    let Some(req) = create_parts(&inner) else {
        r.respond_error(h, notify::INVALID_SYNTAX);
        return remote
            .into_iter()
            .for_each(|p| r.refused(p, Refusal::Malformed));
    };
    let ike_rekey = req
        .proposals
        .iter()
        .any(|p| p.protocol == transform::PROTO_IKE);
    let outcome = check_create(r, h.spi_r, ike_rekey).and_then(|()| {
        if ike_rekey {
            rekey_ike(r, now, h, &req)
        } else {
            create_child(r, now, h, &req)
        }
    });
    if let Err((kind, reason)) = outcome {
        let data = match kind {
            notify::INVALID_KE_PAYLOAD => wanted_esp_group(req.proposals)
                .or_else(|| {
                    match proposal::choose_ike_proposal(req.proposals, 0, &r.config.ike_policy) {
                        proposal::Choice::WrongGroup(g) => Some(g),
                        _ => None,
                    }
                })
                .map(|g| g.id().to_be_bytes().to_vec())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        r.respond(h.spi_r, h, vec![Payload::Notify(Notify::new(kind, data))]);
        if let Some(p) = remote {
            r.refused(p, reason);
        }
    }
}

fn pfs_secret(
    req: &CreateRequest<'_>,
    group: Option<Group>,
) -> Result<Option<(KeyExchange, Secret)>, ChildError> {
    let (Some(group), Some((_, data))) = (group, req.ke) else {
        return Ok(None);
    };
    let kex =
        KeyExchange::generate(group).map_err(|_| (notify::TEMPORARY_FAILURE, Refusal::Crypto))?;
    let secret = kex
        .agree(data)
        .map_err(|_| (notify::INVALID_SYNTAX, Refusal::Malformed))?;
    Ok(Some((kex, secret)))
}

/// The tunnel a CREATE_CHILD_SA gets and its TSr narrowed into it: the IKE SA's tunnel once
/// its first child SA fixed one (as IKE_AUTH narrowed a named or ruled tunnel, so a client
/// that rekeys with the `::/0` it first asked for keeps its tunnel), else the one its TSr
/// asks for; the intranet only when it was allowed at establishment.
fn tunnel_for(
    config: &super::ResponderConfig,
    sa: &super::IkeSa,
    tsr: &[TrafficSelector],
) -> Option<(TunnelKind, Vec<TrafficSelector>)> {
    choose_tunnel(
        tsr,
        sa.tunnel,
        &config.infrastructure_prefixes,
        &config.intranet_prefixes,
    )
    .filter(|(t, _)| {
        sa.tunnel.is_none_or(|mine| mine == *t)
            && (*t != TunnelKind::Intranet || sa.intranet_allowed)
    })
}

fn create_child(
    r: &mut Responder,
    now: Instant,
    h: Header,
    req: &CreateRequest<'_>,
) -> Result<(), ChildError> {
    let sa = r
        .sas
        .get(&h.spi_r)
        .ok_or((notify::INVALID_SYNTAX, Refusal::UnknownSpi))?;
    let rekeyed = match req.rekey {
        Some(n) => {
            let spi = <[u8; 4]>::try_from(n.spi.as_slice())
                .map(u32::from_be_bytes)
                .ok();
            let old = sa
                .children
                .iter()
                .find(|c| Some(c.outbound_spi) == spi || Some(c.inbound_spi) == spi);
            Some(
                old.ok_or((notify::CHILD_SA_NOT_FOUND, Refusal::Malformed))?
                    .inbound_spi,
            )
        }
        None => None,
    };
    let rule = req.ke.map_or(KeRule::Absent, |k| KeRule::Group(k.0));
    let suites = esp_suites_for(&r.config, sa.local, sa.remote);
    let choice = choose_esp_proposal(req.proposals, rule, &suites)?;
    let (tunnel, tsr) = tunnel_for(&r.config, sa, req.tsr)
        .ok_or((notify::TS_UNACCEPTABLE, Refusal::TsUnacceptable))?;
    let inner = sa.inner.unwrap_or(sa.remote.ip());
    let (tsi, tsr) = fit_selectors(req.tsi, tsr, inner, sa.inner4)
        .ok_or((notify::TS_UNACCEPTABLE, Refusal::TsUnacceptable))?;
    let inner4 = sa.inner4.filter(|_| tsi.iter().any(|t| t.start.is_ipv4()));
    let pfs = pfs_secret(req, choice.group)?;
    let nr = keys::random_bytes(32).map_err(|_| (notify::TEMPORARY_FAILURE, Refusal::Crypto))?;
    let plan = ChildPlan {
        choice,
        tunnel,
        tsi: tsi.clone(),
        tsr: tsr.clone(),
        inner,
        inner4,
        ni: req.ni,
        nr: &nr,
        pfs: pfs.as_ref().map(|p| &p.1),
    };
    let (pair, proposal) = build_child(r, now, h.spi_r, plan)
        .map_err(|_| (notify::TEMPORARY_FAILURE, Refusal::Crypto))?;
    let mut payloads = vec![Payload::Sa(vec![proposal]), Payload::Nonce(nr.clone())];
    if let Some((kex, _)) = &pfs {
        let data = kex
            .public_data()
            .map_err(|_| (notify::TEMPORARY_FAILURE, Refusal::Crypto))?;
        payloads.push(Payload::Ke {
            group: kex.group().id(),
            data,
        });
    }
    payloads.extend([Payload::TsI(tsi), Payload::TsR(tsr)]);
    r.respond(h.spi_r, h, payloads);
    if let Some(sa) = r.sas.get_mut(&h.spi_r) {
        sa.tunnel = Some(tunnel);
        if rekeyed.is_some() {
            sa.rekeys += 1;
        }
    }
    r.event(Event::ChildSaUp(Box::new(pair)));
    if rekeyed.is_some() {
        r.event(Event::Rekeyed {
            kind: RekeyKind::Child,
        });
    }
    Ok(())
}

/// RFC 7296 §2.18: a new IKE SA with fresh SPIs and keys from the old SK_d; the children and
/// the lease move to it. The old SA stays until the initiator deletes it.
fn rekey_ike(
    r: &mut Responder,
    now: Instant,
    h: Header,
    req: &CreateRequest<'_>,
) -> Result<(), ChildError> {
    let (group_id, ke) = req.ke.ok_or((notify::INVALID_SYNTAX, Refusal::Malformed))?;
    let (number, suite, group) =
        match proposal::choose_ike_proposal(req.proposals, group_id, &r.config.ike_policy) {
            proposal::Choice::Accept(n, s, g) => (n, s, g),
            proposal::Choice::WrongGroup(_) => {
                return Err((notify::INVALID_KE_PAYLOAD, Refusal::InvalidKe));
            }
            proposal::Choice::None => {
                return Err((notify::NO_PROPOSAL_CHOSEN, Refusal::NoProposal));
            }
        };
    let proposal = req
        .proposals
        .iter()
        .find(|p| p.number == number && p.protocol == transform::PROTO_IKE);
    let new_spi_i = proposal
        .and_then(|p| <[u8; 8]>::try_from(p.spi.as_slice()).ok())
        .map(u64::from_be_bytes)
        .ok_or((notify::INVALID_SYNTAX, Refusal::Malformed))?;
    let crypto = |_| (notify::TEMPORARY_FAILURE, Refusal::Crypto);
    let kex = KeyExchange::generate(group).map_err(crypto)?;
    let shared = kex
        .agree(ke)
        .map_err(|_| (notify::INVALID_SYNTAX, Refusal::Malformed))?;
    let nr = keys::random_bytes(32).map_err(crypto)?;
    let new_spi_r = proposal::fresh_spi(r).map_err(crypto)?;
    let old = r
        .sas
        .get_mut(&h.spi_r)
        .ok_or((notify::INVALID_SYNTAX, Refusal::UnknownSpi))?;
    let keys = IkeKeys::derive_rekey(
        &old.keys.sk_d,
        suite,
        &shared,
        req.ni,
        &nr,
        new_spi_i,
        new_spi_r,
    )
    .map_err(crypto)?;
    let reply = proposal::ike_reply(number, suite, group, new_spi_r.to_be_bytes().to_vec());

    let mut fresh = IkeSa::new((new_spi_i, new_spi_r), (old.local, old.remote), now, keys);
    fresh.ni = req.ni.to_vec();
    fresh.nr = nr.clone();
    inherit(&mut fresh, old);
    let data = kex.public_data().map_err(crypto)?;
    let payloads = vec![
        Payload::Sa(vec![reply]),
        Payload::Nonce(nr),
        Payload::Ke {
            group: group.id(),
            data,
        },
    ];
    r.respond(h.spi_r, h, payloads);
    let up = rekeyed_up_event(r, &fresh);
    adopt(r, new_spi_r, fresh);
    r.event(up);
    r.event(Event::Rekeyed {
        kind: RekeyKind::Ike,
    });
    Ok(())
}

/// `Event::IkeSaUp` for the IKE SA `fresh` that a rekey made: who it authenticated, its
/// tunnel and its RADIUS authorization, all taken over from the old one.
fn rekeyed_up_event(r: &Responder, fresh: &IkeSa) -> Event {
    let grant = fresh.radius.as_deref();
    Event::IkeSaUp {
        ike_spi: fresh.spi_i,
        spi_r: fresh.spi_r,
        peer: fresh.remote,
        native: r.native_socket(fresh.local),
        identity: fresh
            .identity
            .as_ref()
            .map_or_else(String::new, |n| n.subject.to_string()),
        eap_user: fresh.eap_second_user().map(str::to_owned),
        tunnel: fresh.tunnel,
        radius_user: grant.map(|g| g.user.clone()),
        filter_id: grant.and_then(|g| g.filter_id.clone()),
        class: grant.map(|g| g.class.clone()).unwrap_or_default(),
    }
}

/// What the IKE SA replacing `old` in a rekey takes over from it: the peer's capabilities
/// (MOBIKE among them),
/// who it authenticated (and when: a rekey is no authentication), its tunnel and the
/// tunnels it may carry, its lease and its child SAs.
fn inherit(fresh: &mut IkeSa, old: &mut IkeSa) {
    fresh.established = true;
    fresh.peer_hashes = old.peer_hashes.clone();
    fresh.peer_fragmentation = old.peer_fragmentation;
    fresh.mobike = old.mobike;
    fresh.mid_sync = old.mid_sync;
    fresh.identity = old.identity.clone();
    fresh.identity_key = old.identity_key;
    fresh.authenticated = old.authenticated;
    fresh.session_end = old.session_end;
    fresh.radius = old.radius.clone();
    fresh.certificate = old.certificate.clone();
    fresh.second_auth = old.second_auth.clone();
    fresh.tunnel = old.tunnel;
    fresh.intranet_allowed = old.intranet_allowed;
    fresh.certificates = old.certificates.clone();
    fresh.local_ts = old.local_ts.clone();
    fresh.inner = old.inner;
    fresh.leased = std::mem::take(&mut old.leased);
    fresh.inner4 = old.inner4.take();
    fresh.children = std::mem::take(&mut old.children);
    fresh.rekeys = old.rekeys + 1;
}

/// Files the IKE SA that replaced another in a rekey: its child SAs' SPIs point at it, it is
/// found by identity and woken by its deadline.
fn adopt(r: &mut Responder, spi_r: u64, fresh: Box<IkeSa>) {
    for c in &fresh.children {
        r.inbound_spis.insert(c.inbound_spi, spi_r);
    }
    if let Some(key) = fresh.identity_key {
        r.index_identity(key, spi_r);
    }
    r.sas.insert(spi_r, fresh);
    r.schedule(spi_r);
}

/// The caps of a CREATE_CHILD_SA request on IKE SA `spi_r`: an IKE SA rekey needs room for
/// its identity, a child SA (new or rekey) room under `max_child_sas_per_ike_sa`. RFC 7296
/// §3.10.1: NO_ADDITIONAL_SAS says the responder accepts no more SAs on this IKE SA.
fn check_create(r: &Responder, spi_r: u64, ike_rekey: bool) -> Result<(), ChildError> {
    let Some(sa) = r.sas.get(&spi_r) else {
        return Ok(());
    };
    if ike_rekey {
        let held = sa
            .identity_key
            .as_ref()
            .and_then(|id| r.by_identity.get(id))
            .map_or(0, Vec::len);
        if held >= r.config.max_ike_sas_per_identity {
            return Err((notify::NO_ADDITIONAL_SAS, Refusal::IdentityCap));
        }
    } else if sa.children.len() >= r.config.max_child_sas_per_ike_sa {
        return Err((notify::NO_ADDITIONAL_SAS, Refusal::ChildSaCap));
    }
    Ok(())
}
