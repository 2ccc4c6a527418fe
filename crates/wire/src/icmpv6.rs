//! The ICMPv6 messages gate64 needs: the header view, echo and the errors (RFC 4443), and
//! Router Solicitation and Advertisement (RFC 4861 §4.1–4.2, §4.6).

use crate::{Error, Result, checksum, icmp, ipv6};
use std::net::Ipv6Addr;

pub use crate::icmp::{HEADER_LEN, Packet, field};

/// Destination Unreachable.
pub const TYPE_DEST_UNREACHABLE: u8 = 1;
/// Packet Too Big.
pub const TYPE_PACKET_TOO_BIG: u8 = 2;
/// Time Exceeded.
pub const TYPE_TIME_EXCEEDED: u8 = 3;
/// Parameter Problem.
pub const TYPE_PARAM_PROBLEM: u8 = 4;
/// Echo Request.
pub const TYPE_ECHO_REQUEST: u8 = 128;
/// Echo Reply.
pub const TYPE_ECHO_REPLY: u8 = 129;
/// Router Solicitation.
pub const TYPE_ROUTER_SOLICITATION: u8 = 133;
/// Router Advertisement.
pub const TYPE_ROUTER_ADVERTISEMENT: u8 = 134;
/// All-routers multicast address, the destination of Router Solicitations.
pub const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);

const OPT_PREFIX_INFO: u8 = 3;
const OPT_MTU: u8 = 5;
const RA_LEN: usize = 16;
const PIO_LEN: usize = 32;
const MTU_OPT_LEN: usize = 8;

/// ICMPv6 type and code of a packet whose next header is ICMPv6, or `None`.
#[inline]
pub fn type_code(p: &ipv6::Packet<'_>) -> Option<(u8, u8)> {
    let pl = p.payload();
    (p.next_header() == ipv6::NH_ICMPV6 && pl.len() >= 4).then(|| (pl[0], pl[1]))
}

/// Verifies the ICMPv6 checksum. Skipped under `cfg(fuzzing)` so fuzzers reach deeper code.
pub fn checksum_ok(p: &ipv6::Packet<'_>) -> bool {
    if cfg!(fuzzing) {
        return true;
    }
    checksum::upper_layer_v6(&p.src(), &p.dst(), ipv6::NH_ICMPV6, p.payload()) == 0
}

/// Fills in the ICMPv6 checksum of a complete IPv6 packet in `pkt`.
pub fn fill_checksum(pkt: &mut [u8]) -> Result<()> {
    let (src, dst) = {
        let p = ipv6::Packet::new_checked(pkt)?;
        (p.src(), p.dst())
    };
    let total = ipv6::HEADER_LEN + usize::from(u16::from_be_bytes([pkt[4], pkt[5]]));
    let body = pkt
        .get_mut(ipv6::HEADER_LEN..total)
        .ok_or(Error::Truncated)?;
    if body.len() < 4 {
        return Err(Error::Truncated);
    }
    body[2] = 0;
    body[3] = 0;
    let c = checksum::upper_layer_v6(&src, &dst, ipv6::NH_ICMPV6, body);
    body[2..4].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// What a Router Advertisement carries that Teredo and IP-HTTPS use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouterAdvert {
    /// Router lifetime in seconds (0: not a default router).
    pub router_lifetime: u16,
    /// The prefix of the single Prefix Information option.
    pub prefix: Ipv6Addr,
    /// Its length in bits.
    pub prefix_len: u8,
    /// The MTU option, when present.
    pub mtu: Option<u32>,
}

impl RouterAdvert {
    /// Bytes of the whole IPv6 packet this advertisement emits to.
    pub fn packet_len(&self) -> usize {
        ipv6::HEADER_LEN + RA_LEN + PIO_LEN + if self.mtu.is_some() { MTU_OPT_LEN } else { 0 }
    }

