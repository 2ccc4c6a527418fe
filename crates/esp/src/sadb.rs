//! The SA database every data-path worker shares: inbound SAs by SPI, outbound SAs by the
//! inner destination they serve.
//!
//! Both indexes are `DashMap`s: a lookup read-locks one shard of many, so workers on
//! different cores contend only when they hit the same shard, and the IKE thread's installs
//! and removals block only the shard they touch. (An `ArcSwap` of immutable maps would make
//! lookups lock-free but every install would copy the whole map: with 20,000 child SAs and
//! rekeys every hour per SA that is several copies of a 20,000-entry map per second.)

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;

use crate::policy::SessionPolicy;
use crate::sa::{Inbound, KeyError, Outbound, SaParams};
use crate::selector::{Selector, any_covers};

/// Smallest SPI gate64 hands out: 1-255 are reserved by IANA (RFC 4303 §2.1).
pub const MIN_SPI: u32 = 256;

/// Which of a client's two tunnels a child SA belongs to (DirectAccess's split).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TunnelKind {
    /// Reaches only `[ipsec] infrastructure_prefixes` (DNS64, domain controllers,
    /// management).
    Infrastructure,
    /// Reaches `[ipsec] intranet_prefixes`.
    Intranet,
}

/// Where the peer of a child SA is and what it may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The client's outer IPv6 address (Teredo or IP-HTTPS), or the IPv4-mapped form of its
    /// IPv4 address when it reaches gate64 directly over IPv4.
    pub outer: Ipv6Addr,
    /// When the client reaches gate64 directly (`[ipsec] listen`), not through Teredo or
    /// IP-HTTPS: gate64's socket address its ESP and IKE use (an address of the list, port
    /// 4500), which the dataplane sends ESP from. `None` for the tunnelled transports.
    pub native: Option<SocketAddr>,
    /// The client's UDP source port when ESP is UDP-encapsulated (RFC 3948), else `None`
    /// (IPv6 next header 50).
    pub udp_encap: Option<u16>,
    /// The client's inner addresses (pool6 or its outer address).
    pub inner: Vec<IpAddr>,
}

/// Both directions of one child SA, as IKE hands it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSaPair {
    /// What gate64 receives (its SPI is the one gate64 chose).
    pub inbound: SaParams,
    /// What gate64 sends.
    pub outbound: SaParams,
    /// The client.
    pub peer: Peer,
    /// Which tunnel.
    pub tunnel: TunnelKind,
    /// The IKE SA that negotiated it (initiator's SPI), for `gate64 status` and deletes.
    pub ike_spi: u64,
}

/// How far [`SaDb::install_synced`] moves an outbound sequence number past the last one
/// the standby was told of: 2^20. It assumes the active node sends an SA's counter again
/// before it has sealed 2^18 more packets under it (and at least once per sync batch): the
/// margin is then four times what it may have sent unreported, with room for packets sealed
/// while the update was on its way. At 1 Gbit/s of 1,400-byte packets under one SA (~90,000
/// packets/s) that is over ten seconds of traffic; without ESN a takeover costs 1/4096 of
/// the 2^32 space, so an SA survives thousands of them before it must be rekeyed.
pub const TAKEOVER_SEQ_MARGIN: u64 = 1 << 20;

/// A child SA as one node hands it to another ([`SaDb::export_sa`], [`SaDb::install_synced`]):
/// both directions with their key material, the peer, and where the counters stood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncedChildSa {
    /// Both directions, the peer, the tunnel and the IKE SA.
    pub pair: ChildSaPair,
    /// The sequence number the next outbound packet would have got.
    pub outbound_next_seq: u64,
    /// The highest inbound sequence number received (0: none yet).
    pub inbound_highest_seq: u64,
}

