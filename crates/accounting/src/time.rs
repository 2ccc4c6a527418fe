//! UTC timestamps as the logs write them (RFC 3339 with milliseconds and `Z`), and the
//! times `gate64 sessions --since` reads.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// UTC time as RFC 3339 with milliseconds (`2026-11-30T05:01:02.345Z`).
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Reads a UTC time: `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS[.fff]]` with an optional `Z`, or a
/// space for the `T`. Local offsets other than `Z` are refused rather than guessed.
pub fn parse_utc(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let text = text.strip_suffix('Z').unwrap_or(text);
    let (date, clock) = match text.split_once(['T', ' ']) {
        Some((d, c)) => (d, Some(c)),
        None => (text, None),
    };
    let mut parts = date.split('-');
    let y: i64 = number(parts.next()?, 4)?;
    let m: u32 = number(parts.next()?, 2)?;
    let d: u32 = number(parts.next()?, 2)?;
    if parts.next().is_some() || !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return None;
    }
    let mut secs = days_from_civil(y, m, d).checked_mul(86_400)?;
    let mut millis = 0;
    if let Some(clock) = clock {
        let (hms, frac) = match clock.split_once('.') {
            Some((hms, frac)) => (hms, Some(frac)),
            None => (clock, None),
        };
        let mut fields = hms.split(':');
        let h: i64 = number(fields.next()?, 2)?;
        let min: i64 = number(fields.next()?, 2)?;
        let s: i64 = match fields.next() {
            Some(s) => number(s, 2)?,
            None => 0,
        };
        if fields.next().is_some() || h > 23 || min > 59 || s > 60 {
            return None;
        }
        secs += h * 3600 + min * 60 + s;
        if let Some(frac) = frac {
            if frac.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let three: String = frac.chars().chain("00".chars()).take(3).collect();
            millis = three.parse::<u64>().ok()?;
        }
    }
    let secs = u64::try_from(secs).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs) + Duration::from_millis(millis))
}

/// A decimal field of exactly `width` digits.
fn number<T: std::str::FromStr>(s: &str, width: usize) -> Option<T> {
    (s.len() == width && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // 2000-03-01 (after a leap day in a century leap year) and 2026-11-30 12:34:56.789.
        let t = UNIX_EPOCH + Duration::from_secs(951_868_800);
        assert_eq!(rfc3339(t), "2000-03-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_796_042_096_789);
        assert_eq!(rfc3339(t), "2026-11-30T12:34:56.789Z");
    }

    #[test]
    fn parse_reads_back_what_rfc3339_writes() {
        for ms in [0, 951_868_800_000, 1_796_042_096_789, 4_102_444_799_999] {
            let t = UNIX_EPOCH + Duration::from_millis(ms);
            assert_eq!(parse_utc(&rfc3339(t)), Some(t), "{ms}");
        }
    }

    #[test]
    fn parse_takes_dates_and_short_clocks() {
        let day = UNIX_EPOCH + Duration::from_secs(1_796_083_200);
        assert_eq!(parse_utc("2026-12-01"), Some(day));
        assert_eq!(
            parse_utc("2026-12-01 10:30"),
            Some(day + Duration::from_secs(37_800))
        );
        assert_eq!(
            parse_utc("2026-12-01T10:30:05Z"),
            Some(day + Duration::from_secs(37_805))
        );
        assert_eq!(
            parse_utc("2026-12-01T10:30:05.5"),
            Some(day + Duration::from_millis(37_805_500))
        );
    }

    #[test]
    fn parse_refuses_what_is_not_a_utc_time() {
        for bad in [
            "",
            "yesterday",
            "2026-13-01",
            "2026-02-30",
            "2026-1-01",
            "2026-12-01T25:00",
            "2026-12-01T10:30+01:00",
            "2026-12-01T10:30:05.",
            "2026-12-01T10:30:05.x",
            "+2026-12-01",
            "2026-12-01-02",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad:?}");
        }
        assert!(parse_utc("2024-02-29").is_some());
        assert!(parse_utc("2100-02-29").is_none());
    }
}
