//! The session log's reader (`gate64 sessions`, any file an admin points it at) and the
//! tracker behind the log never panic: arbitrary text read back as a log, arbitrary times
//! for `--since`, and arbitrary sequences of IKE and child SA events.
#![no_main]

use gate64_accounting::sessions::{Filter, read};
use gate64_accounting::time::parse_utc;
use gate64_accounting::{Counts, Line, Tracker, Transport, Tunnel};
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::{Duration, UNIX_EPOCH};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let text = String::from_utf8_lossy(rest);
        let _ = parse_utc(&text);
        let filter = Filter {
            since: text.lines().next().and_then(parse_utc),
            identity: text.lines().nth(1).map(str::to_owned),
        };
        let report = read(
            text.lines(),
            &filter,
            UNIX_EPOCH + Duration::from_secs(1 << 31),
        );
        for line in text.lines() {
            if let Some(parsed) = Line::parse(line) {
                let mut out = String::new();
                parsed.write_json(&mut out);
                assert_eq!(
                    Line::parse(out.trim_end()),
                    Some(parsed),
                    "a line reads back"
                );
            }
        }
        drop(format!("{report:?}"));
        return;
    }
    // Four bytes per event: kind, client, SA, tunnel.
    let mut t = Tracker::new(1);
    let at = |i: usize| UNIX_EPOCH + Duration::from_secs(1_800_000_000 + i as u64);
    let mut connects = 0usize;
    let mut disconnects = 0usize;
    for (i, ev) in rest.chunks_exact(4).enumerate() {
        let peer = SocketAddr::new(
            IpAddr::V6(Ipv6Addr::new(
                0x2001,
                0,
                0,
                0,
                0,
                0,
                0,
                u16::from(ev[1] % 8),
            )),
            4500,
        );
        let outer = Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, u16::from(ev[1] % 8));
        let tunnel = Tunnel::ALL[usize::from(ev[3] % 2)];
        match ev[0] % 6 {
            0 => t.ike_up(
                at(i),
                u64::from(ev[2]),
                peer,
                "CN=x",
                Transport::Teredo,
                Some(tunnel),
            ),
            1 => t.child_up(at(i), u32::from(ev[2]), outer, &[], tunnel),
            2 => t.child_down(
                at(i),
                u32::from(ev[2]),
                Counts {
                    bytes_in: 1,
                    ..Counts::default()
                },
            ),
            3 => t.ike_ended(u64::from(ev[2]), "revoked"),
            4 => t.ike_down(at(i), u64::from(ev[2])),
            _ => t.auth_refused(at(i), peer, "auth_failed", None),
        }
        while let Some(line) = t.poll_line() {
            match line.event {
                gate64_accounting::EventKind::Connect => connects += 1,
                gate64_accounting::EventKind::Disconnect => disconnects += 1,
                _ => {}
            }
        }
    }
    t.end_all(at(usize::MAX >> 40), "shutdown", |_| Counts::default());
    while let Some(line) = t.poll_line() {
        if line.event == gate64_accounting::EventKind::Disconnect {
            disconnects += 1;
        }
    }
    assert_eq!(
        connects, disconnects,
        "every session that opened closed once"
    );
});