    /// Emits the RA as a complete IPv6 packet (hop limit 255, RFC 4861 §6.1.2) with one
    /// Prefix Information option (A flag, infinite lifetimes, as Miredo's server sends) and an
    /// optional MTU option. Returns the packet length.
    pub fn emit(&self, out: &mut [u8], src: &Ipv6Addr, dst: &Ipv6Addr) -> Result<usize> {
        let len = self.packet_len();
        let out = out.get_mut(..len).ok_or(Error::Truncated)?;
        let plen = u16::try_from(len - ipv6::HEADER_LEN).map_err(|_| Error::Malformed)?;
        ipv6::emit_header(out, plen, ipv6::NH_ICMPV6, 255, src, dst)?;
        let b = &mut out[ipv6::HEADER_LEN..];
        b.fill(0);
        b[0] = TYPE_ROUTER_ADVERTISEMENT;
        b[6..8].copy_from_slice(&self.router_lifetime.to_be_bytes());
        // Retrans timer 2000 ms, as Miredo's server sends; reachable time unspecified.
        b[12..16].copy_from_slice(&2000u32.to_be_bytes());
        let o = &mut b[RA_LEN..RA_LEN + PIO_LEN];
        o[0] = OPT_PREFIX_INFO;
        o[1] = 4;
        o[2] = self.prefix_len;
        o[3] = 0x40; // A: autonomous address configuration; L clear (RFC 4380 §5.3.2)
        o[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        o[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        o[16..32].copy_from_slice(&self.prefix.octets());
        if let Some(mtu) = self.mtu {
            let m = &mut b[RA_LEN + PIO_LEN..RA_LEN + PIO_LEN + MTU_OPT_LEN];
            m[0] = OPT_MTU;
            m[1] = 1;
            m[4..8].copy_from_slice(&mtu.to_be_bytes());
        }
        fill_checksum(out)?;
        Ok(len)
    }

    /// Parses an RA (client role). Requires exactly one Prefix Information option, as
    /// Miredo's client does; unknown options are skipped.
    pub fn parse(p: &ipv6::Packet<'_>) -> Result<Self> {
        match type_code(p) {
            Some((TYPE_ROUTER_ADVERTISEMENT, 0)) => {}
            _ => return Err(Error::Malformed),
        }
        let b = p.payload();
        if b.len() < RA_LEN {
            return Err(Error::Truncated);
        }
        let router_lifetime = u16::from_be_bytes([b[6], b[7]]);
        let mut opts = &b[RA_LEN..];
        let mut prefix = None;
        let mut mtu = None;
        while !opts.is_empty() {
            if opts.len() < 2 {
                return Err(Error::Truncated);
            }
            let len = usize::from(opts[1]) * 8;
            if len == 0 {
                return Err(Error::Malformed);
            }
            let o = opts.get(..len).ok_or(Error::Truncated)?;
            match o[0] {
                OPT_PREFIX_INFO if len == PIO_LEN => {
                    if prefix.is_some() {
                        return Err(Error::Malformed);
                    }
                    let mut a = [0u8; 16];
                    a.copy_from_slice(&o[16..32]);
                    prefix = Some((Ipv6Addr::from(a), o[2]));
                }
                OPT_MTU if len == MTU_OPT_LEN => {
                    mtu = Some(u32::from_be_bytes([o[4], o[5], o[6], o[7]]));
                }
                _ => {}
            }
            opts = &opts[len..];
        }
        let (prefix, prefix_len) = prefix.ok_or(Error::Malformed)?;
        Ok(RouterAdvert {
            router_lifetime,
            prefix,
            prefix_len,
            mtu,
        })
    }
}

/// Emits a Router Solicitation (no options) from `src` to `ff02::2`. Returns its length.
pub fn emit_router_solicitation(out: &mut [u8], src: &Ipv6Addr) -> Result<usize> {
    let len = ipv6::HEADER_LEN + 8;
    let out = out.get_mut(..len).ok_or(Error::Truncated)?;
    ipv6::emit_header(out, 8, ipv6::NH_ICMPV6, 255, src, &ALL_ROUTERS)?;
    out[ipv6::HEADER_LEN..].fill(0);
    out[ipv6::HEADER_LEN] = TYPE_ROUTER_SOLICITATION;
    fill_checksum(out)?;
    Ok(len)
}

/// Emits an Echo Request or Reply with `data` as payload. Returns the packet length.
pub fn emit_echo(
    out: &mut [u8],
    request: bool,
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
    ident: u16,
    seq: u16,
    data: &[u8],
) -> Result<usize> {
    let body = 8 + data.len();
    let len = ipv6::HEADER_LEN + body;
    let plen = u16::try_from(body).map_err(|_| Error::Malformed)?;
    let out = out.get_mut(..len).ok_or(Error::Truncated)?;
    ipv6::emit_header(out, plen, ipv6::NH_ICMPV6, 64, src, dst)?;
    let b = &mut out[ipv6::HEADER_LEN..];
    b[0] = if request {
        TYPE_ECHO_REQUEST
    } else {
        TYPE_ECHO_REPLY
    };
    b[1] = 0;
    b[4..6].copy_from_slice(&ident.to_be_bytes());
    b[6..8].copy_from_slice(&seq.to_be_bytes());
    b[8..].copy_from_slice(data);
    fill_checksum(out)?;
    Ok(len)
}

/// True for error messages (types 0–127, RFC 4443 §2.1), whose body quotes the packet that
/// caused them.
#[inline]
pub fn is_error(msg_type: u8) -> bool {
    msg_type < 128
}

/// An ICMPv6 error message's header, the quoted packet aside (RFC 4443 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorRepr {
    /// Destination Unreachable (type 1): 0 no route, 1 administratively prohibited, 2 beyond
    /// scope, 3 address unreachable, 4 port unreachable, 5 source policy, 6 reject route.
    DstUnreachable {
        /// Code.
        code: u8,
    },
    /// Packet Too Big (type 2, code 0) with the next-hop MTU.
    PacketTooBig {
        /// MTU.
        mtu: u32,
    },
    /// Time Exceeded (type 3): 0 hop limit exceeded in transit, 1 reassembly time exceeded.
    TimeExceeded {
        /// Code.
        code: u8,
    },
    /// Parameter Problem (type 4): 0 erroneous header field, 1 unrecognized Next Header,
    /// 2 unrecognized option; the pointer is the offending octet's offset.
    ParamProblem {
        /// Code.
        code: u8,
        /// Offset of the offending octet in the invoking packet.
        pointer: u32,
    },
}

impl ErrorRepr {
    /// Type, code and second header word.
    pub fn type_code_rest(&self) -> (u8, u8, [u8; 4]) {
        match *self {
            ErrorRepr::DstUnreachable { code } => (TYPE_DEST_UNREACHABLE, code, [0; 4]),
            ErrorRepr::PacketTooBig { mtu } => (TYPE_PACKET_TOO_BIG, 0, mtu.to_be_bytes()),
            ErrorRepr::TimeExceeded { code } => (TYPE_TIME_EXCEEDED, code, [0; 4]),
            ErrorRepr::ParamProblem { code, pointer } => {
                (TYPE_PARAM_PROBLEM, code, pointer.to_be_bytes())
            }
        }
    }

