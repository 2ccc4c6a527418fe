//! The sync channel's messages: framing, AES-256-GCM sealing under the direction's key, and
//! the receiver's checks, each refusal a [`Refusal`].
//!
//! ```text
//! 0         1      2          4             8          12                 20          20+len
//! +---------+------+----------+-------------+----------+------------------+--------------+
//! | version | type | length   | sender node | epoch    | sequence number  | ciphertext + |
//! | (1)     |      | (u16 BE) | id (u32 BE) | (u32 BE) | (u64 BE)         | 16-byte tag  |
//! +---------+------+----------+-------------+----------+------------------+--------------+
//! |<------------------------- AAD: the whole header ------------------->|
//! nonce = epoch || sequence number (12 bytes)
//! ```
//!
//! The length counts the ciphertext and the tag. The epoch is the sender's boot: a restarted
//! sender must use a higher one, and its sequence numbers start again at 1. Since the
//! nonce is epoch and sequence number, and a sender never repeats a sequence number within
//! an epoch, no nonce repeats under a direction's key as long as epochs only grow.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce};

use crate::secret::SharedSecret;
use crate::window::ReceiveWindow;

/// The one version of the framing.
pub const VERSION: u8 = 1;
/// Bytes of the header.
pub const HEADER_LEN: usize = 20;
/// Bytes of the AES-GCM tag.
pub const TAG_LEN: usize = 16;
/// Most plaintext bytes in one message: many times the largest record, and inside one UDP
/// datagram.
pub const MAX_PLAINTEXT: usize = 60 * 1024;
/// Most bytes of a whole message.
pub const MAX_MESSAGE: usize = HEADER_LEN + MAX_PLAINTEXT + TAG_LEN;

/// What a message carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MessageType {
    /// One child SA record ([`crate::ChildSaRecord`]).
    ChildSa,
    /// One IKE SA record ([`crate::encode_ike_sa`]).
    IkeSa,
    /// An IKE SA is gone ([`crate::Gone::IkeSa`]).
    IkeSaGone,
    /// A child SA is gone ([`crate::Gone::ChildSa`]).
    ChildSaGone,
    /// The counters of a batch of child SAs ([`crate::ChildCounters`]).
    ChildCounters,
}

impl MessageType {
    fn code(self) -> u8 {
        match self {
            MessageType::ChildSa => 1,
            MessageType::IkeSa => 2,
            MessageType::IkeSaGone => 3,
            MessageType::ChildSaGone => 4,
            MessageType::ChildCounters => 5,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(MessageType::ChildSa),
            2 => Some(MessageType::IkeSa),
            3 => Some(MessageType::IkeSaGone),
            4 => Some(MessageType::ChildSaGone),
            5 => Some(MessageType::ChildCounters),
            _ => None,
        }
    }
}

/// Why a received message was refused: a label for the drop counters.
///
/// Exhaustive on purpose: each is to be counted under its own name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Refusal {
    /// Shorter than header and tag, an unknown version or type, or a length field that does
    /// not match the bytes received.
    #[error("malformed sync message")]
    Malformed,
    /// Longer than [`MAX_MESSAGE`], or a length field above its limit.
    #[error("sync message too long")]
    TooLong,
    /// The tag did not verify, or the sender is not the peer node (a reflected message, or
    /// another node's): wrong secret, tampered or forged.
    #[error("sync message not authentic")]
    Unauthenticated,
    /// A sequence number of the current epoch seen already, or older than the window.
    #[error("replayed or too old sync message")]
    Replayed,
    /// An epoch older than the peer's current one: from before its last restart.
    #[error("sync message from an older epoch")]
    StaleEpoch,
}

impl Refusal {
    /// The refusal as a metric label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::TooLong => "too_long",
            Refusal::Unauthenticated => "unauthenticated",
            Refusal::Replayed => "replayed",
            Refusal::StaleEpoch => "stale_epoch",
        }
    }
}

