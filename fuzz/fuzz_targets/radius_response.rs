//! What comes back from a RADIUS server (or anyone who can reach gate64's accounting
//! socket) never panics the reader: arbitrary datagrams through the identifier and the
//! authenticator checks, against a request gate64 really sent.
#![no_main]

use gate64_accounting::radius::{
    Nas, Request, StatusType, check_response, encode_request, response_identifier,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let request = Request {
        status: StatusType::InterimUpdate,
        session_id: "s-infrastructure".into(),
        multi_session_id: "s".into(),
        user_name: String::from_utf8_lossy(data.get(..40).unwrap_or(data)).into_owned(),
        calling_station: "2001:db8::1".into(),
        framed: Vec::new(),
        session_time: Some(1),
        counts: None,
        terminate: None,
        event_time: 0,
        class: vec![data.get(..8).unwrap_or(data).to_vec()],
    };
    let nas = Nas {
        identifier: "gate64",
        address: None,
    };
    let mut packet = Vec::new();
    let Ok(auth) = encode_request(1, &request, &nas, 0, b"secret", &mut packet) else {
        return;
    };
    assert_eq!(
        usize::from(u16::from_be_bytes([packet[2], packet[3]])),
        packet.len()
    );
    let _ = response_identifier(data);
    let _ = check_response(data, &auth, b"secret");
});
