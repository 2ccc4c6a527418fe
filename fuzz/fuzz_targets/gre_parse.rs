//! GRE parsing (`gate64_wire::gre`): the checked view on arbitrary bytes, then the Repr emitted
//! back must parse to the same fields, and a filled checksum must verify.
#![no_main]

use gate64_wire::gre;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = gre::Packet::new_checked(data) else {
        return;
    };
    assert!(p.header_len() <= data.len());
    let r = gre::Repr::parse(&p);
    assert_eq!(r.header_len(), p.header_len());
    let _ = p.verify_checksum();
    let mut out = vec![0u8; data.len()];
    let n = r
        .emit(&mut out)
        .expect("the buffer holds the parsed header");
    out[n..].copy_from_slice(p.payload());
    gre::fill_checksum(&mut out).expect("the emitted header is well formed");
    let back = gre::Packet::new_checked(&out[..]).expect("an emitted header parses");
    assert_eq!(gre::Repr::parse(&back), r);
    assert_eq!(back.payload(), p.payload());
});