    /// The error of a checked message; [`Error::Unsupported`] for other types. The code of
    /// Packet Too Big is ignored, as RFC 4443 §3.2 tells receivers.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<ErrorRepr> {
        let (code, rest) = (p.msg_code(), u32::from_be_bytes(p.rest()));
        Ok(match p.msg_type() {
            TYPE_DEST_UNREACHABLE => ErrorRepr::DstUnreachable { code },
            TYPE_PACKET_TOO_BIG => ErrorRepr::PacketTooBig { mtu: rest },
            TYPE_TIME_EXCEEDED => ErrorRepr::TimeExceeded { code },
            TYPE_PARAM_PROBLEM => ErrorRepr::ParamProblem {
                code,
                pointer: rest,
            },
            _ => return Err(Error::Unsupported),
        })
    }

    /// Writes the 8-byte header (checksum zero) into `out[..8]`.
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        let (t, c, rest) = self.type_code_rest();
        icmp::emit_header(out, t, c, rest)
    }
}

/// An ICMPv6 message header gate64 translates: echo or an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr {
    /// Echo Request (type 128).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
    },
    /// Echo Reply (type 129).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
    },
    /// One of the errors of [`ErrorRepr`].
    Error(ErrorRepr),
}

impl Repr {
    /// The header of a checked message (echo code must be 0); [`Error::Unsupported`] for
    /// other types.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        let (ident, seq_no) = (p.echo_ident(), p.echo_seq_no());
        match (p.msg_type(), p.msg_code()) {
            (TYPE_ECHO_REQUEST, 0) => Ok(Repr::EchoRequest { ident, seq_no }),
            (TYPE_ECHO_REPLY, 0) => Ok(Repr::EchoReply { ident, seq_no }),
            (TYPE_ECHO_REQUEST | TYPE_ECHO_REPLY, _) => Err(Error::Malformed),
            _ => ErrorRepr::parse(p).map(Repr::Error),
        }
    }

    /// Writes the 8-byte header (checksum zero) into `out[..8]`.
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        match *self {
            Repr::EchoRequest { ident, seq_no } => emit_echo_header(out, true, ident, seq_no),
            Repr::EchoReply { ident, seq_no } => emit_echo_header(out, false, ident, seq_no),
            Repr::Error(e) => e.emit(out),
        }
    }
}

