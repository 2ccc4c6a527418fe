//! An IP-HTTPS byte stream from an untrusted peer, both ways: the server's request parsing,
//! deframing and per-packet judgement (RS -> RA, spoofing), and the client's response parsing
//! and packet handling. Input: the first byte picks the role, the rest is the stream.
#![no_main]

use gate64_iphttps::client::ClientConnection;
use gate64_iphttps::framing::Deframer;
use gate64_iphttps::server::{Connection, Handshake, MAX_REPLY_LEN, ServerConfig};
use libfuzzer_sys::fuzz_target;
use std::net::Ipv6Addr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

fn config() -> Arc<ServerConfig> {
    static C: OnceLock<Arc<ServerConfig>> = OnceLock::new();
    C.get_or_init(|| Arc::new(ServerConfig::default())).clone()
}

fuzz_target!(|data: &[u8]| {
    let Some((&role, stream)) = data.split_first() else {
        return;
    };
    let now = Instant::now();
    let deframer = Deframer::new(9216);
    if role & 1 == 0 {
        let prefix: Ipv6Addr = "2001:db8:1:7::".parse().expect("literal");
        let mut conn = Connection::new(config(), prefix, now);
        let mut out = Vec::new();
        let Ok(Handshake::LinkUp { consumed, .. }) =
            conn.handle_input(now, stream, "Mon, 30 Nov 2026 00:00:00 GMT", &mut out)
        else {
            return;
        };
        let mut rest = stream.get(consumed..).unwrap_or_default();
        let mut reply = [0u8; MAX_REPLY_LEN];
        while let Ok(Some(len)) = deframer.next_packet(rest) {
            let _ = conn.handle_packet(now, &rest[..len], &mut reply);
            rest = &rest[len..];
        }
    } else {
        let mut client = ClientConnection::new("/IPHTTPS", "gate64.example", 7);
        let Ok(Some(consumed)) = client.handle_input(now, stream) else {
            return;
        };
        let mut rest = stream.get(consumed..).unwrap_or_default();
        while let Ok(Some(len)) = deframer.next_packet(rest) {
            let _ = client.handle_packet(now, &rest[..len]);
            rest = &rest[len..];
        }
    }
});
