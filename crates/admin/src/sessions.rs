//! `gate64 sessions`: the session log (`[accounting] log`) read back as a table, one row per
//! client session, or as JSON for scripts.

use crate::terminal::printable;
use anyhow::{Context, Result, bail};
use gate64_accounting::sessions::{self, Filter, Report};
use gate64_accounting::time::parse_utc;
use gate64_config::Config;
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// `gate64 sessions`.
#[derive(clap::Args, Debug)]
pub struct SessionsArgs {
    /// Sessions still connected at or after TIME, and refusals from TIME on. TIME is a UTC
    /// date or time (`2026-12-01`, `2026-12-01T08:00`, `2026-12-01T08:00:00Z`) or a span
    /// back from now (`90m`, `12h`, `7d`).
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// Only the sessions (and refusals) whose identity contains ID, ASCII case ignored
    /// (`laptop-17` finds `CN=laptop-17,O=Example`).
    #[arg(long, value_name = "ID")]
    identity: Option<String>,
    /// Also list the refused authentications.
    #[arg(long)]
    refused: bool,
    /// Print JSON (`{"sessions": [...], "refused": [...]}`) instead of a table.
    #[arg(long)]
    json: bool,
    /// The session log to read; repeat for several, oldest first; `-` reads standard input
    /// (e.g. `zcat sessions.jsonl.2.gz | gate64 sessions --log -`). Default: `accounting.log`
    /// of `--config`, after its rotated `.1` file when there is one.
    #[arg(long, value_name = "PATH")]
    log: Vec<PathBuf>,
    /// The daemon's configuration file, to find its session log.
    #[arg(long, short, default_value = "/etc/gate64/gate64.toml")]
    config: PathBuf,
}

/// Runs `gate64 sessions`.
pub fn run(args: &SessionsArgs) -> Result<()> {
    let now = SystemTime::now();
    let filter = Filter {
        since: args
            .since
            .as_deref()
            .map(|t| parse_since(t, now))
            .transpose()?,
        identity: args.identity.clone(),
    };
    let files = match args.log.is_empty() {
        false => args.log.clone(),
        true => default_logs(&args.config)?,
    };
    let mut text = String::new();
    for file in &files {
        read_into(file, &mut text)?;
    }
    let report = sessions::read(text.lines(), &filter, now);
    if report.unreadable > 0 {
        eprintln!(
            "gate64: warning: {} lines of {} are not session records and were skipped",
            report.unreadable,
            shown(&files)
        );
    }
    if args.json {
        let mut report = report;
        if !args.refused {
            report.refused.clear();
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&report).context("writing JSON")?
        );
    } else {
        print!("{}", render(&report, args.refused));
    }
    Ok(())
}

/// `accounting.log` of `config`, after its rotated `.1` file when logrotate left one.
fn default_logs(config: &Path) -> Result<Vec<PathBuf>> {
    let cfg = Config::load(config)?;
    let Some(log) = cfg.accounting.log else {
        bail!(
            "{} sets no `accounting.log`: there is no session log to read (or name one with --log)",
            config.display()
        );
    };
    let mut rotated = log.clone().into_os_string();
    rotated.push(".1");
    let rotated = PathBuf::from(rotated);
    Ok(match rotated.exists() {
        true => vec![rotated, log],
        false => vec![log],
    })
}

fn read_into(file: &Path, text: &mut String) -> Result<()> {
    let start = text.len();
    if file == Path::new("-") {
        std::io::stdin()
            .read_to_string(text)
            .context("reading standard input")?;
    } else {
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        // A line torn by a crash or a concurrent write may split a UTF-8 sequence: keep
        // the rest of the file.
        text.push_str(&String::from_utf8_lossy(&bytes));
    }
    if text.len() > start && !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(())
}

fn shown(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `--since`: a UTC time, or a span back from `now` (`45s`, `90m`, `12h`, `7d`).
fn parse_since(text: &str, now: SystemTime) -> Result<SystemTime> {
    if let Some(at) = parse_utc(text) {
        return Ok(at);
    }
    let span = text.trim();
    let (digits, unit) = span.split_at(span.len().saturating_sub(1));
    let per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => 0,
    };
    match digits.parse::<u64>() {
        Ok(n) if per > 0 && !digits.starts_with('+') => n
            .checked_mul(per)
            .and_then(|secs| now.checked_sub(Duration::from_secs(secs)))
            .with_context(|| format!("--since {text}: too far back")),
        _ => bail!(
            "--since {text:?}: expected a UTC date or time (2026-12-01, 2026-12-01T08:00, \
             2026-12-01T08:00:00Z) or a span back from now (90m, 12h, 7d)"
        ),
    }
}

