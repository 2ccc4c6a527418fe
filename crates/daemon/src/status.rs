//! `gate64 status`: the daemon serves a snapshot of its IPsec clients on a Unix control socket
//! (root only), and the CLI prints it the way `swanctl --list-sas` does, or as JSON.
//!
//! The protocol is one request and one JSON document per connection: the client writes its
//! request line (`status`, or `disconnect ...` for `gate64 disconnect`, see
//! [`crate::disconnect`]) and ends its side; the daemon answers (the [`Snapshot`], or what
//! was disconnected) and closes. A client that sends nothing gets the snapshot. The socket is
//! created before the privilege drop with mode 0600 in a 0700 directory, and a peer that is
//! neither root nor the daemon's own user is refused (`SO_PEERCRED`), whatever the file mode
//! says.

use anyhow::{Context, Result};
use gate64_accounting::Transport;
use gate64_dataplane::Shared;
use gate64_esp::{InboundEntry, Selector, TunnelKind};
use gate64_ike::responder::IkeSaInfo;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv6Addr};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Everything `gate64 status` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// gate64's IKE/ESP address; `None` while IPsec is not configured.
    pub endpoint: Option<Ipv6Addr>,
    /// `[ipsec] require`.
    pub require_ipsec: bool,
    /// IKE SAs established (the driver's count).
    pub ike_sas: u64,
    /// Child SAs installed.
    pub child_sas: u64,
    /// Clients with at least one child SA, by outer address.
    pub clients: Vec<Client>,
}

/// One client and its SAs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Client {
    /// `teredo`, `iphttps` or `other`: the transport its outer address belongs to.
    pub transport: String,
    /// Its outer IPv6 address (Teredo address or an address of its IP-HTTPS /64).
    pub outer: Ipv6Addr,
    /// Its inner addresses (from `ipsec.pool6`, or the outer one).
    pub inner: Vec<IpAddr>,
    /// Its child SAs, infrastructure first, oldest first.
    pub sas: Vec<ChildSa>,
}

/// One child SA, both directions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildSa {
    /// `infrastructure` or `intranet`.
    pub tunnel: String,
    /// The IKE SA that negotiated it (initiator's SPI).
    pub ike_spi: u64,
    /// The SPI gate64 receives on.
    pub spi_in: u32,
    /// The SPI gate64 sends with.
    pub spi_out: u32,
    /// The client's UDP port when ESP is UDP-encapsulated (RFC 3948), else next header 50.
    pub udp_encap: Option<u16>,
    /// gate64's traffic selectors.
    pub local_ts: Vec<String>,
    /// The client's traffic selectors.
    pub remote_ts: Vec<String>,
    /// Seconds since IKE installed it.
    pub age_secs: u64,
    /// The client's authenticated identity (its certificate subject), from the IKE SA: the
    /// machine certificate's when the client ran a second round.
    pub identity: Option<String>,
    /// The identity of the IKE SA's RFC 4739 second authentication round (the user
    /// certificate's subject), when the client ran one.
    #[serde(default)]
    pub user_identity: Option<String>,
    /// The issuer of the (machine) certificate the IKE SA was authenticated with.
    #[serde(default)]
    pub issuer: Option<String>,
    /// That certificate's serial number in hex, as `openssl x509 -serial` prints it: what a
    /// CRL names it by.
    #[serde(default)]
    pub serial: Option<String>,
    /// That certificate's notAfter, RFC 3339 in UTC.
    #[serde(default)]
    pub not_after: Option<String>,
    /// How often the IKE SA and its child SAs were rekeyed.
    pub rekeys: Option<u32>,
    /// Inner bytes opened.
    pub bytes_in: u64,
    /// Packets opened.
    pub packets_in: u64,
    /// Inner bytes sealed.
    pub bytes_out: u64,
    /// Packets sealed.
    pub packets_out: u64,
}

