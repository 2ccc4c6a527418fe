//! Quick Crash Detection (RFC 6290), gate64 as token maker.
//!
//! A client that wants to be told quickly when gate64 lost its IKE SA (a restart, a failover
//! to the standby node) sends a QCD_TOKEN notify in its first IKE_AUTH request; gate64, with
//! `[ipsec] qcd_secret_file` set, answers with QCD_TOKEN = HMAC-SHA256(secret, SPIi | SPIr)
//! in its last IKE_AUTH response (§4.2; the token is computed, never stored). When a
//! protected request (any exchange but IKE_SA_INIT) arrives later for an IKE SA gate64 does
//! not have, it answers with an unprotected INFORMATIONAL response of the request's SPIs and
//! message ID carrying INVALID_IKE_SPI and the token for those SPIs (§4.3): a node holding
//! the same secret (the other node of an HA pair, or this one after a restart) can prove the
//! loss of state without having kept any. The client checks the token against the one it
//! stored and drops its IKE SA at once instead of waiting for its liveness checks to fail.
//!
//! The answer is unauthenticated work on the internet-facing path, so it is bounded: one
//! HMAC over 16 bytes and one 76-byte datagram, no state kept; at most [`PER_SOURCE_PER_SEC`]
//! per source ([`SourceKey`], as many again at once, in a fixed table of [`SOURCE_SLOTS`]
//! buckets, `gate64_wire::ratelimit`'s: colliding sources share one, stricter, never looser)
//! and [`TOTAL_PER_SEC`] in all;
//! the IKE driver's per-source shedding (`ike_packets_per_source_per_sec`) comes first. An
//! answer longer than the request is not sent, so it never amplifies. Answers sent and not
//! sent are counted ([`super::Event::Qcd`]).

use std::hash::BuildHasher;
use std::net::{Ipv6Addr, SocketAddr};
use std::time::Instant;

use aws_lc_rs::hmac;
use gate64_wire::ratelimit::RateLimiter;

use super::{Responder, SourceKey};
use crate::message::{Header, Message, Notify, Payload, exchange, flags, notify};

/// The shortest secret `[ipsec] qcd_secret_file` may hold, in bytes.
pub const MIN_SECRET_LEN: usize = 32;
/// The length of gate64's tokens (HMAC-SHA256).
pub const TOKEN_LEN: usize = 32;
/// Unknown-SPI answers per second one source may get (as many again at once).
pub const PER_SOURCE_PER_SEC: u32 = 4;
/// Unknown-SPI answers per second in all (as many again at once).
pub const TOTAL_PER_SEC: u32 = 2000;
/// Buckets of the per-source table.
pub const SOURCE_SLOTS: usize = 4096;

/// The secret tokens are made with; shared by the nodes of an HA pair. Its `Debug` shows
/// nothing of it.
#[derive(Clone)]
pub struct QcdSecret(hmac::Key);

impl QcdSecret {
    /// The secret `bytes`, or `None` when shorter than [`MIN_SECRET_LEN`].
    pub fn new(bytes: &[u8]) -> Option<Self> {
        (bytes.len() >= MIN_SECRET_LEN).then(|| QcdSecret(hmac::Key::new(hmac::HMAC_SHA256, bytes)))
    }

    /// The token of the IKE SA `spi_i`, `spi_r`: HMAC-SHA256(secret, SPIi | SPIr).
    pub fn token(&self, spi_i: u64, spi_r: u64) -> [u8; TOKEN_LEN] {
        let mut ctx = hmac::Context::with_key(&self.0);
        ctx.update(&spi_i.to_be_bytes());
        ctx.update(&spi_r.to_be_bytes());
        let mut out = [0u8; TOKEN_LEN];
        out.copy_from_slice(ctx.sign().as_ref());
        out
    }
}

impl std::fmt::Debug for QcdSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QcdSecret(..)")
    }
}

/// The caps on unknown-SPI answers: a fixed table of per-source buckets and one in all (a
/// table of one bucket).
#[derive(Debug)]
pub(super) struct Limiter {
    sources: RateLimiter,
    total: RateLimiter,
}

impl Default for Limiter {
    fn default() -> Self {
        // The table's hash key, random per process so nobody can aim at another's bucket.
        Limiter::with_key(std::collections::hash_map::RandomState::new().hash_one(0u64))
    }
}

impl Limiter {
    /// The caps with hash key `key` (fixed in tests, so which sources share a slot is too).
    fn with_key(key: u64) -> Self {
        Limiter {
            sources: RateLimiter::new(
                PER_SOURCE_PER_SEC,
                PER_SOURCE_PER_SEC * 2,
                SOURCE_SLOTS,
                key,
            ),
            total: RateLimiter::new(TOTAL_PER_SEC, TOTAL_PER_SEC * 2, 1, key),
        }
    }

    /// Whether an answer to `source` fits both caps at `now`; takes a token from each.
    fn allow(&mut self, now: Instant, source: SourceKey) -> bool {
        self.sources.allow_v6(now, source.to_ipv6())
            && self.total.allow_v6(now, Ipv6Addr::UNSPECIFIED)
    }
}

