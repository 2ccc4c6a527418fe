//! RFC 6081 §4 trailers: type-length-value options after the IPv6 payload of a Teredo packet
//! (in practice a bubble), which the server role relays between clients.
//!
//! ```text
//! | type (1) | length of the value (1) | value (length) | type | length | value | ...
//! ```
//!
//! Only the trailers RFC 6081 defines are well formed, each at most once and of its exact
//! length: nonce (0x01, 4 bytes), alternate address (0x03: 2 reserved bytes, then one or more
//! 6-byte IPv4 address + port entries), neighbor discovery option (0x04, 4 bytes: discovery
//! type 0 or 1, 3 reserved) and random port (0x05, 2 bytes). The type numbers and lengths are
//! the project brief's (teredo-iphttps.md §1.8), not checked against the RFC text here.
//!
//! gate64 drops a bubble whose trailing bytes are anything else (`teredo_bad_trailer`): a
//! conforming client never sends one, and relaying it would let anyone send bytes of their
//! choice from gate64's server address to any UDP port (brief §1.4: Miredo's server relays
//! bubbles with their trailers).

/// Nonce trailer (RFC 6081 §4.2).
pub const NONCE: u8 = 0x01;
/// Alternate address trailer (RFC 6081 §4.3).
pub const ALTERNATE_ADDRESS: u8 = 0x03;
/// Neighbor discovery option trailer (RFC 6081 §4.4).
pub const NEIGHBOR_DISCOVERY: u8 = 0x04;
/// Random port trailer (RFC 6081 §4.5).
pub const RANDOM_PORT: u8 = 0x05;

/// Why trailing bytes are not well-formed RFC 6081 trailers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrailerError {
    /// An option runs past the end, or a lone type byte remains.
    Truncated,
    /// A type RFC 6081 does not define.
    UnknownType(u8),
    /// A defined type with the wrong length or value.
    BadLength(u8),
    /// The same type twice.
    Duplicate(u8),
}

/// Checks that `trailers` (every byte after the IPv6 payload) is a sequence of well-formed
/// RFC 6081 trailers; an empty slice is (no trailer).
pub fn check(trailers: &[u8]) -> Result<(), TrailerError> {
    let mut seen = 0u8;
    let mut rest = trailers;
    while let Some((&kind, after)) = rest.split_first() {
        let (&len, after) = after.split_first().ok_or(TrailerError::Truncated)?;
        let value = after
            .get(..usize::from(len))
            .ok_or(TrailerError::Truncated)?;
        let bit = match kind {
            NONCE | RANDOM_PORT | NEIGHBOR_DISCOVERY | ALTERNATE_ADDRESS => 1u8 << kind,
            _ => return Err(TrailerError::UnknownType(kind)),
        };
        if seen & bit != 0 {
            return Err(TrailerError::Duplicate(kind));
        }
        seen |= bit;
        if !value_ok(kind, value) {
            return Err(TrailerError::BadLength(kind));
        }
        rest = &after[value.len()..];
    }
    Ok(())
}

fn value_ok(kind: u8, value: &[u8]) -> bool {
    match kind {
        NONCE => value.len() == 4,
        RANDOM_PORT => value.len() == 2,
        NEIGHBOR_DISCOVERY => value.len() == 4 && value[0] <= 1,
        ALTERNATE_ADDRESS => value.len() >= 8 && (value.len() - 2).is_multiple_of(6),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6081_4_well_formed_trailers_pass() {
        let ok: &[&[u8]] = &[
            &[],
            &[NONCE, 4, 1, 2, 3, 4],
            &[RANDOM_PORT, 2, 0xab, 0xcd],
            &[NEIGHBOR_DISCOVERY, 4, 1, 0, 0, 0],
            &[ALTERNATE_ADDRESS, 8, 0, 0, 192, 0, 2, 9, 0x0d, 0xda],
            &[
                ALTERNATE_ADDRESS,
                14,
                0,
                0,
                192,
                0,
                2,
                9,
                0x0d,
                0xda,
                198,
                51,
                100,
                7,
                1,
                2,
            ],
            &[
                NONCE,
                4,
                9,
                9,
                9,
                9,
                NEIGHBOR_DISCOVERY,
                4,
                0,
                0,
                0,
                0,
                RANDOM_PORT,
                2,
                1,
                1,
            ],
        ];
        for t in ok {
            assert_eq!(check(t), Ok(()), "{t:02x?}");
        }
    }

    #[test]
    fn rfc6081_4_anything_else_is_refused() {
        let cases: &[(&[u8], TrailerError)] = &[
            (&[NONCE], TrailerError::Truncated),
            (&[NONCE, 4, 1, 2, 3], TrailerError::Truncated),
            (&[0x02, 0], TrailerError::UnknownType(2)),
            (
                &[0xff, 3, b'a', b't', b'k'],
                TrailerError::UnknownType(0xff),
            ),
            (&[0x00], TrailerError::Truncated),
            (&[0x00, 0], TrailerError::UnknownType(0)),
            (
                &[NONCE, 8, 1, 2, 3, 4, 5, 6, 7, 8],
                TrailerError::BadLength(NONCE),
            ),
            (
                &[RANDOM_PORT, 4, 1, 2, 3, 4],
                TrailerError::BadLength(RANDOM_PORT),
            ),
            (
                &[NEIGHBOR_DISCOVERY, 4, 2, 0, 0, 0],
                TrailerError::BadLength(NEIGHBOR_DISCOVERY),
            ),
            (
                &[ALTERNATE_ADDRESS, 2, 0, 0],
                TrailerError::BadLength(ALTERNATE_ADDRESS),
            ),
            (
                &[ALTERNATE_ADDRESS, 9, 0, 0, 1, 2, 3, 4, 5, 6, 7],
                TrailerError::BadLength(ALTERNATE_ADDRESS),
            ),
            (
                &[NONCE, 4, 1, 2, 3, 4, NONCE, 4, 1, 2, 3, 4],
                TrailerError::Duplicate(NONCE),
            ),
            // A good trailer followed by an attacker's payload.
            (
                &[NONCE, 4, 1, 2, 3, 4, b'p', 1, b'w'],
                TrailerError::UnknownType(b'p'),
            ),
        ];
        for (t, e) in cases {
            assert_eq!(check(t), Err(*e), "{t:02x?}");
        }
    }
}
