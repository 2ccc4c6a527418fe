//! The session log's records: one JSON object per line, the same fields for every event so
//! that `jq` and `grep` read them without a schema.
//!
//! ```text
//! {"time":"…Z","event":"connect","session":"6753a1f000000001","identity":"CN=laptop-17",
//!  "transport":"teredo","outer":"2001:0:…","port":4500,"inner":["fd00:c1::5"],
//!  "tunnels":["infrastructure"]}
//! {"time":"…Z","event":"disconnect","session":"6753a1f000000001","identity":"CN=laptop-17",
//!  "transport":"teredo","outer":"2001:0:…","port":4500,"reason":"closed","duration_secs":62,
//!  "bytes_in":18200,"bytes_out":20412,"packets_in":130,"packets_out":131,
//!  "per_tunnel":{"infrastructure":{"bytes_in":…},"intranet":{…}}}
//! ```
//!
//! `in` is what the client sent (ESP opened by gate64), `out` what gate64 sent it, both as
//! inner bytes, as `gate64 status` counts them. A disconnect line carries the whole session
//! (identity, addresses, start by its duration), so a session whose connect line was rotated
//! away still reads back whole.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// What a line records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A client's first tunnel came up.
    Connect,
    /// Another tunnel of a connected client came up.
    TunnelUp,
    /// One of a client's tunnels went down (its last child SA is gone); the client stays.
    TunnelDown,
    /// The client is gone: its last IKE SA and child SA ended.
    Disconnect,
    /// An IKE_AUTH was refused: the certificate did not verify, was revoked, or the identity
    /// is over its cap.
    AuthRefused,
}

/// Which of a client's two tunnels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tunnel {
    /// The infrastructure tunnel (DNS64, domain controllers, management).
    Infrastructure,
    /// The intranet tunnel.
    Intranet,
}

impl Tunnel {
    /// Both tunnels, infrastructure first.
    pub const ALL: [Tunnel; 2] = [Tunnel::Infrastructure, Tunnel::Intranet];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The name the log and the CLI use.
    pub fn as_str(self) -> &'static str {
        match self {
            Tunnel::Infrastructure => "infrastructure",
            Tunnel::Intranet => "intranet",
        }
    }
}

/// How the client reaches gate64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// Teredo (IPv6 in UDP).
    Teredo,
    /// IP-HTTPS (IPv6 over TLS).
    Iphttps,
    /// Native IKEv2 and ESP, straight to an `[ipsec] listen` address.
    Native,
    /// An outer address of no transport above.
    Other,
}

impl Transport {
    /// The name the log and the CLI use.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Teredo => "teredo",
            Transport::Iphttps => "iphttps",
            Transport::Native => "native",
            Transport::Other => "other",
        }
    }
}

/// Inner bytes and packets each way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Inner bytes from the client.
    pub bytes_in: u64,
    /// Inner bytes to the client.
    pub bytes_out: u64,
    /// Packets from the client.
    pub packets_in: u64,
    /// Packets to the client.
    pub packets_out: u64,
}

impl Counts {
    /// Adds `other` (saturating: a counter never wraps into a small number).
    pub fn add(&mut self, other: &Counts) {
        self.bytes_in = self.bytes_in.saturating_add(other.bytes_in);
        self.bytes_out = self.bytes_out.saturating_add(other.bytes_out);
        self.packets_in = self.packets_in.saturating_add(other.packets_in);
        self.packets_out = self.packets_out.saturating_add(other.packets_out);
    }
}