/// Whether the IKE_AUTH request `inner` asks for a token (it carries QCD_TOKEN, §4.2).
pub(super) fn requested(inner: &[Payload]) -> bool {
    crate::message::find_notify(inner, notify::QCD_TOKEN).is_some()
}

/// The QCD_TOKEN notify of IKE SA `spi_i`, `spi_r` (Protocol ID 1, the IKE SA, §4.1).
pub(crate) fn token_notify(secret: &QcdSecret, spi_i: u64, spi_r: u64) -> Notify {
    let mut n = Notify::new(notify::QCD_TOKEN, secret.token(spi_i, spi_r).to_vec());
    n.protocol = 1;
    n
}

/// The unprotected answer to request `request` for an IKE SA we do not have (§4.3):
/// a response (flags: Response, not Initiator, as the original responder) with the request's
/// SPIs and message ID, INVALID_IKE_SPI and the token.
pub fn unknown_spi_answer(secret: &QcdSecret, request: Header) -> Vec<u8> {
    let header = Header {
        exchange: exchange::INFORMATIONAL,
        flags: flags::RESPONSE,
        ..request
    };
    Message {
        header,
        payloads: vec![
            Payload::Notify(Notify::new(notify::INVALID_IKE_SPI, Vec::new())),
            Payload::Notify(token_notify(secret, request.spi_i, request.spi_r)),
        ],
    }
    .emit()
}

/// A request `message` (`datagram`) from `remote` on `local` named an IKE SA we do not have:
/// answers it per §4.3 when QCD is on, the request is protected (its last payload SK or SKF)
/// and not an IKE_SA_INIT, and the caps and the request's length allow.
pub(super) fn on_unknown_spi(
    r: &mut Responder,
    now: Instant,
    (local, remote): (SocketAddr, SocketAddr),
    datagram: &[u8],
    message: &Message,
) {
    let Some(secret) = r.config.qcd_secret.as_ref() else {
        return;
    };
    let h = message.header;
    let protected = matches!(
        message.payloads.last(),
        Some(Payload::Sk { .. } | Payload::Skf { .. })
    );
    if h.is_response() || h.exchange == exchange::IKE_SA_INIT || !protected {
        return;
    }
    if r.awaits_takeover(h.spi_i, h.spi_r) {
        tracing::debug!(peer = %remote, "ike: IKE SA synced, not taken over yet: no QCD answer");
        return;
    }
    let answer = unknown_spi_answer(secret, h);
    let sent = answer.len() <= datagram.len() && r.qcd.allow(now, SourceKey::of(remote.ip()));
    if sent {
        r.transmit(local, remote, answer);
    }
    tracing::debug!(peer = %remote, sent, "ike: unknown IKE SA, QCD answer");
    r.event(super::Event::Qcd { peer: remote, sent });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_short_secret_is_refused() {
        assert!(QcdSecret::new(&[7; MIN_SECRET_LEN - 1]).is_none());
        assert!(QcdSecret::new(&[7; MIN_SECRET_LEN]).is_some());
    }

    #[test]
    fn the_token_is_the_hmac_of_both_spis_and_binds_them() {
        let s = QcdSecret::new(&[1; 32]).unwrap();
        let expected = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, &[1; 32]),
            &[1u64.to_be_bytes(), 2u64.to_be_bytes()].concat(),
        );
        assert_eq!(s.token(1, 2).as_slice(), expected.as_ref());
        assert_ne!(s.token(1, 2), s.token(2, 1));
        assert_ne!(s.token(1, 2), QcdSecret::new(&[2; 32]).unwrap().token(1, 2));
        assert_eq!(format!("{s:?}"), "QcdSecret(..)");
    }

    #[test]
    fn one_source_is_capped_and_refills_while_others_pass() {
        // A fixed key: with a random one, `b` would share `a`'s slot once in SOURCE_SLOTS runs.
        let mut l = Limiter::with_key(0x5eed);
        let now = Instant::now();
        let a = SourceKey::of("192.0.2.1".parse().unwrap());
        let b = SourceKey::of("198.51.100.1".parse().unwrap());
        let burst = (PER_SOURCE_PER_SEC * 2) as usize;
        let allowed = (0..burst + 5).filter(|_| l.allow(now, a)).count();
        assert_eq!(allowed, burst);
        assert!(l.allow(now, b));
        assert!(l.allow(now + Duration::from_secs(1), a));
    }

    #[test]
    fn the_total_cap_holds_across_sources() {
        let mut l = Limiter::with_key(0x5eed);
        let now = Instant::now();
        let allowed = (0u32..(TOTAL_PER_SEC * 3))
            .filter(|i| {
                let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
                l.allow(now, SourceKey::of(ip.into()))
            })
            .count();
        assert!(allowed <= (TOTAL_PER_SEC * 2) as usize, "{allowed}");
        assert!(allowed > TOTAL_PER_SEC as usize, "{allowed}");
    }
}
