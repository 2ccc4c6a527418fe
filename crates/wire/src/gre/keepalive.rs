//! The Cisco-style GRE keepalive, the form deployed routers send and answer.
//!
//! Sources (checked for this module): Cisco's tech note "How GRE Keepalives Work"
//! (document 63760, `technologies_tech_note09186a008040a17c`), and its summaries at
//! yaredconsulting.com (2009, "Cisco – GRE Tunnel Keepalives") and easyccnp.blogspot.com
//! (2011, "GRE Tunnel Keepalives"). The sender A pre-builds the reply: an outer packet A→B
//! with GRE Protocol Type 0x0800 carrying an inner IPv4 packet B→A, protocol 47, whose payload
//! is a GRE header with Protocol Type 0. B only decapsulates and routes the inner packet, so
//! it comes back to A as GRE type 0, which A takes as the answer; B needs no keepalive
//! support. Cisco's default: every 10 s, down after 3 missed answers, point-to-point tunnels
//! only.
//!
//! Two choices the sources leave open: the inner GRE header carries the tunnel's key when the
//! tunnel has one (a receiver that checks keys, such as gate64, would otherwise drop the
//! answer as `bad key`); and over an IPv6 delivery network the same form is built with
//! IPv6 (Protocol Type 0x86dd, an inner IPv6 header B→A, Next Header 47).

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{IP_PROTOCOL, PROTO_IPV4, PROTO_IPV6, PROTO_KEEPALIVE, Repr};
use crate::{Result, ipv4, ipv6};

/// Hop limit of the pre-built reply: it crosses the peer's routing once.
pub const REPLY_TTL: u8 = 255;

/// The GRE header of the pre-built reply, as the peer will send it back.
fn reply_header(key: Option<u32>) -> Repr {
    Repr {
        protocol_type: PROTO_KEEPALIVE,
        checksum: false,
        key,
        sequence: None,
    }
}

/// Bytes [`emit_v4`] writes for `key`.
pub const fn len_v4(key: Option<u32>) -> usize {
    let outer = Repr {
        protocol_type: PROTO_IPV4,
        checksum: false,
        key,
        sequence: None,
    };
    outer.header_len() + ipv4::HEADER_LEN + outer.header_len()
}

/// Bytes [`emit_v6`] writes for `key`.
pub const fn len_v6(key: Option<u32>) -> usize {
    let outer = Repr {
        protocol_type: PROTO_IPV6,
        checksum: false,
        key,
        sequence: None,
    };
    outer.header_len() + ipv6::HEADER_LEN + outer.header_len()
}

/// Writes the GRE part (what a protocol-47 raw socket sends; the kernel adds the outer IPv4
/// header `local`→`remote`) of a keepalive from `local` to `remote` into `out`, and returns
/// its length.
pub fn emit_v4(
    local: Ipv4Addr,
    remote: Ipv4Addr,
    key: Option<u32>,
    out: &mut [u8],
) -> Result<usize> {
    let outer = Repr {
        protocol_type: PROTO_IPV4,
        checksum: false,
        key,
        sequence: None,
    };
    let reply = reply_header(key);
    let mut at = outer.emit(out)?;
    let inner_ip = ipv4::Repr {
        src: remote,
        dst: local,
        protocol: IP_PROTOCOL,
        payload_len: reply.header_len() as u16,
        ttl: REPLY_TTL,
        tos: 0,
        ident: 0,
        dont_frag: false,
        more_frags: false,
        frag_offset: 0,
    };
    inner_ip.emit(out.get_mut(at..).ok_or(crate::Error::Truncated)?)?;
    at += ipv4::HEADER_LEN;
    at += reply.emit(out.get_mut(at..).ok_or(crate::Error::Truncated)?)?;
    Ok(at)
}

/// The IPv6 form of [`emit_v4`] (RFC 7676 delivery): inner IPv6 `remote`→`local`, Next
/// Header 47, then a GRE header with Protocol Type 0.
pub fn emit_v6(
    local: Ipv6Addr,
    remote: Ipv6Addr,
    key: Option<u32>,
    out: &mut [u8],
) -> Result<usize> {
    let outer = Repr {
        protocol_type: PROTO_IPV6,
        checksum: false,
        key,
        sequence: None,
    };
    let reply = reply_header(key);
    let mut at = outer.emit(out)?;
    let inner_ip = ipv6::Repr {
        src: remote,
        dst: local,
        next_header: IP_PROTOCOL,
        payload_len: reply.header_len() as u16,
        hop_limit: REPLY_TTL,
        traffic_class: 0,
        flow_label: 0,
    };
    inner_ip.emit(out.get_mut(at..).ok_or(crate::Error::Truncated)?)?;
    at += ipv6::HEADER_LEN;
    at += reply.emit(out.get_mut(at..).ok_or(crate::Error::Truncated)?)?;
    Ok(at)
}
