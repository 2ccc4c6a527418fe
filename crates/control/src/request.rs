//! The request line: its text on the socket and how the daemon reads it back.

/// Longest request line the daemon reads.
pub const MAX_REQUEST: usize = 4096;

/// What a client asks the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The [`crate::Snapshot`] of the daemon's IPsec clients.
    Status,
    /// End the IKE SAs (and child SAs) the target names; the answer is a
    /// [`crate::Disconnected`].
    Disconnect(Target),
    /// Take over the SAs the HA peer synced (as SIGUSR1 does); the answer is a
    /// [`crate::Promoted`]. With a process id, only the daemon of that id does (another
    /// refuses): nodes that share a file system may reach each other's default socket.
    HaPromote(Option<u32>),
    /// The HA sync channel's state; the answer is a [`crate::HaState`].
    HaStatus,
}

/// Which IKE SAs a disconnect ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The client's identity: its subject DN as `gate64 status` shows it, a subjectAltName of
    /// its certificate, the user identity of a second round, or the IDi it sent.
    Identity(String),
    /// The IKE SA with this SPI (either side's).
    IkeSpi(u64),
    /// Every client.
    All,
}

impl Request {
    /// The request line (without its newline): `status`, `disconnect identity <TEXT>`,
    /// `disconnect spi <HEX>` or `disconnect all`.
    pub fn line(&self) -> String {
        match self {
            Request::Status => "status".to_owned(),
            Request::Disconnect(Target::Identity(id)) => format!("disconnect identity {id}"),
            Request::Disconnect(Target::IkeSpi(spi)) => format!("disconnect spi {spi:x}"),
            Request::Disconnect(Target::All) => "disconnect all".to_owned(),
            Request::HaPromote(None) => "ha promote".to_owned(),
            Request::HaPromote(Some(pid)) => format!("ha promote pid {pid}"),
            Request::HaStatus => "ha status".to_owned(),
        }
    }

    /// The request of a line as the daemon read it (trimmed): `disconnect ARGS` is a
    /// disconnect, refused when ARGS name no target; `ha promote` and `ha status` are the HA
    /// requests, and `ha` with anything else is refused; any other line, the empty one
    /// included, asks for the status.
    pub fn parse(line: &str) -> Result<Request, String> {
        match line.split_once(' ') {
            Some(("disconnect", args)) => parse_target(args.trim()).map(Request::Disconnect),
            Some(("ha", args)) => match args.trim() {
                "promote" => Ok(Request::HaPromote(None)),
                "status" => Ok(Request::HaStatus),
                other => match other.strip_prefix("promote pid ") {
                    Some(pid) => (pid.trim().parse())
                        .map(|pid| Request::HaPromote(Some(pid)))
                        .map_err(|e| format!("ha promote: not a process id: {e}")),
                    None => Err(format!("unknown ha request {other:?}")),
                },
            },
            _ => Ok(Request::Status),
        }
    }
}

/// The target of a disconnect line's arguments (after `disconnect`).
fn parse_target(args: &str) -> Result<Target, String> {
    let (kind, rest) = args.split_once(' ').unwrap_or((args, ""));
    let rest = rest.trim();
    match kind {
        "all" if rest.is_empty() => Ok(Target::All),
        "identity" if !rest.is_empty() => Ok(Target::Identity(rest.to_owned())),
        "spi" => parse_spi(rest).map(Target::IkeSpi),
        _ => Err(format!("unknown disconnect request {args:?}")),
    }
}

/// An IKE SPI as `gate64 status --json` writes it (`ike_spi_hex`): `0x` and 16 lower-case
/// hexadecimal digits, which [`parse_spi`] takes back.
pub fn spi_hex(spi: u64) -> String {
    format!("{spi:#018x}")
}

/// An IKE SPI in hexadecimal, with or without `0x`.
pub fn parse_spi(s: &str) -> Result<u64, String> {
    let hex = s.trim_start_matches("0x");
    u64::from_str_radix(hex, 16).map_err(|e| format!("not a hexadecimal SPI: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spi_hex_is_what_parse_spi_takes() {
        for spi in [0, 1, 0x1234_abcd_0000_0001, (1 << 53) + 1, u64::MAX] {
            let text = spi_hex(spi);
            assert_eq!(text.len(), 18, "{text}");
            assert!(text.starts_with("0x"), "{text}");
            assert_eq!(parse_spi(&text), Ok(spi), "{text}");
        }
        assert_eq!(spi_hex(0xab), "0x00000000000000ab");
    }

    #[test]
    fn request_lines_round_trip_and_bad_ones_are_refused() {
        for target in [
            Target::Identity("CN=client1.gate64.lab, O=lab".into()),
            Target::IkeSpi(0x1234_abcd_0000_0001),
            Target::All,
        ] {
            let request = Request::Disconnect(target);
            assert_eq!(Request::parse(&request.line()), Ok(request));
        }
        for bad in [
            "",
            "all now",
            "identity",
            "identity  ",
            "spi zz",
            "everyone",
        ] {
            assert!(parse_target(bad).is_err(), "{bad:?}");
            assert!(
                Request::parse(&format!("disconnect {bad}")).is_err(),
                "{bad:?}"
            );
        }
        assert_eq!(parse_spi("0xff"), Ok(255));
        for request in [
            Request::HaPromote(None),
            Request::HaPromote(Some(4242)),
            Request::HaStatus,
        ] {
            assert_eq!(Request::parse(&request.line()), Ok(request));
        }
        for bad in ["ha promote now", "ha  ", "ha demote", "ha promote pid x"] {
            assert!(Request::parse(bad).is_err(), "{bad:?}");
        }
        for status in ["status", "", "disconnect", "anything else"] {
            assert_eq!(Request::parse(status), Ok(Request::Status), "{status:?}");
        }
    }
}
