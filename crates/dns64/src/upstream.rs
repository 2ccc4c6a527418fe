//! The wire side of asking an upstream resolver, without the sockets: the query gate64 sends
//! for an [`Ask`] and the check that an answer belongs to it. The driver (`gate64-io`) owns
//! the sockets, timeouts, failover and the random query ID (RFC 5452 §9.2).

use hickory_proto::op::{Edns, Message, MessageType, OpCode};

use crate::synth::{Ask, EDNS_PAYLOAD};

/// The upstream query for `ask`: RD, the client's CD and AD, EDNS with its DO bit.
pub fn encode(ask: &Ask, id: u16) -> Result<Vec<u8>, hickory_proto::ProtoError> {
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.metadata.checking_disabled = ask.checking_disabled;
    m.metadata.authentic_data = ask.authentic_data;
    m.add_query(ask.query.clone());
    let mut edns = Edns::new();
    edns.set_max_payload(EDNS_PAYLOAD);
    edns.set_dnssec_ok(ask.dnssec_ok);
    m.set_edns(edns);
    m.to_vec()
}

/// True when `m` answers query `id` for `ask`'s question (RFC 5452 §9.1: ID and question
/// must match; the driver checks the source address).
pub fn matches(m: &Message, id: u16, ask: &Ask) -> bool {
    let q = &ask.query;
    m.metadata.id == id
        && m.metadata.message_type == MessageType::Response
        && m.queries.len() == 1
        && m.queries[0].query_type() == q.query_type()
        && m.queries[0].query_class() == q.query_class()
        && m.queries[0].name().eq_ignore_root_case(q.name())
}