/// Why [`SaDb::install`] refused a child SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InstallError {
    /// An SA with this inbound SPI is installed already.
    #[error("inbound SPI {0:#010x} is in use")]
    DuplicateSpi(u32),
    /// The key material does not fit the cipher.
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// An installed outbound SA with what the data path needs to send under it.
#[derive(Debug)]
pub struct OutboundEntry {
    /// The SA (shared with the entry [`SaDb::update_peer`] replaces this one with).
    pub sa: Arc<Outbound>,
    /// Where to send.
    pub peer: Peer,
    /// Which tunnel.
    pub tunnel: TunnelKind,
    /// The IKE SA it belongs to.
    pub ike_spi: u64,
    /// The inbound SPI of the same child SA (what [`SaDb::remove`] takes).
    pub inbound_spi: u32,
    /// The policy of its IKE SA's session, when one applies ([`SaDb::apply_policy`]): what
    /// both directions of the child SA may reach, and how fast.
    pub policy: Option<Arc<SessionPolicy>>,
    /// Install order: the newest live SA wins a lookup (rekey overlap, RFC 7296 §2.8).
    generation: u64,
}

/// An installed inbound SA, linked to its outbound half.
#[derive(Debug)]
pub struct InboundEntry {
    /// The SA (shared with the entry [`SaDb::update_peer`] replaces this one with).
    pub sa: Arc<Inbound>,
    /// Which tunnel.
    pub tunnel: TunnelKind,
    /// The IKE SA it belongs to.
    pub ike_spi: u64,
    /// The other direction of the same child SA.
    pub outbound: Arc<OutboundEntry>,
}

impl InboundEntry {
    /// The client this SA belongs to.
    pub fn peer(&self) -> &Peer {
        &self.outbound.peer
    }

    /// The policy of the session this SA belongs to, if any.
    pub fn policy(&self) -> Option<&Arc<SessionPolicy>> {
        self.outbound.policy.as_ref()
    }
}

/// What the database knows of one IKE SA: its child SAs and its session's policy.
#[derive(Debug, Default)]
struct IkeEntry {
    /// Inbound SPIs of its installed child SAs.
    children: Vec<u32>,
    policy: Option<Arc<SessionPolicy>>,
}

/// The SA database: see the module docs for why it is sharded.
#[derive(Debug, Default)]
pub struct SaDb {
    inbound: DashMap<u32, Arc<InboundEntry>>,
    /// Outbound SAs under each address their remote selectors name exactly, and under the
    /// unspecified address of the family for wider remote selectors (a client's view of the
    /// corporate prefixes). gate64 as responder narrows clients to single addresses, so its
    /// wide bucket stays empty.
    outbound: DashMap<IpAddr, Vec<Arc<OutboundEntry>>>,
    /// Child SAs and policy by IKE SA (`ike_spi`). Lock order: an entry here, then
    /// `inbound`, then `outbound`; so a policy applied while a child SA installs reaches it.
    by_ike: DashMap<u64, IkeEntry>,
    generation: AtomicU64,
    /// Child SAs another node synced here that wait for a takeover (`[ha]`): what ESP
    /// finding no SA is looked up in.
    awaiting: crate::AwaitingTakeover,
}

impl SaDb {
    /// An empty database.
    pub fn new() -> Self {
        SaDb::default()
    }

    /// Installs both directions of a child SA. A rekeyed SA is installed beside the old one,
    /// which keeps opening until IKE removes it; outbound lookups pick the newer one.
    /// It takes the policy its IKE SA has ([`SaDb::apply_policy`]).
    pub fn install(&self, pair: ChildSaPair) -> Result<(), InstallError> {
        let inbound = Inbound::new(&pair.inbound)?;
        let sa = Outbound::new(&pair.outbound)?;
        self.insert(pair, inbound, sa)
    }

    /// The child SA whose inbound SPI is `inbound_spi`, with its counters, as a standby node
    /// needs it to take the SA over ([`SaDb::install_synced`]). Key material included: the
    /// caller sends it only over an authenticated, encrypted channel. `None` when no such SA
    /// is installed.
    pub fn export_sa(&self, inbound_spi: u32) -> Option<SyncedChildSa> {
        let entry = self.inbound(inbound_spi)?;
        let out = &entry.outbound;
        Some(SyncedChildSa {
            pair: ChildSaPair {
                inbound: entry.sa.params(),
                outbound: out.sa.params(),
                peer: out.peer.clone(),
                tunnel: out.tunnel,
                ike_spi: out.ike_spi,
            },
            outbound_next_seq: out.sa.next_seq(),
            inbound_highest_seq: entry.sa.highest_seq(),
        })
    }