/// The snapshot of `shared`'s SA database at `now`, with the IKE driver's SAs (`None`: no
/// IKE driver, or it did not answer). Linear in the SAs: it runs with 200,000 of them.
pub fn snapshot(shared: &Shared, ike: Option<&[IkeSaInfo]>, now: Instant) -> Snapshot {
    let ike = ike.unwrap_or_default();
    let ike_sas = ike.iter().filter(|sa| sa.established).count();
    let by_spi: HashMap<u64, &IkeSaInfo> = ike.iter().map(|i| (i.spi_i, i)).collect();
    let cfg = shared.config();
    let mut clients: Vec<Client> = Vec::new();
    let mut by_outer: HashMap<Ipv6Addr, usize> = HashMap::new();
    let mut child_sas = 0;
    if let Some(sadb) = shared.sadb() {
        sadb.for_each(|e| {
            child_sas += 1;
            let peer = e.peer();
            let mut sa = child_sa(e, now);
            if let Some(info) = by_spi.get(&e.ike_spi) {
                sa.identity.clone_from(&info.identity);
                sa.user_identity.clone_from(&info.user_identity);
                if let Some(cert) = &info.certificate {
                    sa.issuer = Some(cert.issuer.clone());
                    sa.serial = Some(cert.serial.clone());
                    sa.not_after = Some(not_after_text(cert.not_after));
                }
                sa.rekeys = Some(info.rekeys);
            }
            match by_outer.get(&peer.outer) {
                Some(&i) => clients[i].sas.push(sa),
                None => {
                    by_outer.insert(peer.outer, clients.len());
                    clients.push(Client {
                        transport: transport_of(shared, &peer.outer).as_str().to_owned(),
                        outer: peer.outer,
                        inner: peer.inner.clone(),
                        sas: vec![sa],
                    });
                }
            }
        });
    }
    clients.sort_by_key(|c| c.outer);
    for c in &mut clients {
        c.sas
            .sort_by(|a, b| (&a.tunnel, b.age_secs).cmp(&(&b.tunnel, a.age_secs)));
    }
    Snapshot {
        endpoint: cfg.ipsec_endpoint,
        require_ipsec: shared.require_ipsec(),
        ike_sas: ike_sas as u64,
        child_sas,
        clients,
    }
}

/// A notAfter (seconds since the Unix epoch) as RFC 3339 UTC.
fn not_after_text(secs: i64) -> String {
    let at = match u64::try_from(secs) {
        Ok(s) => std::time::UNIX_EPOCH + std::time::Duration::from_secs(s),
        Err(_) => std::time::UNIX_EPOCH,
    };
    gate64_accounting::time::rfc3339(at)
}

fn child_sa(e: &InboundEntry, now: Instant) -> ChildSa {
    let out = &e.outbound.sa;
    ChildSa {
        tunnel: match e.tunnel {
            TunnelKind::Infrastructure => "infrastructure",
            TunnelKind::Intranet => "intranet",
        }
        .to_owned(),
        ike_spi: e.ike_spi,
        spi_in: e.sa.spi(),
        spi_out: out.spi(),
        udp_encap: e.peer().udp_encap,
        local_ts: e.sa.local_ts().iter().map(selector).collect(),
        remote_ts: e.sa.remote_ts().iter().map(selector).collect(),
        age_secs: now.saturating_duration_since(e.sa.created()).as_secs(),
        identity: None,
        user_identity: None,
        issuer: None,
        serial: None,
        not_after: None,
        rekeys: None,
        bytes_in: e.sa.bytes(),
        packets_in: e.sa.packets(),
        bytes_out: out.bytes(),
        packets_out: out.packets(),
    }
}

/// A selector as swanctl prints it: `prefix/len` when the range is one, else `start..end`.
fn selector(s: &Selector) -> String {
    let range = match (s.start, s.end) {
        (IpAddr::V6(a), IpAddr::V6(b)) => prefix_len(u128::from(a), u128::from(b), 128),
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            prefix_len(u128::from(u32::from(a)), u128::from(u32::from(b)), 32)
        }
        _ => None,
    };
    match range {
        Some(len) => format!("{}/{len}", s.start),
        None => format!("{}..{}", s.start, s.end),
    }
}

/// The prefix length of `start..=end` when it is exactly one prefix of an address `bits` wide.
fn prefix_len(start: u128, end: u128, bits: u32) -> Option<u32> {
    let host = start ^ end;
    let len = bits - (128 - host.leading_zeros());
    let aligned = host.count_ones() == 128 - host.leading_zeros() && start & host == 0;
    aligned.then_some(len)
}