/// Why [`Sealer::seal`] did not seal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// More than [`MAX_PLAINTEXT`] bytes.
    #[error("sync message plaintext longer than {MAX_PLAINTEXT} bytes")]
    TooLong,
    /// Every sequence number of this epoch is used: the sender must restart with a higher
    /// epoch.
    #[error("sync sequence numbers exhausted")]
    Exhausted,
}

/// Why a channel end could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// Both nodes have the same id, so both directions would share a key.
    #[error("the local and the peer node have the same id {0}")]
    SameNodeId(u32),
}

/// The header fields, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    kind: MessageType,
    length: usize,
    sender: u32,
    epoch: u32,
    seq: u64,
}

impl Header {
    fn emit(&self) -> [u8; HEADER_LEN] {
        let mut h = [0; HEADER_LEN];
        h[0] = VERSION;
        h[1] = self.kind.code();
        // The length is at most MAX_PLAINTEXT + TAG_LEN, below 2^16.
        h[2..4].copy_from_slice(&(self.length as u16).to_be_bytes());
        h[4..8].copy_from_slice(&self.sender.to_be_bytes());
        h[8..12].copy_from_slice(&self.epoch.to_be_bytes());
        h[12..20].copy_from_slice(&self.seq.to_be_bytes());
        h
    }

    /// The header of `msg`, checked against the bytes received; nothing is allocated.
    fn parse(msg: &[u8]) -> Result<Header, Refusal> {
        if msg.len() > MAX_MESSAGE {
            return Err(Refusal::TooLong);
        }
        let Some((h, rest)) = msg.split_first_chunk::<HEADER_LEN>() else {
            return Err(Refusal::Malformed);
        };
        if h[0] != VERSION {
            return Err(Refusal::Malformed);
        }
        let kind = MessageType::from_code(h[1]).ok_or(Refusal::Malformed)?;
        let length = usize::from(u16::from_be_bytes([h[2], h[3]]));
        if length > MAX_PLAINTEXT + TAG_LEN {
            return Err(Refusal::TooLong);
        }
        if length != rest.len() || length < TAG_LEN {
            return Err(Refusal::Malformed);
        }
        let word = |at: usize| u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        let mut seq = [0; 8];
        seq.copy_from_slice(&h[12..20]);
        Ok(Header {
            kind,
            length,
            sender: word(4),
            epoch: word(8),
            seq: u64::from_be_bytes(seq),
        })
    }
}

