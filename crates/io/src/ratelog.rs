//! Rate-limited log lines for events that one client (or a crowd of them) can repeat at will:
//! a connection going up or down, a handshake failing, a datagram refused. Each call site of
//! [`log_limited!`](crate::log_limited) owns a [`RateLimit`]: at most [`BURST`] lines per
//! [`WINDOW`]; the rest are counted, and the first line of the next window is preceded by one
//! saying how many were suppressed. Lock-free, so a worker can use it.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[doc(hidden)]
pub use tracing as __tracing;

/// Lines one call site may log per [`WINDOW`].
pub const BURST: u32 = 10;
/// The window [`BURST`] applies to.
pub const WINDOW: Duration = Duration::from_secs(10);

/// The budget of one call site.
#[derive(Debug)]
pub struct RateLimit {
    /// Start of the current window, milliseconds since [`epoch`].
    window_ms: AtomicU64,
    /// Lines logged in the current window.
    logged: AtomicU32,
    /// Lines suppressed since the last one logged.
    suppressed: AtomicU64,
}

impl Default for RateLimit {
    fn default() -> Self {
        Self::new()
    }
}

impl RateLimit {
    /// A full budget.
    pub const fn new() -> Self {
        RateLimit {
            window_ms: AtomicU64::new(0),
            logged: AtomicU32::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Whether a line may be logged now: `Some(n)` with the lines suppressed before it
    /// (report them first when `n > 0`), `None` when this one is suppressed.
    pub fn check(&self) -> Option<u64> {
        self.check_at(millis_since_epoch())
    }

    fn check_at(&self, now_ms: u64) -> Option<u64> {
        let window = self.window_ms.load(Ordering::Relaxed);
        let window_len = WINDOW.as_millis() as u64;
        if now_ms.saturating_sub(window) >= window_len
            && self
                .window_ms
                .compare_exchange(window, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            // This caller opened the new window; a racing caller just counts in it.
            self.logged.store(0, Ordering::Relaxed);
        }
        if self.logged.fetch_add(1, Ordering::Relaxed) < BURST {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

fn millis_since_epoch() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    // +WINDOW: the first window of a fresh RateLimit (at 0) is already over.
    (EPOCH.get_or_init(Instant::now).elapsed() + WINDOW).as_millis() as u64
}

/// `tracing`'s `$level!(...)`, at most [`BURST`] times per [`WINDOW`] from this call site;
/// the next line logged after a suppression is preceded by `suppressed = N, "similar
/// messages suppressed"` at the same level.
///
/// ```
/// gate64_io::log_limited!(info, peer = %"192.0.2.1:1", "link up");
/// ```
#[macro_export]
macro_rules! log_limited {
    ($level:ident, $($arg:tt)+) => {{
        static LIMIT: $crate::ratelog::RateLimit = $crate::ratelog::RateLimit::new();
        if let Some(suppressed) = LIMIT.check() {
            if suppressed > 0 {
                $crate::ratelog::__tracing::$level!(suppressed, "similar messages suppressed");
            }
            $crate::ratelog::__tracing::$level!($($arg)+);
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_per_window_then_the_suppressed_count() {
        let limit = RateLimit::new();
        let t0 = 1_000_000;
        for _ in 0..BURST {
            assert_eq!(limit.check_at(t0), Some(0));
        }
        for k in 1..=25u64 {
            assert_eq!(limit.check_at(t0 + k), None);
        }
        // Still the same window.
        assert_eq!(limit.check_at(t0 + WINDOW.as_millis() as u64 - 1), None);
        // The next window starts with the count of what was suppressed, then a fresh burst.
        let t1 = t0 + WINDOW.as_millis() as u64;
        assert_eq!(limit.check_at(t1), Some(26));
        for _ in 1..BURST {
            assert_eq!(limit.check_at(t1), Some(0));
        }
        assert_eq!(limit.check_at(t1), None);
    }

    /// What a test subscriber wrote.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_macro_logs_a_burst_then_suppresses() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            // One call site, three bursts' worth of calls within one window.
            for i in 0..(BURST * 3) {
                crate::log_limited!(debug, i, "repeated event");
            }
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines = text
            .lines()
            .filter(|l| l.contains("repeated event"))
            .count();
        assert_eq!(lines, BURST as usize, "{text}");
        // Nothing was logged after the suppression began, so no summary line yet.
        assert!(!text.contains("suppressed"), "{text}");
    }

    #[test]
    fn the_macro_is_silent_without_a_subscriber() {
        for i in 0..(BURST * 3) {
            crate::log_limited!(debug, i, "repeated event");
        }
    }
}