pub(crate) fn transport_of(shared: &Shared, outer: &Ipv6Addr) -> Transport {
    if gate64_teredo::Address::decode(outer).is_some() {
        Transport::Teredo
    } else if shared
        .config()
        .iphttps_prefix
        .is_some_and(|p| p.contains(outer))
    {
        Transport::Iphttps
    } else {
        Transport::Other
    }
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

/// Binds the control socket at `path`: its directory created (0700) when missing, a stale
/// socket replaced, the socket itself 0600. Call before the privilege drop.
pub fn bind(path: &Path) -> Result<tokio::net::UnixListener> {
    if let Some(dir) = path.parent()
        && !dir.exists()
    {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("making {} private", dir.display()))?;
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        anyhow::bail!("{} is in use: is another gate64 running?", path.display());
    }
    let _ = std::fs::remove_file(path);
    let listener = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("binding the control socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("making {} private", path.display()))?;
    Ok(listener)
}

/// What the control socket answers: the status snapshot and, for `gate64 disconnect`, the
/// IKE SAs it ended. Both block (they ask the IKE driver and wait for it).
#[derive(Clone)]
pub struct ControlHandlers {
    /// The current snapshot.
    pub read: Arc<dyn Fn() -> Snapshot + Send + Sync>,
    /// Ends the IKE SAs a target names, and the IP-HTTPS links of their clients; `None` when
    /// IPsec does not run or the driver did not answer.
    pub disconnect: Arc<
        dyn Fn(gate64_ike::responder::DisconnectTarget) -> Option<crate::disconnect::Ended>
            + Send
            + Sync,
    >,
}

/// Longest request line the control socket reads.
const MAX_REQUEST: usize = 4096;
/// How long a peer has to send its request (a client that sends nothing gets the status).
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads one request line (up to [`MAX_REQUEST`] bytes, until a newline or the peer's end of
/// sending, within [`REQUEST_TIMEOUT`]).
async fn read_request(stream: &mut tokio::net::UnixStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    let deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
    while buf.len() < MAX_REQUEST && !buf.contains(&b'\n') {
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    let line = buf.split(|b| *b == b'\n').next().unwrap_or_default();
    String::from_utf8_lossy(line).trim().to_owned()
}

/// Answers every connection on `listener` until `stop` turns true. Peers other than root and
/// the daemon's own user are refused.
pub async fn serve(
    listener: tokio::net::UnixListener,
    handlers: ControlHandlers,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "control socket accept failed");
                    continue;
                }
            },
            _ = stop.wait_for(|stopped| *stopped) => return,
        };
        // Read at each connection: the privilege drop may change the daemon's user.
        let own = gate64_sys::process::geteuid();
        let allowed = stream
            .peer_cred()
            .is_ok_and(|c| c.uid() == 0 || c.uid() == own);
        if !allowed {
            tracing::warn!("control socket: refused a peer that is neither root nor gate64");
            continue;
        }
        let handlers = handlers.clone();
        tokio::spawn(async move {
            let mut stream = stream;
            let request = read_request(&mut stream).await;
            // Both ask the IKE driver and wait: off the runtime's threads.
            let answer =
                tokio::task::spawn_blocking(move || crate::disconnect::answer(&request, &handlers))
                    .await;
            let Ok(body) = answer else {
                return;
            };
            let _ = stream.write_all(&body).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// `gate64 status`: reads the snapshot from the daemon at `socket` and prints it (as the
/// daemon's JSON with `json`).
pub async fn query(socket: &Path, json: bool) -> Result<String> {
    let body = request(socket, "status").await?;
    let snapshot: Snapshot =
        serde_json::from_slice(&body).context("the daemon's answer is not a status snapshot")?;
    Ok(if json {
        let mut s = serde_json::to_string_pretty(&snapshot)?;
        s.push('\n');
        s
    } else {
        render(&snapshot)
    })
}

/// Sends `line` on the control socket at `socket` and returns the daemon's answer.
pub async fn request(socket: &Path, line: &str) -> Result<Vec<u8>> {
    let mut stream = tokio::net::UnixStream::connect(socket)
        .await
        .with_context(|| {
            format!(
                "connecting to {} (is gate64 serving? the control socket needs root; see \
             `control.socket`)",
                socket.display()
            )
        })?;
    stream
        .write_all(format!("{line}\n").as_bytes())
        .await
        .context("sending the request")?;
    stream.shutdown().await.context("sending the request")?;
    let mut body = Vec::new();
    stream
        .read_to_end(&mut body)
        .await
        .context("reading the answer")?;
    Ok(body)
}

#[cfg(test)]
mod tests;