fn nonce(epoch: u32, seq: u64) -> Nonce {
    let mut n = [0; 12];
    n[..4].copy_from_slice(&epoch.to_be_bytes());
    n[4..].copy_from_slice(&seq.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

/// The sending end of the channel from this node to its peer.
pub struct Sealer {
    key: LessSafeKey,
    local: u32,
    epoch: u32,
    next_seq: u64,
}

impl Sealer {
    /// The sending end of node `local` to node `peer`, in `epoch`: a number this node never
    /// used before and higher than every earlier one (a boot counter kept on disk, or the
    /// boot's wall-clock second), since the peer accepts a restart only with a higher epoch
    /// and the nonces repeat if an epoch is used twice.
    pub fn new(
        secret: &SharedSecret,
        local: u32,
        peer: u32,
        epoch: u32,
    ) -> Result<Self, ChannelError> {
        if local == peer {
            return Err(ChannelError::SameNodeId(local));
        }
        Ok(Sealer {
            key: secret.direction_key(local, peer),
            local,
            epoch,
            next_seq: 1,
        })
    }

    /// Appends to `out` a message of type `kind` carrying `plaintext`, sealed under the next
    /// sequence number, which it returns.
    pub fn seal(
        &mut self,
        kind: MessageType,
        plaintext: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<u64, SealError> {
        if plaintext.len() > MAX_PLAINTEXT {
            return Err(SealError::TooLong);
        }
        let seq = self.next_seq;
        if seq == u64::MAX {
            return Err(SealError::Exhausted);
        }
        let header = Header {
            kind,
            length: plaintext.len() + TAG_LEN,
            sender: self.local,
            epoch: self.epoch,
            seq,
        }
        .emit();
        let start = out.len();
        // One allocation up front: the plaintext (key material) is encrypted where it is
        // copied to, and no reallocation leaves a copy of it behind.
        out.reserve(HEADER_LEN + plaintext.len() + TAG_LEN);
        out.extend_from_slice(&header);
        out.extend_from_slice(plaintext);
        let sealed = self.key.seal_in_place_separate_tag(
            nonce(self.epoch, seq),
            Aad::from(&header),
            &mut out[start + HEADER_LEN..],
        );
        let Ok(tag) = sealed else {
            // aws-lc refuses only inputs beyond GCM's limit, far above MAX_PLAINTEXT.
            out.truncate(start);
            return Err(SealError::TooLong);
        };
        out.extend_from_slice(tag.as_ref());
        self.next_seq = seq + 1;
        Ok(seq)
    }

    /// The epoch this end seals in.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }
}

/// A message [`Opener::open`] accepted; its plaintext was decrypted in place.
#[derive(Debug, PartialEq, Eq)]
pub struct Opened<'a> {
    /// What it carries.
    pub kind: MessageType,
    /// The sender's epoch.
    pub epoch: u32,
    /// Its sequence number.
    pub seq: u64,
    /// The decrypted plaintext, inside the buffer given to `open`. It may hold key
    /// material: the caller wipes the buffer when done.
    pub plaintext: &'a [u8],
}

/// The receiving end of the channel from the peer node to this one.
pub struct Opener {
    key: LessSafeKey,
    peer: u32,
    /// The peer's current epoch, once a message of it was accepted.
    epoch: Option<u32>,
    window: ReceiveWindow,
}

impl Opener {
    /// The receiving end of node `local` for messages from node `peer`.
    pub fn new(secret: &SharedSecret, local: u32, peer: u32) -> Result<Self, ChannelError> {
        if local == peer {
            return Err(ChannelError::SameNodeId(local));
        }
        Ok(Opener {
            key: secret.direction_key(peer, local),
            peer,
            epoch: None,
            window: ReceiveWindow::default(),
        })
    }

    /// Checks and decrypts `msg` in place. The header is checked first, against the bytes
    /// received and the limits, without allocating; then the sender, the epoch and the
    /// receive window; then the tag. Only an authentic message moves the epoch (a higher
    /// one starts a fresh window) and marks its sequence number.
    pub fn open<'a>(&mut self, msg: &'a mut [u8]) -> Result<Opened<'a>, Refusal> {
        let h = Header::parse(msg)?;
        if h.sender != self.peer {
            return Err(Refusal::Unauthenticated);
        }
        let fresh_epoch = match self.epoch {
            Some(current) if h.epoch < current => return Err(Refusal::StaleEpoch),
            Some(current) if h.epoch == current => false,
            _ => true,
        };
        if h.seq == 0 || (!fresh_epoch && !self.window.check(h.seq)) {
            return Err(Refusal::Replayed);
        }
        let (header, body) = msg.split_at_mut(HEADER_LEN);
        let plaintext = self
            .key
            .open_in_place(nonce(h.epoch, h.seq), Aad::from(&*header), body)
            .map_err(|_| Refusal::Unauthenticated)?;
        if fresh_epoch {
            self.epoch = Some(h.epoch);
            self.window = ReceiveWindow::default();
        }
        if !self.window.mark(h.seq) {
            return Err(Refusal::Replayed);
        }
        debug_assert_eq!(plaintext.len(), h.length - TAG_LEN);
        Ok(Opened {
            kind: h.kind,
            epoch: h.epoch,
            seq: h.seq,
            plaintext,
        })
    }

    /// The peer's current epoch, once one of its messages was accepted.
    pub fn peer_epoch(&self) -> Option<u32> {
        self.epoch
    }
}