fn emit_echo_header(out: &mut [u8], request: bool, ident: u16, seq: u16) -> Result<()> {
    let t = if request {
        TYPE_ECHO_REQUEST
    } else {
        TYPE_ECHO_REPLY
    };
    let [a, b] = ident.to_be_bytes();
    let [c, d] = seq.to_be_bytes();
    icmp::emit_header(out, t, 0, [a, b, c, d])
}

#[cfg(test)]
mod tests {
    use super::*;

    // Brief §1.4: Miredo's RS from fe80::ffff:ffff:ffff has ICMPv6 checksum 0x7d37, Windows'
    // from fe80::ffff:ffff:fffe 0x7d38 and its cone probe from fe80::8000:ffff:ffff:fffe 0xfd37.
    #[test]
    fn router_solicitation_checksums_match_real_clients() {
        for (src, sum) in [
            ("fe80::ffff:ffff:ffff", 0x7d37u16),
            ("fe80::ffff:ffff:fffe", 0x7d38),
            ("fe80::8000:ffff:ffff:fffe", 0xfd37),
        ] {
            let mut b = [0u8; 48];
            assert_eq!(
                emit_router_solicitation(&mut b, &src.parse().unwrap()).unwrap(),
                48
            );
            assert_eq!(u16::from_be_bytes([b[42], b[43]]), sum, "{src}");
            let p = ipv6::Packet::new_checked(&b).unwrap();
            assert!(checksum_ok(&p));
            assert_eq!(type_code(&p), Some((TYPE_ROUTER_SOLICITATION, 0)));
        }
    }

    #[test]
    fn router_advert_roundtrip_and_layout() {
        let ra = RouterAdvert {
            router_lifetime: 0,
            prefix: "2001:0:c000:201::".parse().unwrap(),
            prefix_len: 64,
            mtu: Some(1280),
        };
        let mut b = [0u8; 128];
        let n = ra
            .emit(
                &mut b,
                &"fe80::8000:f227:3fff:fdfe".parse().unwrap(),
                &"fe80::ffff:ffff:ffff".parse().unwrap(),
            )
            .unwrap();
        // 40 IPv6 + 16 RA + 32 PIO + 8 MTU = 96; with 13 auth + 8 origin the UDP payload is 117
        // bytes, the size Miredo's server sends (brief §1.4).
        assert_eq!(n, 96);
        assert_eq!(b[7], 255);
        let p = ipv6::Packet::new_checked(&b[..n]).unwrap();
        assert!(checksum_ok(&p));
        assert_eq!(RouterAdvert::parse(&p).unwrap(), ra);
        let no_mtu = RouterAdvert { mtu: None, ..ra };
        assert_eq!(no_mtu.packet_len() + 13, 101); // + 8 origin = the 109-byte Windows RA
    }

