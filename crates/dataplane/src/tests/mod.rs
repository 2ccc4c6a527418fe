//! The pipeline's unit tests, one file per stage, on shared fixtures.

use crate::stats::Nat64Direction;
use crate::*;
use gate64_nat64::Nat64;
use gate64_teredo::{Address, RelayConfig, ServerConfig};
use gate64_wire::{checksum, icmpv6, ipv6, teredo as tw};
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod egress;
mod ingress;
mod iphttps;
mod ipsec;
mod nat64;
mod props;
mod reassembly;
mod teredo;

const PRIMARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const SECONDARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const CLIENT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 10), 3546);
const OTHER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 20), 40000);
const CORP_HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 5);
const CORP_ADDRESS: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
/// Slack after the packet, for the RA written over a 61-byte RS.
const TAILROOM: usize = 256;

/// `open`: `[ipsec] require = false`, the lab switch; else IPsec is required.
fn config(open: bool) -> DataplaneConfig {
    DataplaneConfig {
        teredo: Some(ServerConfig {
            primary: PRIMARY,
            secondary: SECONDARY,
            port: 3544,
            allow_loopback: false,
            mtu_option: Some(1280),
        }),
        relay: RelayConfig::default(),
        corp_prefixes: vec![Prefix::new("2001:db8:100::".parse().unwrap(), 48)],
        corp_address: CORP_ADDRESS,
        self_addresses: Vec::new(),
        dns64_listen: Vec::new(),
        require_ipsec: !open,
        ipsec_endpoint: None,
        ipsec4: None,
        ipsec_pool: None,
        sadb: None,
        ike_per_client_per_sec: 1_000,
        rs_per_sec: 1,
        rs_burst: 3,
        iphttps_prefix: None,
        iphttps_peer_prefix: None,
        nat64: None,
        binding_log: None,
    }
}

fn worker(open: bool) -> Worker {
    Worker::new(Shared::new(config(open)), Arc::new(Stats::default()))
}

fn teredo(mapped: SocketAddrV4) -> Address {
    Address {
        server: PRIMARY,
        flags: 0x2c5a,
        mapped,
    }
}

/// A send queue that keeps what it is given (an IP-HTTPS link's replies).
#[derive(Default)]
struct Kept(std::sync::Mutex<Vec<Vec<u8>>>);

impl ClientQueue for Kept {
    fn push(&self, packet: &[u8]) -> bool {
        self.0.lock().unwrap().push(packet.to_vec());
        true
    }
}

/// An IP-HTTPS connection serving the /64 `prefix`, its link up since `now`.
fn iphttps_link(prefix: Ipv6Addr, now: Instant) -> gate64_iphttps::server::Connection {
    let cfg = gate64_iphttps::server::ServerConfig::default();
    let request = gate64_iphttps::ClientConnection::new(&cfg.path, "gate64.test", 1).request();
    let mut conn = gate64_iphttps::server::Connection::new(Arc::new(cfg), prefix, now);
    let up = conn.handle_input(
        now,
        &request,
        "Sun, 06 Nov 1994 08:49:37 GMT",
        &mut Vec::new(),
    );
    assert!(
        matches!(up, Ok(gate64_iphttps::server::Handshake::LinkUp { .. })),
        "{up:?}"
    );
    conn
}

/// `buf[start..end]` from the IP-HTTPS client of the /64 `prefix` (a link up since `now`),
/// without headroom, as packets lie in a stream buffer.
fn iphttps_packet(
    w: &mut Worker,
    now: Instant,
    prefix: Ipv6Addr,
    buf: &mut [u8],
    start: usize,
    end: usize,
) -> Verdict {
    let mut conn = iphttps_link(prefix, now);
    let replies = Kept::default();
    let mut link = IphttpsLink {
        conn: &mut conn,
        replies: &replies,
    };
    w.handle_iphttps(now, &mut link, buf, start, end, 0)
}

/// `bytes` at `HEADROOM` in a buffer with tailroom: `(buf, start, end)`.
fn framed(bytes: &[u8]) -> (Vec<u8>, usize, usize) {
    let mut buf = vec![0u8; HEADROOM + bytes.len() + TAILROOM];
    buf[HEADROOM..HEADROOM + bytes.len()].copy_from_slice(bytes);
    (buf, HEADROOM, HEADROOM + bytes.len())
}

/// The 61-byte RS Miredo sends: auth header (ID-len = AU-len = 0) with a nonce, then the
/// RS from `src` to ff02::2 (brief §1.4).
fn miredo_rs(src: &str) -> Vec<u8> {
    let mut b = vec![0u8; 61];
    let auth = tw::Auth {
        client_id: &[],
        auth_value: &[],
        nonce: *b"nonce-01",
        confirmation: 0,
    };
    auth.emit(&mut b).unwrap();
    icmpv6::emit_router_solicitation(&mut b[13..], &src.parse().unwrap()).unwrap();
    b
}

fn echo(src: Ipv6Addr, dst: Ipv6Addr, data_len: usize) -> Vec<u8> {
    let mut b = vec![0u8; ipv6::HEADER_LEN + 8 + data_len];
    let data = vec![0xa5; data_len];
    icmpv6::emit_echo(&mut b, true, &src, &dst, 7, 1, &data).unwrap();
    b
}

/// A UDP-over-IPv6 packet (not ICMPv6) of `total` bytes; the checksum is irrelevant here.
fn udp(src: Ipv6Addr, dst: Ipv6Addr, total: usize) -> Vec<u8> {
    let mut b = vec![0x5a; total];
    let plen = u16::try_from(total - ipv6::HEADER_LEN).unwrap();
    ipv6::emit_header(&mut b, plen, ipv6::NH_UDP, 64, &src, &dst).unwrap();
    b
}

/// [`udp`] with the given ports.
fn udp_ports(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, total: usize) -> Vec<u8> {
    let mut b = udp(src, dst, total);
    b[40..42].copy_from_slice(&sport.to_be_bytes());
    b[42..44].copy_from_slice(&dport.to_be_bytes());
    b
}

fn bubble(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let mut b = vec![0u8; ipv6::HEADER_LEN];
    ipv6::emit_header(&mut b, 0, ipv6::NH_NONE, 255, &src, &dst).unwrap();
    b
}

fn total_drops(s: &Stats) -> u64 {
    DropReason::ALL.iter().map(|d| s.drops(*d)).sum()
}

fn from_teredo(w: &mut Worker, now: Instant, remote: SocketAddrV4, bytes: &[u8]) -> Verdict {
    let (mut buf, start, end) = framed(bytes);
    w.handle_teredo(now, PRIMARY, remote, &mut buf, start, end)
}

fn from_tun(w: &mut Worker, now: Instant, bytes: &[u8]) -> Verdict {
    let (mut buf, start, end) = framed(bytes);
    w.handle_tun(now, &mut buf, start, end)
}

fn server_link_local() -> Ipv6Addr {
    gate64_teredo::addr::server_link_local(PRIMARY, 3544)
}
