//! `gate64 status`: the running daemon's IPsec clients, printed the way `swanctl --list-sas`
//! does, or as the daemon's JSON.

use crate::terminal::printable;
use anyhow::Result;
use gate64_control::{Snapshot, client};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;

/// Runs `gate64 status`: the snapshot from the daemon's control socket (`socket`, else
/// `control.socket` of `config`, else the default), as a table or as JSON.
pub fn run(json: bool, socket: Option<PathBuf>, config: Option<PathBuf>) -> Result<()> {
    let socket = crate::socket::control_socket(socket, config)?;
    print!("{}", text(&client::status(&socket)?, json)?);
    Ok(())
}

/// What `gate64 status` prints of `snapshot`: the table, or the JSON with `json`.
/// A daemon of the previous release sends no `ike_spi_hex`: it is filled in from `ike_spi`,
/// so scripts can read it whichever daemon answered.
pub fn text(snapshot: &Snapshot, json: bool) -> Result<String> {
    Ok(if json {
        let mut snapshot = snapshot.clone();
        for sa in snapshot.clients.iter_mut().flat_map(|c| c.sas.iter_mut()) {
            if sa.ike_spi_hex.is_empty() {
                sa.ike_spi_hex = gate64_control::spi_hex(sa.ike_spi);
            }
        }
        let mut s = serde_json::to_string_pretty(&snapshot)?;
        s.push('\n');
        s
    } else {
        render(snapshot)
    })
}

