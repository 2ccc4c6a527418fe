//! Bounded polling.

use std::thread::sleep;
use std::time::{Duration, Instant};

/// How often [`wait_until`] and [`wait_for`] re-check their condition.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Polls `cond` every 100 ms until it returns `true` or `timeout` has passed; returns whether
/// it became true. The condition is always evaluated at least once, and once more at the
/// deadline, so a zero timeout means "check once".
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    wait_for(timeout, || cond().then_some(())).is_some()
}

/// Like [`wait_until`], but the condition yields a value: polls until `probe` returns
/// `Some`, or returns `None` once `timeout` has passed.
pub fn wait_for<T>(timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe() {
            return Some(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        sleep(POLL_INTERVAL.min(deadline - now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn true_at_once() {
        let t = Instant::now();
        assert!(wait_until(Duration::from_secs(5), || true));
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn gives_up_at_deadline() {
        let t = Instant::now();
        let mut calls = 0;
        assert!(!wait_until(Duration::from_millis(250), || {
            calls += 1;
            false
        }));
        let e = t.elapsed();
        assert!(
            e >= Duration::from_millis(250) && e < Duration::from_secs(2),
            "{e:?}"
        );
        assert!(calls >= 2);
    }

    #[test]
    fn yields_the_value() {
        let mut n = 0;
        let v = wait_for(Duration::from_secs(5), || {
            n += 1;
            (n == 3).then_some(n * 10)
        });
        assert_eq!(v, Some(30));
    }
}
