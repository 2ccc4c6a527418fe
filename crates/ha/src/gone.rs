//! The message that an SA is gone: the IKE SA with a responder SPI (`IkeSaGone`, 8 bytes),
//! or the child SA with an inbound SPI (`ChildSaGone`, 4 bytes), both big-endian.

use crate::codec::MessageType;
use crate::encoding::DecodeError;

/// An SA the sender no longer has: the receiver forgets its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    /// The IKE SA with this responder SPI.
    IkeSa(u64),
    /// The child SA with this inbound SPI.
    ChildSa(u32),
}

impl Gone {
    /// The message type and body.
    pub fn encode(self) -> (MessageType, Vec<u8>) {
        match self {
            Gone::IkeSa(spi) => (MessageType::IkeSaGone, spi.to_be_bytes().to_vec()),
            Gone::ChildSa(spi) => (MessageType::ChildSaGone, spi.to_be_bytes().to_vec()),
        }
    }

    /// The body of a message of type `kind`; `None` for a type that is not a `Gone`.
    pub fn decode(kind: MessageType, body: &[u8]) -> Option<Result<Gone, DecodeError>> {
        let exact = |n: usize| match body.len() {
            l if l < n => Err(DecodeError::Truncated),
            l if l > n => Err(DecodeError::Trailing),
            _ => Ok(()),
        };
        Some(match kind {
            MessageType::IkeSaGone => exact(8).map(|()| {
                let mut b = [0; 8];
                b.copy_from_slice(body);
                Gone::IkeSa(u64::from_be_bytes(b))
            }),
            MessageType::ChildSaGone => exact(4).map(|()| {
                let mut b = [0; 4];
                b.copy_from_slice(body);
                Gone::ChildSa(u32::from_be_bytes(b))
            }),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_wrong_lengths() {
        for g in [
            Gone::IkeSa(0x0102_0304_0506_0708),
            Gone::ChildSa(0xc000_0001),
        ] {
            let (kind, body) = g.encode();
            assert_eq!(Gone::decode(kind, &body), Some(Ok(g)));
            assert_eq!(
                Gone::decode(kind, &body[1..]),
                Some(Err(DecodeError::Truncated))
            );
            let longer = [&body[..], &[0][..]].concat();
            assert_eq!(
                Gone::decode(kind, &longer),
                Some(Err(DecodeError::Trailing))
            );
        }
        assert_eq!(Gone::decode(MessageType::IkeSa, &[0; 8]), None);
    }
}