/// The snapshot as text, one block per client, as `swanctl --list-sas` lays it out. The
/// daemon's strings (identities, certificate fields, names) are shown through
/// [`printable`]: a client chose its identity and certificate, so a control character in
/// them must not reach the terminal as one. The JSON form carries them as they are.
pub fn render(s: &Snapshot) -> String {
    let mut out = String::new();
    let endpoint = s
        .endpoint
        .map_or_else(|| "IPsec not configured".to_owned(), |e| e.to_string());
    let _ = writeln!(
        out,
        "gate64 {endpoint}: {} IKE SAs, {} child SAs, {} clients{}",
        s.ike_sas,
        s.child_sas,
        s.clients.len(),
        if s.require_ipsec {
            ""
        } else {
            " (ipsec.require = false: open without IPsec)"
        }
    );
    for c in &s.clients {
        let mut inner: Vec<String> = c.inner.iter().map(ToString::to_string).collect();
        if let Some(a) = c.address4.filter(|a| !c.inner.contains(&IpAddr::V4(*a))) {
            inner.push(a.to_string());
        }
        // A native client's port (machines behind one NAT share the address) comes last, so
        // the line starts as it does for every client.
        let port = c.port.map_or_else(String::new, |p| format!(", port {p}"));
        let _ = writeln!(
            out,
            "{}: {}, inner {}{port}",
            c.outer,
            printable(&c.transport),
            inner.join(", ")
        );
        for sa in &c.sas {
            let mut encap = sa
                .udp_encap
                .map_or_else(|| "ESP".to_owned(), |p| format!("ESP in UDP 4500:{p}"));
            if !sa.esp.is_empty() {
                encap = format!("{encap} {}", printable(&sa.esp));
            }
            let who = sa
                .identity
                .as_ref()
                .map_or_else(String::new, |i| format!(", {}", printable(i)));
            let user = sa
                .user_identity
                .as_ref()
                .map_or_else(String::new, |u| format!(" + user {}", printable(u)));
            let cert = match (&sa.issuer, &sa.serial, &sa.not_after) {
                (Some(issuer), Some(serial), Some(not_after)) => format!(
                    "\n    certificate: issuer {}, serial {}, valid until {}",
                    printable(issuer),
                    printable(serial),
                    printable(not_after)
                ),
                _ => String::new(),
            };
            let mut radius = Vec::new();
            if let Some(m) = &sa.auth_method {
                radius.push(format!("auth {}", printable(m)));
            }
            if let Some(u) = &sa.radius_user {
                radius.push(format!("RADIUS user {}", printable(u)));
            }
            // The policy applied now (a CoA may have replaced the Access-Accept's); from an
            // earlier daemon, which does not say, the Access-Accept's.
            if let Some(p) = sa.policy.as_ref().or(sa.filter_id.as_ref()) {
                radius.push(format!("policy {}", printable(p)));
            }
            if let Some(l) = &sa.limit {
                radius.push(format!("limit {}", printable(l)));
            }
            let cert = if radius.is_empty() {
                cert
            } else {
                format!(
                    "{cert}
    {}",
                    radius.join(", ")
                )
            };
            let rekeys = sa
                .rekeys
                .map_or_else(String::new, |n| format!(", {n} rekeys"));
            let _ = writeln!(
                out,
                "  {}: IKE {:016x}{who}{user}, {encap}, installed {}s ago{rekeys}{cert}\n    in  {:08x}, {} bytes, {} packets\n    out {:08x}, {} bytes, {} packets\n    local  {}\n    remote {}",
                printable(&sa.tunnel),
                sa.ike_spi,
                sa.age_secs,
                sa.spi_in,
                sa.bytes_in,
                sa.packets_in,
                sa.spi_out,
                sa.bytes_out,
                sa.packets_out,
                printable(&sa.local_ts.join(" ")),
                printable(&sa.remote_ts.join(" ")),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot as a daemon of the previous release sends it: no `ike_spi_hex`.
    const OLD_DAEMON: &str = r#"{"endpoint":"2001:db8::1","require_ipsec":true,"ike_sas":1,
        "child_sas":1,"clients":[{"transport":"teredo","outer":"2001:0:c000:201::1",
        "inner":["2001:db8:9::1"],"sas":[{"tunnel":"infrastructure",
        "ike_spi":18364758544493064720,"spi_in":1,"spi_out":2,"udp_encap":null,
        "local_ts":[],"remote_ts":[],"age_secs":3,"identity":null,"rekeys":null,
        "bytes_in":0,"packets_in":0,"bytes_out":0,"packets_out":0}]}]}"#;

    /// `ike_spi` is beyond 2^53 here: `ike_spi_hex` carries it exactly, in the spelling
    /// `gate64 disconnect --ike-spi` takes; `ike_spi` stays a number for older readers.
    #[test]
    fn json_carries_the_ike_spi_as_hex_beside_the_deprecated_number() {
        let snapshot: Snapshot =
            serde_json::from_str(OLD_DAEMON).expect("an older snapshot parses");
        let spi = 0xfedc_ba98_7654_3210_u64;
        assert!(spi > 1 << 53);
        let json: serde_json::Value =
            serde_json::from_str(&text(&snapshot, true).expect("JSON")).expect("valid JSON");
        let sa = &json["clients"][0]["sas"][0];
        assert_eq!(sa["ike_spi_hex"], "0xfedcba9876543210", "{sa}");
        assert_eq!(sa["ike_spi"].as_u64(), Some(spi), "{sa}");
        let hex = sa["ike_spi_hex"].as_str().expect("a string");
        assert_eq!(gate64_control::parse_spi(hex), Ok(spi));
        // The text output names the same SPI.
        assert!(render(&snapshot).contains("IKE fedcba9876543210"));
    }

    /// The authentication method, RADIUS user, Filter-Id and limit reach both outputs; a
    /// snapshot of an earlier daemon has none of them.
    #[test]
    fn radius_authorization_shows_in_json_and_text() {
        let mut snapshot: Snapshot = serde_json::from_str(OLD_DAEMON).expect("parses");
        assert_eq!(snapshot.clients[0].sas[0].auth_method, None);
        assert!(!render(&snapshot).contains("auth "));
        let sa = &mut snapshot.clients[0].sas[0];
        sa.auth_method = Some("eap".to_owned());
        sa.radius_user = Some("alice".to_owned());
        sa.filter_id = Some("contractors".to_owned());
        let json: serde_json::Value =
            serde_json::from_str(&text(&snapshot, true).expect("JSON")).expect("valid JSON");
        let sa = &json["clients"][0]["sas"][0];
        assert_eq!(sa["auth_method"], "eap", "{sa}");
        assert_eq!(sa["radius_user"], "alice", "{sa}");
        assert_eq!(sa["filter_id"], "contractors", "{sa}");
        assert!(sa["limit"].is_null(), "{sa}");
        let table = render(&snapshot);
        assert!(
            table.contains("auth eap, RADIUS user alice, policy contractors\n"),
            "{table}"
        );
        // A CoA put another policy, with a rate limit, on the session: the text names the
        // policy applied now and its limit; the JSON keeps the Access-Accept's Filter-Id too.
        let sa = &mut snapshot.clients[0].sas[0];
        sa.policy = Some("slow".to_owned());
        sa.limit = Some("2 Mbit/s each way".to_owned());
        let json: serde_json::Value =
            serde_json::from_str(&text(&snapshot, true).expect("JSON")).expect("valid JSON");
        let sa = &json["clients"][0]["sas"][0];
        assert_eq!(sa["filter_id"], "contractors", "{sa}");
        assert_eq!(sa["policy"], "slow", "{sa}");
        assert_eq!(sa["limit"], "2 Mbit/s each way", "{sa}");
        let table = render(&snapshot);
        assert!(
            table.contains("auth eap, RADIUS user alice, policy slow, limit 2 Mbit/s each way\n"),
            "{table}"
        );
    }

    /// A client's identity and certificate fields reach the table with their control
    /// characters escaped; the JSON carries them unchanged.
    #[test]
    fn client_strings_are_escaped_in_the_table_only() {
        let mut snapshot: Snapshot = serde_json::from_str(OLD_DAEMON).expect("parses");
        let sa = &mut snapshot.clients[0].sas[0];
        sa.ike_spi_hex = gate64_control::spi_hex(sa.ike_spi);
        sa.identity = Some("CN=evil\x1b[2J\nfake row".to_owned());
        sa.user_identity = Some("CN=u\u{202e}x".to_owned());
        sa.issuer = Some("CN=ca\x07".to_owned());
        sa.serial = Some("01\r".to_owned());
        sa.not_after = Some("2028-01-01T00:00:00.000Z".to_owned());
        let table = render(&snapshot);
        assert!(!table.contains('\x1b') && !table.contains('\x07') && !table.contains('\r'));
        assert!(!table.contains('\u{202e}'), "{table}");
        assert!(
            table.contains(", CN=evil\\1b[2J\\0afake row + user CN=u\\e2\\80\\aex,"),
            "{table}"
        );
        assert!(
            table.contains("certificate: issuer CN=ca\\07, serial 01\\0d, valid until"),
            "{table}"
        );
        assert_eq!(table.lines().filter(|l| l.contains("fake row")).count(), 1);
        let json: Snapshot =
            serde_json::from_str(&text(&snapshot, true).expect("JSON")).expect("parses");
        assert_eq!(json, snapshot, "the JSON keeps the strings as they are");
    }

    /// What the daemon wrote is kept as it is.
    #[test]
    fn json_keeps_the_daemons_ike_spi_hex() {
        let mut snapshot: Snapshot = serde_json::from_str(OLD_DAEMON).expect("parses");
        snapshot.clients[0].sas[0].ike_spi_hex = gate64_control::spi_hex(7);
        let out = text(&snapshot, true).expect("JSON");
        assert!(
            out.contains("\"ike_spi_hex\": \"0x0000000000000007\""),
            "{out}"
        );
    }
}
