//! `nat64-sessions`: opens many NAT64 sessions through a gate64 Teredo server, as one Teredo
//! client would: UDP from every source port in a range to every IPv4 destination in a list,
//! each a Teredo datagram (IPv6 from the client's Teredo address to Pref64 + destination).
//! Sessions = ports × destinations. Used by bench/nat64-sessions.sh.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use gate64_testkit::flood::teredo_address;
use gate64_wire::checksum;

const USAGE: &str = "\
usage: nat64-sessions [options]
  --server IPV4:PORT   gate64's Teredo server        (default 192.0.2.1:3544)
  --bind IPV4:PORT     the client's UDP socket        (default 198.51.100.10:3600)
  --prefix IPV6        Pref64, a /96                  (default 2001:db8:64::)
  --dest IPV4          first IPv4 destination         (default 10.99.0.1)
  --dests N            consecutive destinations       (default 16)
  --ports LO-HI        client source ports            (default 1024-63523)
  --pps N              datagrams per second, 0 = unlimited (default 200000)
  -h, --help           this text";

struct Opts {
    server: SocketAddrV4,
    bind: SocketAddrV4,
    prefix: Ipv6Addr,
    dest: Ipv4Addr,
    dests: u32,
    ports: (u16, u16),
    pps: u64,
}

fn main() -> ExitCode {
    let opts = match parse(std::env::args().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("nat64-sessions: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&opts) {
        Ok(sent) => {
            println!("nat64-sessions: sent {sent} datagrams to {}", opts.server);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nat64-sessions: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(o: &Opts) -> std::io::Result<u64> {
    let sock = UdpSocket::bind(o.bind)?;
    let src = teredo_address(*o.server.ip(), 0, o.bind.port(), *o.bind.ip());
    let mut packets: Vec<Vec<u8>> = Vec::with_capacity(64);
    let start = Instant::now();
    let mut sent = 0u64;
    for port in o.ports.0..=o.ports.1 {
        packets.clear();
        for d in 0..o.dests {
            let z = Ipv4Addr::from(u32::from(o.dest).wrapping_add(d));
            packets.push(udp6(src, embed96(o.prefix, z), port, 9));
        }
        for chunk in packets.chunks(32) {
            let n = gate64_sys::udp::send_batch(sock.as_raw_fd(), chunk.len(), |i| {
                (&chunk[i][..], o.server)
            });
            sent += n as u64;
        }
        if o.pps > 0 {
            let due = Duration::from_secs_f64(sent as f64 / o.pps as f64);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
    Ok(sent)
}

fn embed96(prefix: Ipv6Addr, v4: Ipv4Addr) -> Ipv6Addr {
    let mut o = prefix.octets();
    o[12..].copy_from_slice(&v4.octets());
    Ipv6Addr::from(o)
}

/// IPv6 + UDP with 8 payload bytes and a valid checksum.
fn udp6(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16) -> Vec<u8> {
    let mut p = vec![0u8; 40 + 16];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&16u16.to_be_bytes());
    p[6] = 17;
    p[7] = 64;
    p[8..24].copy_from_slice(&src.octets());
    p[24..40].copy_from_slice(&dst.octets());
    p[40..42].copy_from_slice(&sport.to_be_bytes());
    p[42..44].copy_from_slice(&dport.to_be_bytes());
    p[44..46].copy_from_slice(&16u16.to_be_bytes());
    p[48..].copy_from_slice(b"session!");
    let c = checksum::udp_field(checksum::upper_layer_v6(&src, &dst, 17, &p[40..]));
    p[46..48].copy_from_slice(&c.to_be_bytes());
    p
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Opts>, String> {
    let mut o = Opts {
        server: SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 3544),
        bind: SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 10), 3600),
        prefix: Ipv6Addr::new(0x2001, 0xdb8, 0x64, 0, 0, 0, 0, 0),
        dest: Ipv4Addr::new(10, 99, 0, 1),
        dests: 16,
        ports: (1024, 63523),
        pps: 200_000,
    };
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        let bad = |v: &str| format!("bad value {v:?} for {a}");
        match a.as_str() {
            "-h" | "--help" => return Ok(None),
            "--server" => o.server = val()?.parse().map_err(|_| bad("server"))?,
            "--bind" => o.bind = val()?.parse().map_err(|_| bad("bind"))?,
            "--prefix" => o.prefix = val()?.parse().map_err(|_| bad("prefix"))?,
            "--dest" => o.dest = val()?.parse().map_err(|_| bad("dest"))?,
            "--dests" => o.dests = val()?.parse().map_err(|_| bad("dests"))?,
            "--pps" => o.pps = val()?.parse().map_err(|_| bad("pps"))?,
            "--ports" => {
                let v = val()?;
                let (lo, hi) = v.split_once('-').ok_or_else(|| bad(&v))?;
                o.ports = (
                    lo.parse().map_err(|_| bad(&v))?,
                    hi.parse().map_err(|_| bad(&v))?,
                );
                if o.ports.0 > o.ports.1 {
                    return Err(bad(&v));
                }
            }
            _ => return Err(format!("unknown option {a}")),
        }
    }
    Ok(Some(o))
}