/// The report as a table: one row per session, oldest first, then the refusals if asked.
/// Text from the log goes through [`printable`]: a refused client's identity is what it claimed,
/// unverified, and the file may hold anything.
fn render(report: &Report, refused: bool) -> String {
    let mut out = String::new();
    let rows: Vec<[String; 8]> = report
        .sessions
        .iter()
        .map(|s| {
            let (bytes_in, bytes_out) = s.counts.map_or(("-".to_owned(), "-".to_owned()), |c| {
                (bytes(c.bytes_in), bytes(c.bytes_out))
            });
            [
                printable(s.since.get(..19).unwrap_or(&s.since)).replace('T', " "),
                duration(s.duration_secs),
                s.identity
                    .as_deref()
                    .map_or("-".into(), printable)
                    .into_owned(),
                s.transport.map_or("-", |t| t.as_str()).to_owned(),
                s.outer.map_or_else(|| "-".to_owned(), |a| a.to_string()),
                bytes_in,
                bytes_out,
                s.reason
                    .as_deref()
                    .map_or("connected".into(), printable)
                    .into_owned(),
            ]
        })
        .collect();
    let header = [
        "SINCE (UTC)",
        "DURATION",
        "IDENTITY",
        "TRANSPORT",
        "OUTER",
        "IN",
        "OUT",
        "ENDED",
    ];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |out: &mut String, cells: &[&str]| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            let pad = w.saturating_sub(cell.chars().count());
            // Byte counts right-aligned, the rest left.
            match i {
                5 | 6 => {
                    let _ = write!(text, "{}{cell}  ", " ".repeat(pad));
                }
                _ => {
                    let _ = write!(text, "{cell}{}  ", " ".repeat(pad));
                }
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    if rows.is_empty() {
        out.push_str("no sessions\n");
    } else {
        line(&mut out, &header);
        for row in &rows {
            let cells: Vec<&str> = row.iter().map(String::as_str).collect();
            line(&mut out, &cells);
        }
    }
    if refused {
        let _ = writeln!(out, "\n{} refused authentications", report.refused.len());
        for r in &report.refused {
            let _ = writeln!(
                out,
                "  {}  {}  {}  {}",
                printable(&r.time),
                r.source.map_or_else(|| "-".to_owned(), |s| s.to_string()),
                printable(r.reason.as_deref().unwrap_or("-")),
                printable(r.identity.as_deref().unwrap_or("-"))
            );
        }
    }
    out
}

/// `1d 02:03:04`, `02:03:04`.
fn duration(secs: u64) -> String {
    let (d, h, m, s) = (
        secs / 86_400,
        secs % 86_400 / 3600,
        secs % 3600 / 60,
        secs % 60,
    );
    match d {
        0 => format!("{h:02}:{m:02}:{s:02}"),
        _ => format!("{d}d {h:02}:{m:02}:{s:02}"),
    }
}

/// Bytes with a binary unit: `512 B`, `1.5 KiB`, `20.0 MiB`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn since_takes_times_and_spans() {
        let now = UNIX_EPOCH + Duration::from_secs(1_796_083_200);
        assert_eq!(
            parse_since("90m", now).unwrap(),
            now - Duration::from_secs(5400)
        );
        assert_eq!(
            parse_since("7d", now).unwrap(),
            now - Duration::from_secs(604_800)
        );
        assert_eq!(parse_since("2026-12-01", now).unwrap(), now);
        for bad in [
            "",
            "m",
            "5",
            "5w",
            "-5m",
            "+5m",
            "yesterday",
            "99999999999999999999d",
        ] {
            assert!(parse_since(bad, now).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_table_has_a_row_per_session_and_escapes_nothing_it_should_not() {
        let text = concat!(
            r#"{"time":"2026-12-02T10:00:00.000Z","event":"connect","session":"a","identity":"CN=alice","transport":"teredo","outer":"2001::1","port":4500,"tunnels":["infrastructure"]}"#,
            "\n",
            r#"{"time":"2026-12-02T11:01:01.000Z","event":"disconnect","session":"a","identity":"CN=alice","transport":"teredo","outer":"2001::1","reason":"closed","duration_secs":3661,"bytes_in":1536,"bytes_out":10,"packets_in":1,"packets_out":1}"#,
            "\n",
            r#"{"time":"2026-12-02T11:00:00.000Z","event":"auth_refused","source":"[2001::2]:4500","reason":"revoked","identity":"CN=bob"}"#,
            "\n",
        );
        let report = sessions::read(text.lines(), &Filter::default(), SystemTime::now());
        let table = render(&report, true);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("SINCE (UTC)"), "{table}");
        assert!(
            lines[1].starts_with("2026-12-02 10:00:00  01:01:01  CN=alice"),
            "{table}"
        );
        assert!(
            lines[1].contains("1.5 KiB") && lines[1].ends_with("closed"),
            "{table}"
        );
        assert!(table.contains("1 refused authentications"), "{table}");
        assert!(table.contains("revoked  CN=bob"), "{table}");
    }

    /// A refused client claims any identity: an escape sequence, a bell or a line break in
    /// it reaches the table as `\xx` text, so it can neither drive the terminal nor forge a
    /// row.
    #[test]
    fn a_claimed_identity_cannot_drive_the_terminal_or_forge_a_line() {
        let text = concat!(
            r#"{"time":"2026-12-02T11:00:00.000Z","event":"auth_refused","source":"[2001::2]:4500","reason":"auth_failed","#,
            r#""identity":"CN=x\u001b]0;owned\u0007\u001b[2J\u009b1m\n  2026-12-02T11:00:01.000Z  [2001::7]:4500  revoked  CN=alice\r\u202e"}"#,
            "\n",
        );
        let report = sessions::read(text.lines(), &Filter::default(), SystemTime::now());
        assert_eq!(report.refused.len(), 1);
        let table = render(&report, true);
        assert!(
            !table.chars().any(|c| c.is_control() && c != '\n'),
            "{table:?}"
        );
        assert!(!table.contains('\u{202e}'), "{table:?}");
        let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("  ")).collect();
        assert_eq!(rows.len(), 1, "one row per refusal: {table}");
        assert!(
            rows[0].ends_with(
                "auth_failed  CN=x\\1b]0;owned\\07\\1b[2J\\c2\\9b1m\\0a  \
                 2026-12-02T11:00:01.000Z  [2001::7]:4500  revoked  CN=alice\\0d\\e2\\80\\ae"
            ),
            "{table}"
        );
    }

    #[test]
    fn units_and_durations_read_as_people_write_them() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024 * 1024 * 20), "20.0 MiB");
        assert_eq!(bytes(u64::MAX), "16384.0 PiB");
        assert_eq!(duration(59), "00:00:59");
        assert_eq!(duration(90_061), "1d 01:01:01");
    }
}
