//! What reaches the RADIUS Dynamic Authorization port never panics the verifier: arbitrary
//! datagrams from a listed and an unlisted source (selector 0), and datagrams given a
//! correct Length and request authenticator under the client's secret (selector 1), so the
//! attribute parsing, the Message-Authenticator check, the replay cache and the answer are
//! reached. The verifier and its replay cache persist across runs, with a clock that moves
//! forward.
#![no_main]

use gate64_accounting::dae::{Client, Dae, encode_response, precheck};
use libfuzzer_sys::fuzz_target;
use md5::{Digest, Md5};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;

const SECRET: &[u8] = b"s3cret";

static STATE: Mutex<Option<(Dae, u64)>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let mut guard = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let (dae, now) = guard.get_or_insert_with(|| {
        let client = Client {
            address: IpAddr::V4(Ipv4Addr::new(10, 64, 0, 0)),
            prefix_len: 24,
            secret: SECRET.to_vec(),
        };
        (Dae::new(vec![client], 300), 1_796_083_200)
    });
    *now += u64::from(selector >> 4);
    let mut bytes = rest.to_vec();
    if selector & 1 == 1 && bytes.len() >= 20 && bytes.len() <= 4096 {
        let len = bytes.len() as u16;
        bytes[2..4].copy_from_slice(&len.to_be_bytes());
        bytes[4..20].fill(0);
        let mut md5 = Md5::new();
        md5.update(&bytes);
        md5.update(SECRET);
        let a: [u8; 16] = md5.finalize().into();
        bytes[4..20].copy_from_slice(&a);
    }
    let source = match selector & 2 {
        0 => IpAddr::V4(Ipv4Addr::new(10, 64, 0, 2)),
        _ => IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
    };
    if let Ok(request) = dae.handle(*now, source, &bytes) {
        let cause = precheck(&request);
        let mut out = Vec::new();
        encode_response(&request, cause, SECRET, &mut out);
        assert!(out.len() >= 20 && out.len() <= 4096);
        assert_eq!(usize::from(u16::from_be_bytes([out[2], out[3]])), out.len());
        assert_eq!(out[1], request.identifier);
    }
});
