//! The receive window of the sync channel: which sequence numbers of the current epoch have
//! been accepted.

/// Sequence numbers below the highest accepted one that may still arrive (reordered) and be
/// accepted once.
pub const RECEIVE_WINDOW: u64 = 128;

/// A sliding bitmap: bit `i` stands for `top - i`.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReceiveWindow {
    /// The highest sequence number accepted; 0 before the first (numbers start at 1).
    top: u64,
    bits: u128,
}

impl ReceiveWindow {
    /// Whether `seq` may be accepted: not 0, not older than the window, not seen yet.
    pub(crate) fn check(&self, seq: u64) -> bool {
        if seq == 0 {
            return false;
        }
        if seq > self.top {
            return true;
        }
        let back = self.top - seq;
        back < RECEIVE_WINDOW && self.bits & (1 << back) == 0
    }

    /// Marks `seq` as accepted; false (and nothing changes) when [`ReceiveWindow::check`]
    /// refuses it.
    pub(crate) fn mark(&mut self, seq: u64) -> bool {
        if !self.check(seq) {
            return false;
        }
        if seq > self.top {
            let shift = seq - self.top;
            self.bits = if shift >= RECEIVE_WINDOW {
                0
            } else {
                self.bits << shift
            };
            self.top = seq;
        }
        self.bits |= 1 << (self.top - seq);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_each_number_once_inside_the_window() {
        let mut w = ReceiveWindow::default();
        assert!(!w.mark(0));
        assert!(w.mark(10));
        assert!(!w.mark(10));
        assert!(w.mark(3), "reordered, inside the window");
        assert!(!w.mark(3));
        assert!(w.mark(200));
        assert!(w.check(200 - (RECEIVE_WINDOW - 1)));
        assert!(!w.check(200 - RECEIVE_WINDOW), "too old");
        assert!(!w.check(10), "too old now");
        assert!(w.mark(201));
        assert!(!w.check(200));
        assert!(w.mark(199));
        assert!(w.mark(1000), "a jump past the whole window");
        assert!(w.check(999));
        assert!(!w.check(1000 - RECEIVE_WINDOW));
    }
}