    /// The counters of the child SA whose inbound SPI is `inbound_spi`, as
    /// [`SaDb::export_sa`] gives them but without copying its parameters and keys: the
    /// sequence number the next outbound packet would get and the highest inbound sequence
    /// number received. `None` when no such SA is installed.
    pub fn export_counters(&self, inbound_spi: u32) -> Option<(u64, u64)> {
        let entry = self.inbound(inbound_spi)?;
        Some((entry.outbound.sa.next_seq(), entry.sa.highest_seq()))
    }

    /// Installs a child SA taken over from another node: its outbound counter resumes at
    /// `outbound_next_seq + seq_margin` (saturating; past the sequence space the SA is
    /// installed expired and IKE must replace it), so no sequence number, and so no AES-GCM
    /// nonce, the old node may have used after its last update is used again; its replay
    /// window refuses every sequence number up to `inbound_highest_seq`. ESP the old node
    /// received after its last update lies above that mark and, replayed, opens once more
    /// here: the update cadence bounds how much. Pass
    /// [`TAKEOVER_SEQ_MARGIN`] unless the sender's update cadence calls for another margin.
    /// Byte counts restart at zero. It takes the policy its IKE SA has, as [`SaDb::install`].
    pub fn install_synced(&self, sa: SyncedChildSa, seq_margin: u64) -> Result<(), InstallError> {
        let next = sa.outbound_next_seq.saturating_add(seq_margin);
        let inbound = Inbound::resume(&sa.pair.inbound, sa.inbound_highest_seq)?;
        let outbound = Outbound::resume(&sa.pair.outbound, next)?;
        self.insert(sa.pair, inbound, outbound)
    }

    fn insert(
        &self,
        pair: ChildSaPair,
        inbound: Inbound,
        sa: Outbound,
    ) -> Result<(), InstallError> {
        let inbound = Arc::new(inbound);
        let sa = Arc::new(sa);
        let mut ike = self.by_ike.entry(pair.ike_spi).or_default();
        let outbound = Arc::new(OutboundEntry {
            sa,
            peer: pair.peer,
            tunnel: pair.tunnel,
            ike_spi: pair.ike_spi,
            inbound_spi: pair.inbound.spi,
            policy: ike.policy.clone(),
            generation: self.generation.fetch_add(1, Relaxed),
        });
        match self.inbound.entry(pair.inbound.spi) {
            Entry::Occupied(_) => {
                let empty = ike.children.is_empty() && ike.policy.is_none();
                drop(ike);
                if empty {
                    self.by_ike.remove_if(&pair.ike_spi, |_, e| {
                        e.children.is_empty() && e.policy.is_none()
                    });
                }
                Err(InstallError::DuplicateSpi(pair.inbound.spi))
            }
            Entry::Vacant(slot) => {
                ike.children.push(pair.inbound.spi);
                for key in index_keys(&outbound) {
                    self.outbound.entry(key).or_default().push(outbound.clone());
                }
                slot.insert(Arc::new(InboundEntry {
                    sa: inbound,
                    tunnel: pair.tunnel,
                    ike_spi: pair.ike_spi,
                    outbound,
                }));
                Ok(())
            }
        }
    }

    /// Removes the child SA whose inbound SPI is `inbound_spi`, both directions, and returns
    /// it (its counters are final but for packets workers still hold: session accounting
    /// reads them). Workers still holding its `Arc`s finish their packet with it.
    pub fn remove(&self, inbound_spi: u32) -> Option<Arc<InboundEntry>> {
        let (_, entry) = self.inbound.remove(&inbound_spi)?;
        if let Entry::Occupied(mut ike) = self.by_ike.entry(entry.ike_spi) {
            ike.get_mut().children.retain(|&spi| spi != inbound_spi);
            // The IKE SA's last child SA: its policy goes with it.
            if ike.get().children.is_empty() {
                ike.remove();
            }
        }
        for key in index_keys(&entry.outbound) {
            if let Entry::Occupied(mut bucket) = self.outbound.entry(key) {
                bucket
                    .get_mut()
                    .retain(|o| !Arc::ptr_eq(o, &entry.outbound));
                if bucket.get().is_empty() {
                    bucket.remove();
                }
            }
        }
        Some(entry)
    }

