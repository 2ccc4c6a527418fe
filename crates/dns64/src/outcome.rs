//! How a query ended, as the protocol layer decides it. The driver counts it; the metrics
//! exporter's `result` label (`gate64_dataplane::Dns64Result`) has one value per variant.

/// How a DNS64 query was answered (or why it was not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// AAAA records synthesized from A records (RFC 6147 §5.1.7), including the local
    /// `ipv4only.arpa` answer (RFC 7050), or a PTR answer translated from `in-addr.arpa`
    /// (RFC 6147 §5.3.1).
    Synthesized,
    /// The upstream answer passed on with NOERROR: real AAAA records, other query types,
    /// empty answers.
    Native,
    /// The name does not exist (NXDOMAIN), passed on as is.
    Nxdomain,
    /// SERVFAIL or another error code: every upstream failed, timed out or refused, the
    /// query was not supported (e.g. NOTIMP for other opcodes), or the driver had no room
    /// for it.
    Error,
    /// A query that could not be parsed: answered FORMERR when its header was readable,
    /// dropped otherwise.
    Malformed,
}

impl Outcome {
    /// Every outcome.
    pub const ALL: [Outcome; 5] = [
        Outcome::Synthesized,
        Outcome::Native,
        Outcome::Nxdomain,
        Outcome::Error,
        Outcome::Malformed,
    ];
}
