//! The status snapshot the control socket serves ([`gate64_control::Snapshot`]): the SA
//! database's child SAs grouped by client, with what the IKE driver knows of their IKE SAs.
//! A client is what the session log calls one ([`client_key`]): its outer
//! address, and for a native client also its UDP port, so machines behind one NAT are
//! listed apart and one machine's two tunnels together.

use gate64_accounting::Transport;
use gate64_accounting::tracker::ClientKey;
use gate64_control::{ChildSa, Client, Snapshot};
use gate64_dataplane::Shared;
use gate64_esp::{Cipher, InboundEntry, Peer, Selector, TunnelKind};
use gate64_ike::responder::IkeSaInfo;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Instant;

/// The snapshot of `shared`'s SA database at `now`, with the IKE driver's SAs (`None`: no
/// IKE driver, or it did not answer). Linear in the SAs: it runs with 200,000 of them.
pub fn snapshot(shared: &Shared, ike: Option<&[IkeSaInfo]>, now: Instant) -> Snapshot {
    let ike = ike.unwrap_or_default();
    let ike_sas = ike.iter().filter(|sa| sa.established).count();
    let by_spi: HashMap<u64, &IkeSaInfo> = ike.iter().map(|i| (i.spi_i, i)).collect();
    let cfg = shared.config();
    let mut clients: Vec<Client> = Vec::new();
    let mut by_client: HashMap<ClientKey, usize> = HashMap::new();
    let mut child_sas = 0;
    if let Some(sadb) = shared.sadb() {
        sadb.for_each(|e| {
            child_sas += 1;
            let peer = e.peer();
            let mut sa = child_sa(e, now);
            if let Some(info) = by_spi.get(&e.ike_spi) {
                sa.identity.clone_from(&info.identity);
                sa.user_identity.clone_from(&info.user_identity);
                sa.auth_method = info.auth_method.map(str::to_owned);
                sa.radius_user.clone_from(&info.radius_user);
                sa.filter_id.clone_from(&info.filter_id);
                if let Some(cert) = &info.certificate {
                    sa.issuer = Some(cert.issuer.clone());
                    sa.serial = Some(cert.serial.clone());
                    sa.not_after = Some(not_after_text(cert.not_after));
                }
                sa.rekeys = Some(info.rekeys);
            }
            let address4 = by_spi
                .get(&e.ike_spi)
                .and_then(|info| info.inner4)
                .or_else(|| {
                    peer.inner.iter().find_map(|a| match a {
                        IpAddr::V4(v4) => Some(*v4),
                        IpAddr::V6(_) => None,
                    })
                });
            let key = client_key(peer);
            match by_client.get(&key) {
                Some(&i) => {
                    clients[i].sas.push(sa);
                    if clients[i].address4.is_none() {
                        clients[i].address4 = address4;
                    }
                }
                None => {
                    by_client.insert(key, clients.len());
                    clients.push(Client {
                        transport: transport_of(shared, &peer.outer, peer.native.is_some())
                            .as_str()
                            .to_owned(),
                        outer: peer.outer,
                        port: key.port,
                        inner: peer.inner.clone(),
                        address4,
                        sas: vec![sa],
                    });
                }
            }
        });
    }
    clients.sort_by_key(|c| (c.outer, c.port));
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

/// A policy's rate limit as `ChildSa::limit` spells it.
fn limit_text(mbps: u32) -> String {
    format!("{mbps} Mbit/s each way")
}

fn child_sa(e: &InboundEntry, now: Instant) -> ChildSa {
    let out = &e.outbound.sa;
    let policy = e.policy();
    ChildSa {
        tunnel: match e.tunnel {
            TunnelKind::Infrastructure => "infrastructure",
            TunnelKind::Intranet => "intranet",
        }
        .to_owned(),
        ike_spi: e.ike_spi,
        ike_spi_hex: gate64_control::spi_hex(e.ike_spi),
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
        auth_method: None,
        radius_user: None,
        filter_id: None,
        policy: policy.map(|p| p.name.clone()),
        limit: policy.and_then(|p| p.rate_mbps()).map(limit_text),
        bytes_in: e.sa.bytes(),
        packets_in: e.sa.packets(),
        bytes_out: out.bytes(),
        packets_out: out.packets(),
        esp: esp_suite(e.sa.cipher()).to_owned(),
    }
}

/// A child SA's ESP suite as `ipsec.esp_proposals` spells it; AES-GMAC (integrity only,
/// `ipsec.iphttps_integrity_only`) as strongSwan does.
fn esp_suite(c: Cipher) -> &'static str {
    match c {
        Cipher::AesGcm16_256 => "aes256gcm16",
        Cipher::AesGcm16_128 => "aes128gcm16",
        Cipher::AesCbc256HmacSha256 => "aes256-sha256",
        Cipher::AesCbc128HmacSha256 => "aes128-sha256",
        Cipher::NullAesGmac256 => "aes256gmac",
        Cipher::NullAesGmac192 => "aes192gmac",
        Cipher::NullAesGmac128 => "aes128gmac",
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

/// The session key of a child SA's client: its outer address, and for a native client the
/// UDP port its ESP comes from (native SAs are always UDP-encapsulated, on the port of the
/// IKE SA that built them), as [`ClientKey::of`] keys the IKE SA.
pub(crate) fn client_key(peer: &Peer) -> ClientKey {
    ClientKey {
        outer: peer.outer,
        port: peer.native.and(peer.udp_encap),
    }
}

/// The transport of a client at `outer`; `native` when its SAs run on an `[ipsec] listen`
/// socket ([`gate64_esp::Peer::native`]), which decides before the address does.
pub(crate) fn transport_of(shared: &Shared, outer: &Ipv6Addr, native: bool) -> Transport {
    if native {
        Transport::Native
    } else if gate64_teredo::Address::decode(outer).is_some() {
        Transport::Teredo
    } else if shared.config().is_iphttps(outer) {
        Transport::Iphttps
    } else {
        Transport::Other
    }
}

#[cfg(test)]
pub(crate) mod tests;
