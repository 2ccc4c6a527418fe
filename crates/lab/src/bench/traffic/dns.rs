//! A minimal AAAA lookup (RFC 1035 §4.1) sent from a given source address: the flows resolve
//! the IPv4-only host's name through gate64's DNS64 from inside a client's tunnel, where the
//! system resolver would pick a source address no tunnel carries.

use anyhow::{Context, Result, bail, ensure};
use std::net::{Ipv6Addr, SocketAddr};
use std::time::Duration;

const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;

/// The query for `name`'s AAAA records with message id `id`, recursion desired.
fn query(id: u16, name: &str) -> Result<Vec<u8>> {
    let mut q = Vec::with_capacity(64);
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        ensure!(
            !label.is_empty() && label.len() < 64,
            "bad label in {name:?}"
        );
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&TYPE_AAAA.to_be_bytes());
    q.extend_from_slice(&CLASS_IN.to_be_bytes());
    Ok(q)
}

/// Skips a (possibly compressed) name at `at`; returns the offset after it.
fn skip_name(msg: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *msg.get(at)?;
        match len {
            0 => return Some(at + 1),
            l if l & 0xc0 == 0xc0 => return Some(at + 2),
            l => at += 1 + usize::from(l),
        }
    }
}

fn u16_at(msg: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*msg.get(at)?, *msg.get(at + 1)?]))
}

/// The first AAAA record of a response to query `id`.
fn first_aaaa(msg: &[u8], id: u16) -> Result<Ipv6Addr> {
    ensure!(u16_at(msg, 0) == Some(id), "answer to another query");
    let rcode = msg.get(3).map(|b| b & 0x0f).context("short answer")?;
    ensure!(rcode == 0, "DNS error, rcode {rcode}");
    let questions = u16_at(msg, 4).context("short answer")?;
    let answers = u16_at(msg, 6).context("short answer")?;
    let mut at = 12;
    for _ in 0..questions {
        at = skip_name(msg, at).context("truncated question")? + 4;
    }
    for _ in 0..answers {
        at = skip_name(msg, at).context("truncated answer")?;
        let rtype = u16_at(msg, at).context("truncated answer")?;
        let len = usize::from(u16_at(msg, at + 8).context("truncated answer")?);
        let data = msg.get(at + 10..at + 10 + len).context("truncated rdata")?;
        if rtype == TYPE_AAAA && len == 16 {
            let mut a = [0_u8; 16];
            a.copy_from_slice(data);
            return Ok(Ipv6Addr::from(a));
        }
        at += 10 + len;
    }
    bail!("no AAAA record in the answer")
}

/// Asks `server` for `name`'s AAAA from `source` (bound with `IPV6_FREEBIND`), three tries of
/// 2 s each.
pub async fn resolve_aaaa(source: Ipv6Addr, server: SocketAddr, name: &str) -> Result<Ipv6Addr> {
    let sock = super::udp::bind_udp(source)?;
    sock.connect(server).await?;
    let mut buf = [0_u8; 1500];
    let mut last = anyhow::anyhow!("no attempt");
    for attempt in 0..3_u16 {
        let id = 0x6400 + attempt;
        sock.send(&query(id, name)?).await?;
        match tokio::time::timeout(Duration::from_secs(2), sock.recv(&mut buf)).await {
            Ok(Ok(n)) => match first_aaaa(&buf[..n], id) {
                Ok(a) => return Ok(a),
                Err(e) => last = e,
            },
            Ok(Err(e)) => last = e.into(),
            Err(_) => last = anyhow::anyhow!("no answer within 2 s"),
        }
    }
    Err(last.context(format!("AAAA {name} at {server} from {source}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_with_compression_yields_the_address() {
        let mut msg = query(7, "v4only.corp.example").unwrap();
        msg[2] = 0x81;
        msg[3] = 0x80;
        msg[7] = 1;
        msg.extend_from_slice(&[0xc0, 12, 0, 28, 0, 1, 0, 0, 0, 60, 0, 16]);
        let addr: Ipv6Addr = "2001:db8:64::a14:2".parse().unwrap();
        msg.extend_from_slice(&addr.octets());
        assert_eq!(first_aaaa(&msg, 7).unwrap(), addr);
        assert!(first_aaaa(&msg, 8).is_err());
        msg[3] = 0x83;
        assert!(first_aaaa(&msg, 7).is_err());
        assert!(first_aaaa(&msg[..20], 7).is_err());
    }

    #[test]
    fn query_refuses_bad_names() {
        assert!(query(1, "a..b").is_err());
        assert_eq!(query(1, "a.b.").unwrap().len(), 12 + 5 + 4);
    }
}
