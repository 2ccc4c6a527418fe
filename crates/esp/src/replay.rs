//! The anti-replay window (RFC 4303 §3.4.3) and the reconstruction of the high half of an
//! extended sequence number (RFC 4303 Appendix A2).
//!
//! The bitmap is a ring of 64-bit words in the style of RFC 6479: moving the window forward
//! clears whole words instead of shifting the bitmap, so a jump costs at most one pass over
//! the ring. One word more than the window needs is kept, because the word holding the
//! highest sequence number is only partly inside the window.

/// Sequence numbers the window accepts below the highest one seen (RFC 4303 §3.4.3 asks
/// for at least 32; receivers on several cores reorder, so gate64 keeps 1,024, as
/// boringtun's `ReceivingKeyCounterValidator` does).
pub const REPLAY_WINDOW: u64 = 1024;

const WORD_BITS: u64 = 64;
const WORDS: usize = (REPLAY_WINDOW / WORD_BITS) as usize + 1;

/// Which sequence numbers have been received, relative to the highest one.
#[derive(Debug, Clone)]
pub(crate) struct ReplayWindow {
    /// The highest sequence number marked so far; 0 before the first packet (sequence
    /// numbers start at 1, RFC 4303 §3.3.3).
    top: u64,
    bits: [u64; WORDS],
}

impl Default for ReplayWindow {
    fn default() -> Self {
        ReplayWindow {
            top: 0,
            bits: [0; WORDS],
        }
    }
}

impl ReplayWindow {
    /// The highest sequence number marked so far.
    pub(crate) fn top(&self) -> u64 {
        self.top
    }

    /// A window that has seen every sequence number up to and including `top`: each of
    /// them is refused, the ones above are fresh.
    pub(crate) fn seen_up_to(top: u64) -> Self {
        let mut bits = [u64::MAX; WORDS];
        // In the word holding `top`, the numbers above it are still to come.
        let (word, bit) = position(top);
        bits[word] = bit | (bit - 1);
        ReplayWindow { top, bits }
    }

    /// Whether `seq` may be accepted: not zero, not older than the window, not seen yet.
    /// Called before the ICV is checked (RFC 4303 §3.4.3: "duplicates are rejected ...
    /// before integrity verification").
    pub(crate) fn check(&self, seq: u64) -> bool {
        if seq == 0 {
            return false;
        }
        if seq > self.top {
            return true;
        }
        if self.top - seq >= REPLAY_WINDOW {
            return false;
        }
        let (word, bit) = position(seq);
        self.bits[word] & bit == 0
    }

    /// Marks `seq` as received; false (and nothing changes) when [`ReplayWindow::check`]
    /// would have refused it, e.g. because another thread marked it first. Called only after
    /// the ICV verified (RFC 4303 §3.4.3: the window is updated only for authentic packets).
    pub(crate) fn mark(&mut self, seq: u64) -> bool {
        if !self.check(seq) {
            return false;
        }
        if seq > self.top {
            let old_word = self.top / WORD_BITS;
            let new_word = seq / WORD_BITS;
            // Words the window slides over hold stale bits from a lap ago; a jump of a
            // whole ring or more clears everything once.
            let cleared = (new_word - old_word).min(WORDS as u64);
            for step in 1..=cleared {
                self.bits[((old_word + step) % WORDS as u64) as usize] = 0;
            }
            self.top = seq;
        }
        let (word, bit) = position(seq);
        self.bits[word] |= bit;
        true
    }

