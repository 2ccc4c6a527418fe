//! IKE_SA_INIT's expensive step as a job the driver can run elsewhere: our key-exchange value,
//! the shared secret and the SK_* derivation (tens of microseconds with ECP-256, milliseconds
//! with MODP-2048).
//!
//! An IKE_SA_INIT that passed every cheap check (the caps, the cookie, the half-open limits
//! per source and host, the proposal) is counted as half-open at once, under the SPIr chosen
//! for it, and becomes an [`InitJob`]. With `ResponderConfig::offload_init` the job waits for
//! the driver ([`Responder::poll_init_job`]) and copies of the request are ignored meanwhile;
//! without it the job runs inline. [`InitJob::run`] is a pure function of what the job holds
//! and the crypto library's RNG (no clock, no I/O), so a driver may run it on any thread; its
//! [`InitVerdict`] goes back through [`Responder::handle_init_verdict`], which builds the
//! response and the half-open IKE SA. A job the driver has no room for goes back through
//! [`Responder::handle_init_shed`]: the request is forgotten as if it had been lost (its
//! half-open charge released), and the client's retransmission starts it again.

use std::net::SocketAddr;
use std::time::Instant;

use super::auth_round::SecondAuth;
use super::half_open::{self, Charge, SourceKey};
use super::second_auth;
use super::{CachedResponse, IkeSa, Refusal, Responder};
use crate::auth::SigHash;
use crate::keys::{self, CryptoError, Group, IkeKeys, KeyExchange, Suite};
use crate::message::{Header, Message, exchange, flags, notify};

/// The key exchange and key derivation of one IKE_SA_INIT.
#[derive(Debug)]
pub struct InitJob {
    spi_i: u64,
    spi_r: u64,
    peer: SocketAddr,
    suite: Suite,
    group: Group,
    ke: Vec<u8>,
    ni: Vec<u8>,
}

/// What [`InitJob::run`] computed: the IKE SA's keys, our nonce and KE data, or why not.
#[derive(Debug)]
pub struct InitVerdict {
    spi_r: u64,
    result: Result<Computed, CryptoError>,
}

/// The outcome of a key exchange that worked.
pub(crate) struct Computed {
    keys: IkeKeys,
    nr: Vec<u8>,
    public: Vec<u8>,
}

impl std::fmt::Debug for Computed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Computed(<redacted>)")
    }
}

impl InitJob {
    /// The address the request came from.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The key per-source limits count this job under.
    pub fn source_key(&self) -> SourceKey {
        SourceKey::of(self.peer.ip())
    }

    /// Our private value and KE data, the shared secret with the client's KE data, our nonce
    /// and the SK_* keys (RFC 7296 §2.14). CPU and the library's RNG only.
    pub fn run(self) -> InitVerdict {
        let result = (|| {
            let kex = KeyExchange::generate(self.group)?;
            let shared = kex.agree(&self.ke)?;
            let nr = keys::random_bytes(NONCE_LEN)?;
            let keys = IkeKeys::derive(self.suite, &shared, &self.ni, &nr, self.spi_i, self.spi_r)?;
            let public = kex.public_data()?;
            Ok(Computed { keys, nr, public })
        })();
        InitVerdict {
            spi_r: self.spi_r,
            result,
        }
    }
}

/// Length of our nonce (RFC 7296 §2.10: at least half the PRF key size, 32 here).
pub(crate) const NONCE_LEN: usize = 32;

/// An IKE_SA_INIT request waiting for its [`InitVerdict`]: what the response and the IKE SA
/// are built from.
#[derive(Debug)]
pub(crate) struct PendingInit {
    /// The request's header with the SPIr chosen for it.
    pub(super) header: Header,
    pub(super) local: SocketAddr,
    pub(super) remote: SocketAddr,
    pub(super) request: Vec<u8>,
    pub(super) ni: Vec<u8>,
    pub(super) chosen: (u8, Suite, Group),
    pub(super) peer_hashes: Vec<SigHash>,
    pub(super) peer_fragmentation: bool,
    pub(super) second_auth: SecondAuth,
    pub(super) started: Instant,
    pub(super) charge: Charge,
}