/// One line of the session log. Fields an event does not have are left out of its line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// When, RFC 3339 UTC with milliseconds.
    pub time: String,
    /// What happened.
    pub event: EventKind,
    /// The session it belongs to: unique across restarts, the same on every line of one
    /// client's session (what RADIUS accounting calls Acct-Multi-Session-Id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The authenticated identity (the certificate subject); for a refusal, the identity
    /// the client claimed, when it got that far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// How the client reaches gate64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<Transport>,
    /// The client's outer IPv6 address (Teredo, or of its IP-HTTPS /64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outer: Option<Ipv6Addr>,
    /// The client's IKE port (4500 or its NAT's mapping).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The client's inner addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inner: Vec<IpAddr>,
    /// The tunnels up at a connect.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tunnels: Vec<Tunnel>,
    /// The tunnel of a tunnel_up or tunnel_down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<Tunnel>,
    /// Why a client went or a refusal happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Seconds from the connect to the disconnect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_secs: Option<u64>,
    /// Bytes and packets of a disconnect (the whole session) or a tunnel_down (that tunnel).
    #[serde(default, skip_serializing_if = "Option::is_none", flatten)]
    pub counts: Option<Counts>,
    /// A disconnect's counts per tunnel the session had.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub per_tunnel: BTreeMap<Tunnel, Counts>,
    /// Where a refused IKE_AUTH came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SocketAddr>,
    /// The RADIUS Class attributes the session's Access-Accept carried, for its
    /// Accounting-Requests to echo (RFC 2865 §5.25). Opaque octets: not in the log.
    #[serde(skip)]
    pub class: Vec<Vec<u8>>,
}

impl Line {
    /// A line of `event` at `time` with every other field empty.
    pub fn new(time: String, event: EventKind) -> Line {
        Line {
            time,
            event,
            session: None,
            identity: None,
            transport: None,
            outer: None,
            port: None,
            inner: Vec::new(),
            tunnels: Vec::new(),
            tunnel: None,
            reason: None,
            duration_secs: None,
            counts: None,
            per_tunnel: BTreeMap::new(),
            source: None,
            class: Vec::new(),
        }
    }

    /// Appends the line as JSON and a newline. Identities come from certificates and may
    /// hold anything: JSON escaping keeps each record on its one line.
    pub fn write_json(&self, out: &mut String) {
        match serde_json::to_string(self) {
            Ok(text) => out.push_str(&text),
            // Serializing plain fields and string-keyed maps cannot fail; keep the line
            // count right if it ever does.
            Err(_) => out.push_str(r#"{"event":"unrepresentable"}"#),
        }
        out.push('\n');
    }

    /// Reads one line; `None` for anything that is not a record (a torn last line, another
    /// file's text).
    pub fn parse(text: &str) -> Option<Line> {
        serde_json::from_str(text).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_one_line_of_json_and_reads_back() {
        let mut line = Line::new("2026-12-02T10:00:00.000Z".into(), EventKind::Disconnect);
        line.session = Some("0000000100000002".into());
        line.identity = Some("CN=a\nb\"<script>".into());
        line.counts = Some(Counts {
            bytes_in: 1,
            bytes_out: 2,
            packets_in: 3,
            packets_out: 4,
        });
        line.per_tunnel.insert(Tunnel::Intranet, Counts::default());
        let mut out = String::new();
        line.write_json(&mut out);
        assert_eq!(out.matches('\n').count(), 1, "{out}");
        assert!(out.contains(r#""bytes_in":1,"bytes_out":2"#), "{out}");
        assert!(out.contains(r#""per_tunnel":{"intranet":{"#), "{out}");
        assert_eq!(Line::parse(out.trim_end()), Some(line));
    }

    #[test]
    fn fields_an_event_does_not_have_are_left_out() {
        let mut out = String::new();
        Line::new("t".into(), EventKind::AuthRefused).write_json(&mut out);
        assert_eq!(out, "{\"time\":\"t\",\"event\":\"auth_refused\"}\n");
        let back = Line::parse(out.trim_end()).expect("parses");
        assert_eq!(back.counts, None);
    }

    #[test]
    fn what_is_not_a_record_is_not_read() {
        for bad in [
            "",
            "{",
            "[]",
            "{\"time\":\"t\"}",
            "{\"time\":\"t\",\"event\":\"reboot\"}",
            "{\"time\":1,\"event\":\"connect\"}",
            "{\"time\":\"t\",\"event\":\"connect\",\"outer\":\"not an address\"}",
        ] {
            assert_eq!(Line::parse(bad), None, "{bad:?}");
        }
    }
}
