//! Decapsulation and encapsulation of 1,400-byte inner packets on one keyed tunnel: the
//! per-packet cost of the GRE core (no sockets).
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use gate64_gre::{Gre, TenantId, TunnelConfig, TunnelId};
use gate64_wire::{gre, ipv4};

const HEADROOM: usize = 64;
const INNER: usize = 1400;

fn table(local: IpAddr, remote: IpAddr, checksum: bool) -> Gre {
    let c = TunnelConfig {
        name: "bench".into(),
        local,
        remote,
        key: Some(42),
        tenant: TenantId(0),
        routes: vec!["172.16.0.0/24".parse().expect("literal")],
        send_checksum: checksum,
        send_sequence: false,
        keepalive: None,
    };
    Gre::new(vec![c], Instant::now()).expect("one tunnel")
}

fn bench(c: &mut Criterion) {
    let a = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 1));
    let b = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 2));
    let mut inner = vec![0u8; INNER];
    ipv4::Repr {
        src: Ipv4Addr::new(10, 64, 0, 5),
        dst: Ipv4Addr::new(172, 16, 0, 5),
        protocol: 17,
        payload_len: (INNER - 20) as u16,
        ttl: 64,
        tos: 0,
        ident: 0,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
    }
    .emit(&mut inner)
    .expect("fits");
    for checksum in [false, true] {
        let mut ours = table(a, b, checksum);
        let mut peer = table(b, a, checksum);
        let mut buf = vec![0u8; HEADROOM + INNER];
        let name = if checksum {
            "encap_decap_1400_csum"
        } else {
            "encap_decap_1400"
        };
        c.bench_function(name, |bch| {
            bch.iter(|| {
                buf[HEADROOM..].copy_from_slice(&inner);
                let at = ours
                    .encap(TunnelId(0), &mut buf, HEADROOM, HEADROOM + INNER)
                    .expect("headroom");
                let d = peer.decap(a, b, black_box(&buf[at..])).expect("valid");
                black_box(d.range.len())
            })
        });
    }
    let _ = gre::MAX_HEADER_LEN;
}

criterion_group!(benches, bench);
criterion_main!(benches);