    #[test]
    fn router_advert_parse_rejects_bad_options() {
        let ra = RouterAdvert {
            router_lifetime: 0,
            prefix: "2001::".parse().unwrap(),
            prefix_len: 64,
            mtu: None,
        };
        let mut b = [0u8; 96];
        let n = ra
            .emit(
                &mut b,
                &"fe80::1".parse().unwrap(),
                &"fe80::2".parse().unwrap(),
            )
            .unwrap();
        let mut zero_len = b;
        zero_len[40 + 16 + 1] = 0;
        let p = ipv6::Packet::new_checked(&zero_len[..n]).unwrap();
        assert_eq!(RouterAdvert::parse(&p).unwrap_err(), Error::Malformed);
        let mut overlong = b;
        overlong[40 + 16 + 1] = 9;
        let p = ipv6::Packet::new_checked(&overlong[..n]).unwrap();
        assert_eq!(RouterAdvert::parse(&p).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn echo_checksum_verifies() {
        let mut b = [0u8; 64];
        let n = emit_echo(
            &mut b,
            true,
            &"2001::1".parse().unwrap(),
            &"2001:db8::1".parse().unwrap(),
            7,
            1,
            b"nonce123",
        )
        .unwrap();
        let p = ipv6::Packet::new_checked(&b[..n]).unwrap();
        assert!(checksum_ok(&p));
        assert_eq!(type_code(&p), Some((TYPE_ECHO_REQUEST, 0)));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn router_advert_emit_parse_roundtrip(
                router_lifetime in any::<u16>(),
                prefix in any::<u128>(),
                prefix_len in any::<u8>(),
                mtu in proptest::option::of(any::<u32>()),
                src in any::<u128>(),
                dst in any::<u128>(),
            ) {
                let ra = RouterAdvert {
                    router_lifetime,
                    prefix: Ipv6Addr::from(prefix),
                    prefix_len,
                    mtu,
                };
                let mut b = [0u8; 128];
                let n = ra.emit(&mut b, &Ipv6Addr::from(src), &Ipv6Addr::from(dst)).unwrap();
                prop_assert_eq!(n, ra.packet_len());
                let p = ipv6::Packet::new_checked(&b[..n]).unwrap();
                prop_assert!(checksum_ok(&p));
                prop_assert_eq!(RouterAdvert::parse(&p), Ok(ra));
                // Too small a buffer is an error, never a panic.
                prop_assert_eq!(
                    ra.emit(&mut b[..n - 1], &Ipv6Addr::from(src), &Ipv6Addr::from(dst)),
                    Err(Error::Truncated)
                );
            }

            #[test]
            fn router_advert_parse_never_panics(
                body in proptest::collection::vec(any::<u8>(), 0..300),
                ra_type in any::<bool>(),
            ) {
                let mut b = vec![0u8; ipv6::HEADER_LEN + body.len()];
                let plen = u16::try_from(body.len()).unwrap();
                let a = Ipv6Addr::LOCALHOST;
                ipv6::emit_header(&mut b, plen, ipv6::NH_ICMPV6, 255, &a, &a).unwrap();
                b[ipv6::HEADER_LEN..].copy_from_slice(&body);
                if ra_type && body.len() >= 2 {
                    b[ipv6::HEADER_LEN] = TYPE_ROUTER_ADVERTISEMENT;
                    b[ipv6::HEADER_LEN + 1] = 0;
                }
                if let Ok(p) = ipv6::Packet::new_checked(&b) {
                    let _ = RouterAdvert::parse(&p);
                    let _ = type_code(&p);
                    let _ = checksum_ok(&p);
                }
            }
        }
    }
}

#[cfg(test)]
mod repr_tests;