/// The bytes a waiting IKE_SA_INIT is charged for against `max_half_open_bytes`: the fixed
/// share and its request (the response and keys are charged when the IKE SA is built).
pub(super) fn pending_bytes(request_len: usize) -> usize {
    half_open::FIXED_BYTES.saturating_add(request_len)
}

/// Counts the request as half-open under `spi_r` and queues its job (or runs it inline
/// without `offload_init`).
pub(super) fn submit(r: &mut Responder, pending: PendingInit, ke: &[u8]) {
    let (spi_i, spi_r) = (pending.header.spi_i, pending.header.spi_r);
    let (_, suite, group) = pending.chosen;
    let job = InitJob {
        spi_i,
        spi_r,
        peer: pending.remote,
        suite,
        group,
        ke: ke.to_vec(),
        ni: pending.ni.clone(),
    };
    r.by_initiator.insert((pending.remote, spi_i), spi_r);
    r.pending_inits.insert(spi_r, pending);
    if r.config.offload_init {
        r.init_jobs.push_back(job);
    } else {
        finish(r, job.run());
    }
}

/// Whether the IKE_SA_INIT `spi_r` waits for its key exchange.
pub(super) fn is_pending(r: &Responder, spi_r: u64) -> bool {
    r.pending_inits.contains_key(&spi_r)
}

/// Takes the pending request `spi_r` out, releasing its half-open charge and its
/// `by_initiator` entry.
fn take(r: &mut Responder, spi_r: u64) -> Option<PendingInit> {
    let p = r.pending_inits.remove(&spi_r)?;
    let key = (p.remote, p.header.spi_i);
    if r.by_initiator.get(&key) == Some(&spi_r) {
        r.by_initiator.remove(&key);
    }
    Some(p)
}

/// Forgets the request `job` was made for, as if it had been lost.
pub(super) fn handle_shed(r: &mut Responder, job: InitJob) {
    if let Some(p) = take(r, job.spi_r) {
        r.half_open.release(p.charge);
    }
}

/// Answers the IKE_SA_INIT `verdict` was computed for: the response and a half-open IKE SA,
/// or the refusal of a KE payload that did not agree.
pub(super) fn finish(r: &mut Responder, verdict: InitVerdict) {
    let Some(mut p) = take(r, verdict.spi_r) else {
        return;
    };
    let computed = match verdict.result {
        Ok(c) => c,
        Err(e) => {
            r.half_open.release(p.charge);
            if e == CryptoError::PeerPublicValue {
                let reply =
                    super::init_reply::error_response(p.header, notify::INVALID_SYNTAX, Vec::new());
                r.transmit(p.local, p.remote, reply);
                return r.refused(p.remote, Refusal::Malformed);
            }
            return r.refused(p.remote, Refusal::Crypto);
        }
    };
    let h = p.header;
    let spi_r = h.spi_r;
    let mut payloads = super::init_reply::response_payloads(
        r,
        (h.spi_i, spi_r),
        (p.local, p.remote),
        &computed.public,
        &computed.nr,
        p.chosen,
        &p.peer_hashes,
        p.peer_fragmentation,
    );
    let header = Header {
        spi_r,
        flags: flags::RESPONSE,
        exchange: exchange::IKE_SA_INIT,
        ..h
    };
    payloads.extend(second_auth::init_notify(&p.second_auth));
    let response = Message { header, payloads }.emit();
    let mut sa = IkeSa::new(
        (h.spi_i, spi_r),
        (p.local, p.remote),
        p.started,
        computed.keys,
    );
    sa.ni = std::mem::take(&mut p.ni);
    sa.nr = computed.nr;
    sa.init_request = std::mem::take(&mut p.request);
    sa.init_response = response.clone();
    sa.peer_hashes = std::mem::take(&mut p.peer_hashes);
    sa.peer_fragmentation = p.peer_fragmentation;
    sa.second_auth = p.second_auth;
    sa.expected_id = 1;
    sa.cached = Some(CachedResponse {
        message_id: 0,
        requester: p.remote,
        datagrams: vec![response.clone()],
    });
    let mut charge = p.charge;
    r.half_open.resize(&mut charge, half_open::footprint(&sa));
    sa.half_open = Some(charge);
    r.sas.insert(spi_r, sa);
    r.schedule(spi_r);
    r.by_initiator.insert((p.remote, h.spi_i), spi_r);
    r.transmit(p.local, p.remote, response);
}