    /// The full 64-bit sequence number for the 32 low-order bits a packet carries, when the
    /// SA uses extended sequence numbers (RFC 4303 Appendix A2.1). `None` when the packet
    /// would belong before sequence number 0 (older than any packet sent).
    pub(crate) fn reconstruct(&self, seq_lo: u32) -> Option<u64> {
        let top_lo = self.top as u32;
        let top_hi = (self.top >> 32) as u32;
        // The bottom of the window, in the 32-bit space of the low-order bits.
        let bottom_lo = top_lo.wrapping_sub(REPLAY_WINDOW as u32 - 1);
        let seq_hi = if u64::from(top_lo) >= REPLAY_WINDOW - 1 {
            // Case A: the window lies within one 2^32 subspace. Anything below its bottom
            // is ahead of us, in the next subspace.
            if seq_lo >= bottom_lo {
                Some(top_hi)
            } else {
                top_hi.checked_add(1)
            }
        } else {
            // Case B: the window spans two subspaces. Anything at or above its bottom (which
            // wrapped to the top of the 32-bit space) belongs to the previous subspace.
            if seq_lo >= bottom_lo {
                top_hi.checked_sub(1)
            } else {
                Some(top_hi)
            }
        };
        seq_hi.map(|hi| (u64::from(hi) << 32) | u64::from(seq_lo))
    }
}

