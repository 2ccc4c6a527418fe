//! MOBIKE notifies (RFC 4555): an arbitrary payload chain (its first byte the first payload
//! type) read by `responder::parse_update`, which must refuse without panicking; what it
//! accepts holds only 20-octet NAT detection hashes.
#![no_main]

use gate64_ike::message::parse_chain;
use gate64_ike::responder::parse_update;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let Ok(payloads) = parse_chain(first, rest) else {
        return;
    };
    if let Ok(Some(update)) = parse_update(&payloads) {
        assert!(
            update
                .sources
                .iter()
                .chain(&update.destinations)
                .all(|h| h.len() == 20)
        );
    }
});