    /// Points the child SA whose inbound SPI is `inbound_spi` at a new `peer`: the client's
    /// NAT mapping or transport changed, and IKE authenticated the new address (RFC 7296
    /// §2.23: follow the peer's latest authenticated address and port). Keys, counters and
    /// the replay window carry over. False when no such SA is installed.
    pub fn update_peer(&self, inbound_spi: u32, peer: Peer) -> bool {
        self.replace(inbound_spi, |old| (peer, old.policy.clone()))
    }

    /// Sets the policy of the IKE SA `ike_spi`'s session (`None`: none): its installed child
    /// SAs carry it from the next packet on, and the child SAs it installs later (rekeys, new
    /// CREATE_CHILD_SA) get it at install. Returns how many installed child SAs changed. A
    /// policy set on an IKE SA with no child SA yet waits for its first; it is forgotten
    /// with the IKE SA's last child SA ([`SaDb::remove`]).
    pub fn apply_policy(&self, ike_spi: u64, policy: Option<Arc<SessionPolicy>>) -> usize {
        let mut ike = self.by_ike.entry(ike_spi).or_default();
        ike.policy = policy;
        let children = ike.children.clone();
        let changed = children
            .iter()
            .filter(|&&spi| self.replace(spi, |old| (old.peer.clone(), ike.policy.clone())))
            .count();
        let empty = ike.children.is_empty() && ike.policy.is_none();
        drop(ike);
        if empty {
            self.by_ike
                .remove_if(&ike_spi, |_, e| e.children.is_empty() && e.policy.is_none());
        }
        changed
    }

    /// The policy set on the IKE SA `ike_spi`, if any.
    pub fn policy_of(&self, ike_spi: u64) -> Option<Arc<SessionPolicy>> {
        self.by_ike.get(&ike_spi).and_then(|e| e.policy.clone())
    }

    /// Replaces the entries of the child SA whose inbound SPI is `inbound_spi` with ones
    /// whose peer and policy `f` makes from the old outbound entry; keys, counters and the
    /// replay window carry over. False when no such SA is installed.
    fn replace(
        &self,
        inbound_spi: u32,
        f: impl FnOnce(&OutboundEntry) -> (Peer, Option<Arc<SessionPolicy>>),
    ) -> bool {
        let Some(mut slot) = self.inbound.get_mut(&inbound_spi) else {
            return false;
        };
        let old = Arc::clone(&slot.outbound);
        let (peer, policy) = f(&old);
        let new = Arc::new(OutboundEntry {
            sa: Arc::clone(&old.sa),
            peer,
            tunnel: old.tunnel,
            ike_spi: old.ike_spi,
            inbound_spi: old.inbound_spi,
            policy,
            generation: old.generation,
        });
        for key in index_keys(&old) {
            if let Some(mut bucket) = self.outbound.get_mut(&key) {
                for o in bucket.iter_mut().filter(|o| Arc::ptr_eq(o, &old)) {
                    *o = Arc::clone(&new);
                }
            }
        }
        let entry = slot.value_mut();
        *entry = Arc::new(InboundEntry {
            sa: Arc::clone(&entry.sa),
            tunnel: entry.tunnel,
            ike_spi: entry.ike_spi,
            outbound: new,
        });
        true
    }

    /// The child SAs another node synced here that wait for a takeover (the HA sync task
    /// publishes them; the ESP stage looks up only ESP that found no SA).
    pub fn awaiting(&self) -> &crate::AwaitingTakeover {
        &self.awaiting
    }

    /// The inbound SA for an ESP packet's SPI.
    pub fn inbound(&self, spi: u32) -> Option<Arc<InboundEntry>> {
        self.inbound.get(&spi).map(|e| Arc::clone(e.value()))
    }

