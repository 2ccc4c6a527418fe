//! `gate64 status`: the running daemon's IPsec clients, printed the way `swanctl --list-sas`
//! does, or as the daemon's JSON.

use anyhow::Result;
use gate64_control::{Snapshot, client};
use std::fmt::Write as _;
use std::path::PathBuf;

/// Runs `gate64 status`: the snapshot from the daemon's control socket (`socket`, else
/// `control.socket` of `config`, else the default), as a table or as JSON.
pub fn run(json: bool, socket: Option<PathBuf>, config: Option<PathBuf>) -> Result<()> {
    let socket = crate::socket::control_socket(socket, config)?;
    print!("{}", text(&client::status(&socket)?, json)?);
    Ok(())
}

/// What `gate64 status` prints of `snapshot`: the table, or the JSON with `json`.
pub fn text(snapshot: &Snapshot, json: bool) -> Result<String> {
    Ok(if json {
        let mut s = serde_json::to_string_pretty(snapshot)?;
        s.push('\n');
        s
    } else {
        render(snapshot)
    })
}

/// The snapshot as text, one block per client, as `swanctl --list-sas` lays it out.
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
        let inner: Vec<String> = c.inner.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            out,
            "{}: {}, inner {}",
            c.outer,
            c.transport,
            inner.join(", ")
        );
        for sa in &c.sas {
            let encap = sa
                .udp_encap
                .map_or_else(|| "ESP".to_owned(), |p| format!("ESP in UDP 4500:{p}"));
            let who = sa
                .identity
                .as_ref()
                .map_or_else(String::new, |i| format!(", {i}"));
            let user = sa
                .user_identity
                .as_ref()
                .map_or_else(String::new, |u| format!(" + user {u}"));
            let cert = match (&sa.issuer, &sa.serial, &sa.not_after) {
                (Some(issuer), Some(serial), Some(not_after)) => format!(
                    "\n    certificate: issuer {issuer}, serial {serial}, valid until {not_after}"
                ),
                _ => String::new(),
            };
            let rekeys = sa
                .rekeys
                .map_or_else(String::new, |n| format!(", {n} rekeys"));
            let _ = writeln!(
                out,
                "  {}: IKE {:016x}{who}{user}, {encap}, installed {}s ago{rekeys}{cert}\n    in  {:08x}, {} bytes, {} packets\n    out {:08x}, {} bytes, {} packets\n    local  {}\n    remote {}",
                sa.tunnel,
                sa.ike_spi,
                sa.age_secs,
                sa.spi_in,
                sa.bytes_in,
                sa.packets_in,
                sa.spi_out,
                sa.bytes_out,
                sa.packets_out,
                sa.local_ts.join(" "),
                sa.remote_ts.join(" "),
            );
        }
    }
    out
}
