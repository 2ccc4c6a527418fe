//! RFC 6311 Message ID sync notifies: an arbitrary payload chain (its first byte the first
//! payload type) read by `mid_sync::MidSync::find`, answered by `mid_sync::answer` (as the
//! peer of a node that took the IKE SA over) and taken by `mid_sync::adopt` (as that node);
//! each must refuse without panicking. What parses is 12 octets that encode back to
//! themselves; an answer never lowers either side's IDs, and a taken answer never lowers the
//! sender's.
#![no_main]

use gate64_ike::message::parse_chain;
use gate64_ike::mid_sync::{self, DATA_LEN, MidSync};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    if let Ok(m) = MidSync::parse(rest) {
        assert_eq!(rest.len(), DATA_LEN);
        assert_eq!(m.encode(), rest);
    }
    let Ok(payloads) = parse_chain(first, rest) else {
        return;
    };
    let ours = (u32::from(first) * 3, u32::from(first));
    if let Ok(m) = MidSync::find(&payloads) {
        assert_eq!(MidSync::parse(&m.encode()), Ok(m));
        for id in [0, 1, u32::from(first)] {
            if let Ok(ans) = mid_sync::answer(true, id, &payloads, ours) {
                assert_eq!(id, 0);
                assert_eq!(ans.nonce, m.nonce);
                assert!(ans.send >= ours.0 && ans.recv >= ours.1);
            }
        }
        assert!(mid_sync::answer(false, 0, &payloads, ours).is_err());
    }
    let sent = mid_sync::request([first; 4], ours.0, ours.1);
    if let Ok((send, recv)) = mid_sync::adopt(&sent, &payloads) {
        assert!(send >= sent.send && recv >= sent.recv);
    }
});
