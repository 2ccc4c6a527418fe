//! The RFC 2890 §2.2 receive rule for sequence numbers: a packet is accepted when its
//! sequence number is after the last one accepted (serial-number arithmetic, RFC 1982, so
//! the counter may wrap), whatever the gap; earlier and repeated numbers are dropped (the RFC
//! allows the receiver to discard out-of-sequence packets instead of buffering them).
//!
//! Gaps never stall the tunnel: lost packets are skipped at once. A peer that restarts its
//! counter would otherwise be refused for up to 2^31 packets, so after
//! [`RESYNC_AFTER`] consecutive refusals the next number is taken as the new start.

/// Consecutive out-of-sequence packets after which the receiver follows the peer's new
/// counter.
pub(crate) const RESYNC_AFTER: u32 = 32;

#[derive(Default)]
pub(crate) struct Window {
    last: Option<u32>,
    refused_in_a_row: u32,
}

impl Window {
    /// True when `seq` is accepted (and becomes the last one).
    pub(crate) fn accept(&mut self, seq: u32) -> bool {
        let after = match self.last {
            None => true,
            Some(last) => {
                let d = seq.wrapping_sub(last);
                d != 0 && d < 1 << 31
            }
        };
        if after || self.refused_in_a_row >= RESYNC_AFTER {
            self.last = Some(seq);
            self.refused_in_a_row = 0;
            true
        } else {
            self.refused_in_a_row += 1;
            false
        }
    }
}
