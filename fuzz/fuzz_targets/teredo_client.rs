//! The Teredo client role (RFC 4380 §5.2, RFC 5991) as a state machine under a controlled
//! clock: the input is a program of operations (advance the clock, send the due RS, answer it
//! through our own server from an arbitrary mapping, possibly with one byte flipped, feed an
//! arbitrary datagram from the server or an arbitrary relay, feed one that carries the
//! outstanding nonce, probe for and encapsulate a packet, answer the probe from a relay, check
//! RFC 6081 trailers). Nothing may panic, and:
//! - an RS is sent exactly when `poll_timeout` says one is due, is `RS_LEN` bytes and our
//!   server accepts it as an RS;
//! - an untouched RA from our server for the outstanding RS qualifies the client with the
//!   mapping the server saw, and the address encodes that server and mapping;
//! - a delivered data packet lies inside the datagram and is addressed to the client;
//! - a qualified event leaves the client qualified with that address and an MTU in
//!   1280..=65535; encapsulation only ever points at the server or at the relay that answered
//!   a probe for the packet's destination (RFC 4380 §5.2.9);
//! - a probe is an echo request from the client's address to the packet's destination, and
//!   its untouched answer from a relay names that relay for the destination;
//! - well-formed trailers repeated twice are refused (each type at most once, RFC 6081 §4).
#![no_main]

use gate64_teredo::client::{self, Client, Event, RS_LEN};
use gate64_teredo::{Address, Ingress, Server, ServerConfig, trailer};
use gate64_wire::{icmpv6, ipv6};
use libfuzzer_sys::fuzz_target;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

fn server() -> Server {
    Server::new(ServerConfig {
        primary: SERVER,
        secondary: Ipv4Addr::new(192, 0, 2, 2),
        port: 3544,
        allow_loopback: false,
        mtu_option: Some(1280),
    })
}

/// Reads `[len u16][bytes]`, the length clamped to what is left.
fn chunk<'a>(data: &mut &'a [u8]) -> &'a [u8] {
    let n = match data {
        [a, b, ..] => usize::from(u16::from_be_bytes([*a, *b])).min(data.len() - 2),
        _ => return std::mem::take(data),
    };
    let part = &data[2..2 + n];
    *data = &data[2 + n..];
    part
}

fn byte(data: &mut &[u8]) -> u8 {
    match data.split_first() {
        Some((&b, rest)) => {
            *data = rest;
            b
        }
        None => 0,
    }
}

fn mapping(data: &mut &[u8]) -> SocketAddrV4 {
    let ip = Ipv4Addr::new(byte(data), byte(data), byte(data), byte(data));
    SocketAddrV4::new(ip, u16::from_be_bytes([byte(data), byte(data)]))
}

/// Checks what `handle` said against the client's state afterwards.
fn check_event(c: &Client, datagram: &[u8], r: &Result<Event, client::Error>) {
    match r {
        Ok(Event::Qualified { address, mtu }) => {
            assert!(c.is_qualified());
            assert_eq!(c.address(), Some(*address));
            assert_eq!(c.mtu(), *mtu);
            assert!((1280..=65535).contains(mtu));
            let a = Address::decode(address).expect("a Teredo address");
            assert_eq!(a.server, SERVER);
            assert_eq!(Some(a.mapped), c.mapped());
        }
        Ok(Event::Refreshed) => assert!(c.is_qualified()),
        Ok(Event::Packet { offset, len }) => {
            let end = offset.checked_add(*len).expect("no overflow");
            assert!(end <= datagram.len());
            let p = ipv6::Packet::new_checked(&datagram[*offset..end]).expect("an IPv6 packet");
            assert_eq!(Some(p.dst()), c.address());
        }
        Ok(Event::RelayFound { .. } | Event::Bubble) | Err(_) => {}
    }
}

