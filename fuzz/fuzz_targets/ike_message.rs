//! IKEv2 message parsing: the header, the payload chain and every payload body; whatever
//! parses must emit bytes that parse back to the same message. The SK opener is fed the same
//! bytes under fixed keys, AES-GCM and AES-CBC with HMAC-SHA2-256 (it must refuse them
//! without panicking).
#![no_main]

use gate64_ike::keys::{Encr, Integ, SkCipher, open_message};
use gate64_ike::message::{Message, parse_chain};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Message::parse(data) {
        let again = Message::parse(&m.emit());
        assert_eq!(
            again.as_ref(),
            Ok(&m),
            "emit(parse(b)) must parse to the same message"
        );
    }
    if let Some((&first, rest)) = data.split_first() {
        if let Ok(payloads) = parse_chain(first, rest) {
            assert!(payloads.len() <= gate64_ike::message::MAX_PAYLOADS);
        }
    }
    if let Ok(cipher) = SkCipher::new(Encr::AesGcm16_256, &[7; 36], None) {
        let _ = open_message(data, &cipher);
    }
    let integ = Some((Integ::HmacSha256_128, &[9u8; 32][..]));
    if let Ok(cipher) = SkCipher::new(Encr::AesCbc256, &[7; 32], integ) {
        let _ = open_message(data, &cipher);
    }
});
