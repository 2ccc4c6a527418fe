//! What comes back to the EAP relay from a RADIUS server (or anyone who can reach its
//! socket) never panics the reader: `gate64_accounting::radius::access::parse_access_reply`
//! on arbitrary datagrams (selector 0), and on arbitrary attributes framed and signed as the
//! server holding the secret would (selector 1: Response Authenticator and
//! Message-Authenticator fixed up), so the EAP-Message, State and MS-MPPE key parsing behind
//! the authenticator checks is reached, and so is an Access-Accept's authorization
//! (Framed-IP-Address, Framed-IPv6-Address and -Prefix, Session-Timeout, Filter-Id, Class).
//! A reply that parses is signed; an Accept's MSK is made of decrypted keys only, and its
//! authorization stays within its bounds.
#![no_main]

use gate64_accounting::radius::access::{
    AccessReply, MAX_CLASSES, MAX_FILTER_ID, hmac_md5, parse_access_reply,
};
use libfuzzer_sys::fuzz_target;
use md5::{Digest, Md5};

const SECRET: &[u8] = b"testing123";
const ID: u8 = 7;
const AUTH: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

/// A reply with `code` and `attrs`, a Message-Authenticator appended and both
/// authenticators computed; `None` when it would not fit.
fn signed(code: u8, attrs: &[u8]) -> Option<Vec<u8>> {
    let len = u16::try_from(20 + attrs.len() + 18).ok()?;
    let mut pkt = vec![code, ID];
    pkt.extend(len.to_be_bytes());
    pkt.extend(AUTH);
    pkt.extend(attrs);
    let at = pkt.len();
    pkt.extend([80, 18]);
    pkt.extend([0; 16]);
    let mac = hmac_md5(SECRET, &[&pkt]);
    pkt[at + 2..at + 18].copy_from_slice(&mac);
    let mut md5 = Md5::new();
    md5.update(&pkt[..4]);
    md5.update(AUTH);
    md5.update(&pkt[20..]);
    md5.update(SECRET);
    let resp: [u8; 16] = md5.finalize().into();
    pkt[4..20].copy_from_slice(&resp);
    Some(pkt)
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let reply = if selector & 1 == 0 {
        parse_access_reply(rest, ID, &AUTH, SECRET)
    } else {
        let code = [2, 3, 11][usize::from(selector >> 1) % 3];
        let Some(pkt) = signed(code, rest) else {
            return;
        };
        parse_access_reply(&pkt, ID, &AUTH, SECRET)
    };
    if let Ok(AccessReply::Accept {
        msk, authorization, ..
    }) = reply
    {
        // Two keys of at most 255 octets each.
        assert!(msk.len() <= 510);
        assert!(authorization.class.len() <= MAX_CLASSES);
        assert!(
            authorization
                .class
                .iter()
                .all(|c| (1..=253).contains(&c.len()))
        );
        assert!(
            authorization
                .filter_id
                .is_none_or(|f| !f.is_empty() && f.len() <= MAX_FILTER_ID)
        );
        assert!(
            authorization
                .framed_ipv6_prefix
                .is_none_or(|(_, len)| len <= 128)
        );
        assert_ne!(authorization.session_timeout, Some(0));
    }
});
