//! `gate64 bench zone`: the corporate DNS server of `gate64 demo`'s lab, where a fresh machine
//! has no Unbound. It answers as Unbound's `local-zone: static` does in `gate64 bench capacity`:
//! the configured A records, no data for their other types (so DNS64 synthesizes from the A
//! record), NXDOMAIN for every other name. UDP only: its answers are small.
//!
//! Parsing and encoding are hickory-proto's (as in `gate64_dns64`); what is ours is the choice
//! of answer, unit-tested below with malformed requests.

use anyhow::{Context, Result, anyhow};
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

/// TTL of the answers, seconds (as the capacity lab's Unbound data).
const TTL: u32 = 300;

/// Options of `gate64 bench zone`.
#[derive(Debug, Clone, clap::Args)]
pub struct ZoneArgs {
    /// The address to answer on (UDP).
    #[arg(long)]
    pub listen: SocketAddr,
    /// An A record to serve, `NAME=IPV4` (repeatable).
    #[arg(long = "a", value_name = "NAME=IPV4", value_parser = parse_record, required = true)]
    pub records: Vec<(Name, Ipv4Addr)>,
}

fn parse_record(s: &str) -> Result<(Name, Ipv4Addr)> {
    let (name, addr) = s
        .split_once('=')
        .ok_or_else(|| anyhow!("{s:?}: expected NAME=IPV4"))?;
    let mut name = Name::from_ascii(name).with_context(|| format!("{s:?}: bad name"))?;
    name.set_fqdn(true);
    let addr = addr
        .parse()
        .with_context(|| format!("{s:?}: bad IPv4 address"))?;
    Ok((name, addr))
}

/// Runs `gate64 bench zone` until killed.
pub fn run(args: &ZoneArgs) -> Result<()> {
    let sock = UdpSocket::bind(args.listen).with_context(|| format!("binding {}", args.listen))?;
    eprintln!("gate64 bench zone: answering on {}", args.listen);
    let mut buf = [0u8; 4096];
    loop {
        let (len, from) = match sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("receiving a query"),
        };
        if let Some(reply) = answer(&args.records, &buf[..len]) {
            // A lost reply is the resolver's to retry.
            let _ = sock.send_to(&reply, from);
        }
    }
}

/// The reply to `request`, `None` when it is not a query at all (dropped, as servers do).
fn answer(records: &[(Name, Ipv4Addr)], request: &[u8]) -> Option<Vec<u8>> {
    let req = Message::from_vec(request).ok()?;
    if req.metadata.message_type != MessageType::Query {
        return None;
    }
    let mut reply = Message::response(req.metadata.id, req.metadata.op_code);
    reply.metadata.recursion_desired = req.metadata.recursion_desired;
    reply.queries.clone_from(&req.queries);
    let question = match req.queries.as_slice() {
        [q] if req.metadata.op_code == OpCode::Query => q,
        [_] => {
            reply.metadata.response_code = ResponseCode::NotImp;
            return reply.to_vec().ok();
        }
        _ => {
            reply.metadata.response_code = ResponseCode::FormErr;
            return reply.to_vec().ok();
        }
    };
    reply.metadata.authoritative = true;
    let mut known = false;
    for (name, addr) in records.iter().filter(|(n, _)| n == question.name()) {
        known = true;
        if question.query_type() == RecordType::A {
            reply.add_answer(Record::from_rdata(name.clone(), TTL, RData::A(A(*addr))));
        }
    }
    if !known {
        reply.metadata.response_code = ResponseCode::NXDomain;
    }
    reply.to_vec().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Query;

    fn zone() -> Vec<(Name, Ipv4Addr)> {
        vec![parse_record("v4only.corp.example=10.20.0.2").unwrap()]
    }

    fn ask(name: &str, kind: RecordType) -> Message {
        let mut m = Message::query();
        m.metadata.id = 0x1234;
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), kind));
        let reply = answer(&zone(), &m.to_vec().unwrap()).expect("a reply");
        Message::from_vec(&reply).unwrap()
    }

    #[test]
    fn a_record_answered_aaaa_has_no_data_others_do_not_exist() {
        let a = ask("V4ONLY.corp.example.", RecordType::A);
        assert_eq!(a.metadata.id, 0x1234);
        assert_eq!(a.metadata.response_code, ResponseCode::NoError);
        assert!(a.metadata.authoritative && a.metadata.recursion_desired);
        assert_eq!(a.answers.len(), 1);
        assert_eq!(a.answers[0].data, RData::A(A(Ipv4Addr::new(10, 20, 0, 2))));
        let aaaa = ask("v4only.corp.example.", RecordType::AAAA);
        assert_eq!(aaaa.metadata.response_code, ResponseCode::NoError);
        assert!(aaaa.answers.is_empty());
        let other = ask("other.corp.example.", RecordType::A);
        assert_eq!(other.metadata.response_code, ResponseCode::NXDomain);
        assert!(other.answers.is_empty());
    }

    #[test]
    fn malformed_requests_are_dropped_or_refused_never_panic() {
        let zone = zone();
        let mut q = Message::query();
        q.add_query(Query::query(
            Name::from_ascii("v4only.corp.example.").unwrap(),
            RecordType::A,
        ));
        let q = q.to_vec().unwrap();
        assert!(answer(&zone, &[]).is_none());
        assert!(answer(&zone, &q[..11]).is_none());
        // A response is never answered (no reflection loops between servers).
        let mut response = q.clone();
        response[2] |= 0x80;
        assert!(answer(&zone, &response).is_none());
        // No question: FORMERR.
        let empty = Message::query().to_vec().unwrap();
        let reply = Message::from_vec(&answer(&zone, &empty).unwrap()).unwrap();
        assert_eq!(reply.metadata.response_code, ResponseCode::FormErr);
        // Every truncation and single-byte change: no panic.
        for n in 0..q.len() {
            let _ = answer(&zone, &q[..n]);
            for b in [0x00, 0x3f, 0x40, 0xc0, 0xff] {
                let mut m = q.clone();
                m[n] = b;
                let _ = answer(&zone, &m);
            }
        }
    }

    #[test]
    fn records_are_parsed_or_refused_with_the_reason() {
        assert!(parse_record("v4only.corp.example").is_err());
        assert!(parse_record("v4only.corp.example=10.20.0").is_err());
        let (name, addr) = parse_record("a.example=192.0.2.1").unwrap();
        assert!(name.is_fqdn());
        assert_eq!(addr, Ipv4Addr::new(192, 0, 2, 1));
    }
}