fuzz_target!(|input: &[u8]| {
    let mut data = input;
    let srv = server();
    let mut c = Client::new(SocketAddrV4::new(SERVER, 3544), u64::from(byte(&mut data)));
    let t0 = Instant::now();
    let mut now = t0;
    // The last RS sent and whether the client still waits for its answer.
    let mut last_rs: Option<Vec<u8>> = None;
    let mut outstanding = false;
    // Every relay an answer to a probe named.
    let mut relays: Vec<SocketAddrV4> = Vec::new();
    let mut ops = 0;
    while !data.is_empty() && ops < 64 {
        ops += 1;
        match byte(&mut data) % 8 {
            0 => now += Duration::from_millis(u64::from(byte(&mut data)) * 500),
            1 => {
                let room = if byte(&mut data) & 1 == 0 {
                    128
                } else {
                    usize::from(byte(&mut data))
                };
                let mut out = vec![0u8; room];
                let due = c.poll_timeout().is_none_or(|t| t <= now);
                let sent = c.poll_transmit(now, &mut out);
                assert_eq!(
                    sent.is_some(),
                    due && room >= RS_LEN,
                    "{sent:?} due={due} room={room}"
                );
                if let Some(n) = sent {
                    assert_eq!(n, RS_LEN);
                    assert!(c.poll_timeout().is_some_and(|t| t > now));
                    let from = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 10), 40000);
                    assert!(matches!(
                        srv.classify(from, &out[..n]),
                        Ok(Ingress::RouterSolicitation(_))
                    ));
                    last_rs = Some(out[..n].to_vec());
                    outstanding = true;
                }
            }
            2 => {
                let remote = mapping(&mut data);
                let flip = u16::from_be_bytes([byte(&mut data), byte(&mut data)]);
                let Some(rs) = &last_rs else { continue };
                let Ok(Ingress::RouterSolicitation(sol)) = srv.classify(remote, rs) else {
                    continue;
                };
                let mut ra = [0u8; 256];
                let Ok((n, _)) = srv.emit_advertisement(&sol, SERVER, remote, &mut ra) else {
                    continue;
                };
                // Flip one byte (or none: offsets past the end leave the RA intact).
                let at = usize::from(flip >> 8);
                let touched = at < n && flip as u8 != 0;
                if touched {
                    ra[at] ^= flip as u8;
                }
                let was_qualified = c.is_qualified();
                let r = c.handle(now, &ra[..n]);
                check_event(&c, &ra[..n], &r);
                if !touched && outstanding && !remote.ip().is_unspecified() {
                    assert!(
                        matches!(r, Ok(Event::Qualified { .. } | Event::Refreshed)),
                        "our own RA refused: {r:?}"
                    );
                    assert_eq!(c.mapped(), Some(remote));
                }
                if !touched && !outstanding {
                    assert!(r.is_err(), "an RA answered twice: {r:?}");
                    assert_eq!(c.is_qualified(), was_qualified);
                }
                if matches!(r, Ok(Event::Qualified { .. } | Event::Refreshed)) {
                    outstanding = false;
                }
            }
            3 => {
                let from = mapping(&mut data);
                let d = chunk(&mut data);
                let r = if from.ip().is_unspecified() {
                    c.handle(now, d)
                } else {
                    c.handle_from(now, d, from)
                };
                if let Ok(Event::RelayFound { relay }) = r {
                    assert_eq!(relay, from, "the relay is the answer's sender");
                    relays.push(relay);
                }
                check_event(&c, d, &r);
                if matches!(r, Ok(Event::Qualified { .. } | Event::Refreshed)) {
                    outstanding = false;
                }
            }
            4 => {
                // An authenticated datagram with the outstanding RS's nonce, so the RA checks
                // themselves are explored: `[0, 1, 0, 0][nonce][confirmation][rest]`.
                let confirmation = byte(&mut data) & 1;
                let rest = chunk(&mut data);
                let Some(rs) = &last_rs else { continue };
                let mut d = rs[..12].to_vec();
                d.push(confirmation);
                d.extend_from_slice(rest);
                let r = c.handle(now, &d);
                check_event(&c, &d, &r);
                if matches!(r, Ok(Event::Qualified { .. } | Event::Refreshed)) {
                    outstanding = false;
                }
            }
            5 => {
                let mut p = chunk(&mut data).to_vec();
                // Half the time from the client's own address, so the accepting path runs.
                if byte(&mut data) & 1 == 0
                    && let (Some(a), Some(src)) = (c.address(), p.get_mut(8..24))
                {
                    src.copy_from_slice(&a.octets());
                }
                let mut probe = [0u8; client::PROBE_LEN];
                if let Some(n) = c.probe(now, &p, &mut probe) {
                    let ip = ipv6::Packet::new_checked(&p[..]).expect("probed");
                    let pr = ipv6::Packet::new_checked(&probe[..n]).expect("a probe");
                    assert_eq!((Some(pr.src()), pr.dst()), (c.address(), ip.dst()));
                    assert_eq!(icmpv6::type_code(&pr), Some((icmpv6::TYPE_ECHO_REQUEST, 0)));
                    if byte(&mut data) & 1 == 0 {
                        // The peer answers through a relay.
                        let relay = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 9), 3545);
                        let b = pr.payload();
                        let mut reply = [0u8; client::PROBE_LEN];
                        let m = icmpv6::emit_echo(
                            &mut reply,
                            false,
                            &pr.dst(),
                            &pr.src(),
                            u16::from_be_bytes([b[4], b[5]]),
                            u16::from_be_bytes([b[6], b[7]]),
                            &b[8..],
                        )
                        .expect("room for the reply");
                        let r = c.handle_from(now, &reply[..m], relay);
                        assert_eq!(r, Ok(Event::RelayFound { relay }), "our own answer refused");
                        assert_eq!(c.encapsulate(&p), Ok(relay));
                        relays.push(relay);
                    }
                }
                match c.encapsulate(&p) {
                    Ok(to) => {
                        let ip = ipv6::Packet::new_checked(&p[..]).expect("checked");
                        assert_eq!(Some(ip.src()), c.address());
                        assert!(
                            to == c.server() || relays.contains(&to),
                            "encapsulated to {to}, neither the server nor a relay found"
                        );
                    }
                    Err(_) => {}
                }
            }
            6 => {
                let t = chunk(&mut data);
                if trailer::check(t).is_ok() && !t.is_empty() {
                    let twice = [t, t].concat();
                    assert!(trailer::check(&twice).is_err(), "a trailer type twice");
                }
            }
            _ => {
                // Invariants that hold at any time.
                assert_eq!(c.is_qualified(), c.address().is_some());
                assert_eq!(c.mapped().is_some(), c.address().is_some());
                assert!((1280..=65535).contains(&c.mtu()));
            }
        }
    }
});