fn position(seq: u64) -> (usize, u64) {
    (
        ((seq / WORD_BITS) % WORDS as u64) as usize,
        1 << (seq % WORD_BITS),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn marked(seqs: &[u64]) -> ReplayWindow {
        let mut w = ReplayWindow::default();
        for &s in seqs {
            assert!(w.mark(s), "first mark of {s}");
        }
        w
    }

    #[test]
    fn rfc4303_3_3_3_sequence_zero_is_never_accepted() {
        let mut w = ReplayWindow::default();
        assert!(!w.check(0));
        assert!(!w.mark(0));
        w.mark(5);
        assert!(!w.check(0));
    }

    #[test]
    fn seen_up_to_refuses_everything_at_or_below_and_slides_on() {
        let mut w = ReplayWindow::seen_up_to(5000);
        for s in [0, 1, 3976, 3977, 4999, 5000] {
            assert!(!w.check(s), "{s}");
        }
        assert!(w.mark(5001));
        assert!(w.mark(5003));
        assert!(w.check(5002), "a gap above the mark is fresh");
        // Words the window slides into start empty, as after any other jump.
        assert!(w.mark(5000 + 3 * REPLAY_WINDOW));
        assert!(w.check(5000 + 3 * REPLAY_WINDOW - 1));
        assert!(ReplayWindow::seen_up_to(0).check(1));
    }

    #[test]
    fn duplicate_is_refused() {
        let mut w = marked(&[1, 2, 3]);
        assert!(!w.check(2));
        assert!(!w.mark(2));
        assert!(!w.mark(3));
        assert!(w.mark(4));
    }

    #[test]
    fn out_of_order_inside_the_window_is_accepted_once() {
        let mut w = marked(&[100]);
        for s in (1..100).rev() {
            assert!(w.mark(s), "{s}");
            assert!(!w.mark(s), "{s} twice");
        }
    }

    #[test]
    fn edges_of_the_window() {
        let top = 5000;
        let mut w = marked(&[top]);
        // The window holds top and the REPLAY_WINDOW - 1 numbers below it.
        let oldest_inside = top - (REPLAY_WINDOW - 1);
        assert!(w.check(oldest_inside));
        assert!(!w.check(oldest_inside - 1), "just outside");
        assert!(!w.mark(oldest_inside - 1));
        assert!(w.mark(oldest_inside));
        assert!(!w.mark(oldest_inside), "marked at the very edge");
        assert_eq!(w.top(), top);
    }

    #[test]
    fn sliding_by_one_drops_the_oldest() {
        let top = 3000;
        let mut w = marked(&[top]);
        let oldest = top - (REPLAY_WINDOW - 1);
        assert!(w.check(oldest));
        assert!(w.mark(top + 1));
        assert!(!w.check(oldest), "slid out");
        assert!(w.check(oldest + 1));
    }

    #[test]
    fn jump_of_more_than_the_window_forgets_everything_old() {
        let mut w = marked(&[1, 2, 3, 64, 65, 1000]);
        let far = 1000 + 3 * REPLAY_WINDOW + 17;
        assert!(w.mark(far));
        for s in [1, 2, 3, 64, 65, 1000] {
            assert!(!w.check(s), "{s} is too old now");
        }
        // Every number inside the new window is fresh, including ones whose ring slots held
        // bits from the previous lap.
        for s in far - (REPLAY_WINDOW - 1)..far {
            assert!(w.check(s), "{s}");
        }
        assert!(!w.check(far));
    }

    #[test]
    fn ring_slot_reused_one_lap_later_starts_empty() {
        // 1098 = 10 + 17 * 64 shares the ring slot and bit of 10; both a jump over the whole
        // ring and a slide word by word must clear the slot before reusing it.
        let w = marked(&[10, 1100]);
        assert!(w.check(1098));
        let w = marked(&[10, 1000, 1100]);
        assert!(w.check(1098));
    }

    #[test]
    fn rfc4303_a2_reconstruction_within_one_subspace() {
        let w = marked(&[(7 << 32) | 5000]);
        assert_eq!(w.reconstruct(5000 - 100), Some((7 << 32) | 4900));
        assert_eq!(w.reconstruct(6000), Some((7 << 32) | 6000));
        // Below the window bottom: the sender has wrapped into subspace 8.
        assert_eq!(w.reconstruct(3), Some((8 << 32) | 3));
    }

    #[test]
    fn rfc4303_a2_reconstruction_across_the_2_pow_32_boundary() {
        let mut w = marked(&[u64::from(u32::MAX) - 10]);
        // A packet from just after the wrap carries a small low half.
        let after = w.reconstruct(5).expect("ahead of the window");
        assert_eq!(after, (1 << 32) | 5);
        assert!(w.mark(after));
        // Now the window spans both subspaces (case B): late packets from before the wrap
        // still map below 2^32 and are accepted once.
        let late = w.reconstruct(u32::MAX - 3).expect("inside the window");
        assert_eq!(late, u64::from(u32::MAX) - 3);
        assert!(w.mark(late));
        assert!(!w.mark(late));
        assert_eq!(w.reconstruct(u32::MAX - 10), Some(u64::from(u32::MAX) - 10));
        assert!(
            !w.check(u64::from(u32::MAX) - 10),
            "already marked before the wrap"
        );
        assert_eq!(w.reconstruct(6), Some((1 << 32) | 6));
    }

    #[test]
    fn reconstruction_before_sequence_zero_is_refused() {
        let w = ReplayWindow::default();
        assert_eq!(w.reconstruct(1), Some(1));
        // In the first window, a low half near 2^32 would be in subspace -1.
        assert_eq!(w.reconstruct(u32::MAX), None);
    }

    proptest! {
        /// Against a model that remembers every number: the window accepts a number iff it
        /// is fresh and inside the window.
        #[test]
        fn matches_a_set_model(seqs in proptest::collection::vec(1u64..5000, 1..400)) {
            let mut w = ReplayWindow::default();
            let mut seen = std::collections::BTreeSet::new();
            let mut top = 0u64;
            for s in seqs {
                let expect = !seen.contains(&s) && (s > top || top - s < REPLAY_WINDOW);
                prop_assert_eq!(w.check(s), expect, "seq {} top {}", s, top);
                prop_assert_eq!(w.mark(s), expect);
                if expect {
                    seen.insert(s);
                    top = top.max(s);
                }
            }
        }

        /// Reconstruction is the inverse of truncation for every number inside the window or
        /// ahead of it by less than 2^31.
        #[test]
        fn reconstruction_inverts_truncation(
            top in 1u64..(1 << 40),
            back in 0u64..REPLAY_WINDOW,
            ahead in 1u64..(1 << 31),
        ) {
            let w = marked(&[top]);
            if let Some(old) = top.checked_sub(back).filter(|s| *s > 0) {
                prop_assert_eq!(w.reconstruct(old as u32), Some(old));
            }
            let new = top + ahead;
            prop_assert_eq!(w.reconstruct(new as u32), Some(new));
        }
    }
}
