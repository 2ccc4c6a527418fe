//! The counters-only message (`ChildCounters`): for each of a batch of child SAs, its
//! inbound SPI, the outbound sequence number and the inbound replay high-water mark, and
//! nothing else. The active node sends a child SA's whole record (`ChildSaRecord`) when
//! the SA is made or rekeyed; after that only these counters move, so it sends them alone
//! (20 bytes an SA instead of a whole record of about 200), many per message.
//!
//! ```text
//! version (1) | count (u8, 1..=MAX_COUNTERS_PER_MESSAGE) | count x entry
//! entry: inbound SPI (u32) | outbound next sequence number (u64)
//!        | inbound highest sequence number (u64)
//! ```
//!
//! The receiver applies an entry only to a record it holds, and only upwards
//! (`ChildSaRecord::apply_counters`): a counters message that arrives after a newer
//! record or newer counters (datagrams reorder) lowers nothing.

use crate::encoding::{DecodeError, Reader, Writer};

/// The version of the counters message this build writes and reads.
pub const COUNTERS_VERSION: u8 = 1;
/// Most entries in one counters message: 64 entries make a message of 1,319 bytes
/// (1,283 of plaintext, 36 of header and tag), which with its UDP and IPv6 headers stays
/// under a 1,500-byte MTU, so a lost fragment never takes a larger batch with it.
pub const MAX_COUNTERS_PER_MESSAGE: usize = 64;
/// Bytes of one entry.
pub const COUNTERS_ENTRY_LEN: usize = 4 + 8 + 8;

/// Where one child SA's counters stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChildCounters {
    /// The SA's inbound SPI (the key of its record).
    pub spi: u32,
    /// The sequence number the next outbound packet would get.
    pub outbound_next_seq: u64,
    /// The highest inbound sequence number received (0: none yet).
    pub inbound_highest_seq: u64,
}

impl ChildCounters {
    /// The bodies of the counters messages carrying `entries`, at most
    /// [`MAX_COUNTERS_PER_MESSAGE`] entries each, in order; none for no entries.
    pub fn encode_batches(entries: &[ChildCounters]) -> Vec<Vec<u8>> {
        entries
            .chunks(MAX_COUNTERS_PER_MESSAGE)
            .map(|chunk| {
                let mut buf = Vec::with_capacity(2 + chunk.len() * COUNTERS_ENTRY_LEN);
                let w = &mut Writer(&mut buf);
                w.u8(COUNTERS_VERSION);
                // A chunk holds at most MAX_COUNTERS_PER_MESSAGE (64) entries.
                w.u8(chunk.len() as u8);
                for e in chunk {
                    w.u32(e.spi);
                    w.u64(e.outbound_next_seq);
                    w.u64(e.inbound_highest_seq);
                }
                buf
            })
            .collect()
    }

    /// The entries of one counters message's body, which must hold exactly them.
    pub fn decode_batch(bytes: &[u8]) -> Result<Vec<ChildCounters>, DecodeError> {
        let mut r = Reader::new(bytes);
        r.version(COUNTERS_VERSION)?;
        let n = r.count(MAX_COUNTERS_PER_MESSAGE, COUNTERS_ENTRY_LEN, "count")?;
        if n == 0 {
            return Err(DecodeError::Invalid("count"));
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(ChildCounters {
                spi: r.u32()?,
                outbound_next_seq: r.u64()?,
                inbound_highest_seq: r.u64()?,
            });
        }
        r.finish()?;
        Ok(out)
    }
}