    /// The outbound SA for a packet from `inner_src` to `inner_dst`: among the live SAs
    /// whose remote selectors cover the destination and whose local selectors cover the
    /// source, the one whose local selector covering the source is the narrowest, the newest
    /// among equals. A client's infrastructure SA (e.g. `fd00:c0::53/128`) and intranet SA
    /// (`fd00:c0::/64`) may both cover the infrastructure host: its replies must go out
    /// under the infrastructure SA, the one the client's policy expects them on.
    pub fn outbound_for(&self, inner_dst: IpAddr, inner_src: IpAddr) -> Option<Arc<OutboundEntry>> {
        self.best_in(inner_dst, inner_dst, inner_src)
            .or_else(|| self.best_in(unspecified(inner_dst), inner_dst, inner_src))
    }

    /// The best SA in the bucket under `key` for `dst` and `src`. Each SA's selectors are
    /// read once: under an exact address key every SA has a remote selector that is `dst`
    /// itself ([`index_keys`]), so only the wide bucket checks the remote side; the
    /// narrowest local selector covering `src`, `None` when none does, is the local check.
    /// (The unspecified address is the wide bucket's key, never an exact one.)
    fn best_in(&self, key: IpAddr, dst: IpAddr, src: IpAddr) -> Option<Arc<OutboundEntry>> {
        let bucket = self.outbound.get(&key)?;
        let exact = key == dst && !dst.is_unspecified();
        bucket
            .iter()
            .filter(|o| !o.sa.is_expired() && (exact || any_covers(o.sa.remote_ts(), dst)))
            .filter_map(|o| Some((narrowest_covering(o.sa.local_ts(), src)?, o)))
            .min_by_key(|(span, o)| (*span, core::cmp::Reverse(o.generation)))
            .map(|(_, o)| Arc::clone(o))
    }

    /// Child SAs installed (what `gate64_ipsec_qmsa` counts).
    pub fn len(&self) -> usize {
        self.inbound.len()
    }

    /// True when no child SA is installed.
    pub fn is_empty(&self) -> bool {
        self.inbound.is_empty()
    }

    /// Whether no IKE SA is known, for tests that nothing is left behind.
    #[cfg(test)]
    pub(crate) fn by_ike_is_empty(&self) -> bool {
        self.by_ike.is_empty()
    }

    /// Keys in the outbound index, for tests that nothing is left behind.
    #[cfg(test)]
    pub(crate) fn outbound_keys(&self) -> usize {
        self.outbound.len()
    }

    /// Calls `f` for every child SA (for `gate64 status`); the outbound half is
    /// `entry.outbound`. Holds one shard's read lock at a time: do not install or remove
    /// from `f`.
    pub fn for_each(&self, mut f: impl FnMut(&InboundEntry)) {
        for e in self.inbound.iter() {
            f(e.value());
        }
    }

    /// A fresh inbound SPI: random (from `random`, so the caller owns the RNG), at least
    /// [`MIN_SPI`] (RFC 4303 §2.1) and not installed. `None` if 64 draws found none free
    /// (the space holds 2^32 - 256). Reserve it by installing before asking again.
    pub fn allocate_spi(&self, mut random: impl FnMut() -> u32) -> Option<u32> {
        (0..64)
            .map(|_| random())
            .find(|&spi| spi >= MIN_SPI && !self.inbound.contains_key(&spi))
    }
}

/// The outbound index keys of an SA: each single-address remote selector, and the
/// unspecified address of the family for each wider one.
fn index_keys(o: &OutboundEntry) -> Vec<IpAddr> {
    let mut keys: Vec<IpAddr> =
        o.sa.remote_ts()
            .iter()
            .map(|s| {
                if s.is_single_address() {
                    s.start
                } else {
                    unspecified(s.start)
                }
            })
            .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// The number of addresses (minus one) in the narrowest of `selectors` that covers `addr`.
fn narrowest_covering(selectors: &[Selector], addr: IpAddr) -> Option<u128> {
    selectors
        .iter()
        .filter(|s| s.covers(addr))
        .map(|s| match (s.start, s.end) {
            (IpAddr::V4(a), IpAddr::V4(b)) => u128::from(u32::from(b).saturating_sub(u32::from(a))),
            (IpAddr::V6(a), IpAddr::V6(b)) => u128::from(b).saturating_sub(u128::from(a)),
            _ => u128::MAX,
        })
        .min()
}

fn unspecified(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}
