//! The server's §5.3.1 acceptance rules, its relay rule (RFC 6081 trailers) and the RS -> RA
//! answer, from an arbitrary remote.
//! Input: 4 bytes remote IPv4, 2 bytes remote port, then the datagram.
#![no_main]

use gate64_teredo::{Ingress, Server, ServerConfig};
use libfuzzer_sys::fuzz_target;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::OnceLock;

const PRIMARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

fn server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        Server::new(ServerConfig {
            primary: PRIMARY,
            secondary: Ipv4Addr::new(192, 0, 2, 2),
            port: 3544,
            allow_loopback: false,
            mtu_option: Some(1280),
        })
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((head, datagram)) = data.split_at_checked(6) else {
        return;
    };
    let ip = Ipv4Addr::new(head[0], head[1], head[2], head[3]);
    let remote = SocketAddrV4::new(ip, u16::from_be_bytes([head[4], head[5]]));
    let s = server();
    match s.classify(remote, datagram) {
        Ok(Ingress::RouterSolicitation(sol)) => {
            let mut out = [0u8; 256];
            let (n, _) = s
                .emit_advertisement(&sol, PRIMARY, remote, &mut out)
                .expect("an RA fits in 256 bytes");
            assert!(gate64_wire::teredo::Packet::parse(&out[..n]).is_ok());
            // A buffer too small is an error, not a panic.
            let _ = s.emit_advertisement(&sol, PRIMARY, remote, &mut out[..n / 2]);
        }
        Ok(Ingress::FromClient { ipv6, offset, .. } | Ingress::ToClient { ipv6, offset, .. }) => {
            let end = offset + ipv6.total_len();
            assert!(end <= datagram.len());
            // The relay rule and the RFC 6081 trailer parser on what follows the packet.
            let relayable = gate64_teredo::check_relayed(&ipv6, &datagram[end..]).is_ok();
            assert!(!relayable || ipv6.is_bubble());
        }
        Err(_) => {}
    }
});
