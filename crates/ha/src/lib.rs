//! State sync between the two nodes of an active/standby pair, sans-IO: the codec of the
//! sync channel ([`Sealer`], [`Opener`]) and the records it carries ([`ChildSaRecord`], and
//! the responder's own [`gate64_ike::responder::SyncedIkeSa`] through [`encode_ike_sa`] and
//! [`decode_ike_sa`]). No sockets, no clock (time is passed in), no files (the caller reads
//! the shared secret's file and hands over its bytes).
//!
//! - **Channel**: each message is framed as version, type, length, sender node id, epoch
//!   and sequence number, then AES-256-GCM ciphertext and tag with the header as AAD
//!   ([`codec`] has the layout). The key of each direction is derived with HKDF-SHA256 from
//!   the shared secret and both node ids, so a message reflected to its sender does not
//!   authenticate. The receiver refuses replays and numbers older than a
//!   [`RECEIVE_WINDOW`]-message window, and a restarted sender unless its epoch is higher.
//!   Every refusal is a [`Refusal`], for the counters. Bounded: a message is at most
//!   [`MAX_MESSAGE`] bytes, its header is checked against the bytes received before
//!   anything else, and opening allocates nothing.
//! - **Records**: hand-rolled, versioned encodings, every length checked against what is
//!   left before anything is allocated for it. A child SA record converts from and to
//!   [`gate64_esp::SyncedChildSa`], what [`gate64_esp::SaDb::export_sa`] gives and
//!   [`gate64_esp::SaDb::install_synced`] takes; its key material is wiped on drop. An IKE
//!   SA is encoded from and decoded into gate64-ike's `SyncedIkeSa` itself (gate64-ha
//!   depends on gate64-ike, never the reverse), whose keys are `gate64_ike::keys::Secret`s:
//!   never printed by `Debug`, wiped on drop. Encoded records come in buffers wiped on
//!   drop.
//! - **Counters**: a child SA's record goes once, when the SA is made or rekeyed; after
//!   that only its outbound sequence number and inbound replay high-water mark move, and
//!   they go alone ([`ChildCounters`], 20 bytes an SA, up to [`MAX_COUNTERS_PER_MESSAGE`]
//!   in one message). The receiver applies them only to a record it holds and never lowers
//!   one ([`ChildSaRecord::apply_counters`]).
//!
//! Nothing here panics on received bytes.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod child;
pub mod codec;
mod counters;
mod encoding;
mod gone;
mod ike;
mod secret;
mod window;

pub use child::{CHILD_RECORD_VERSION, ChildSaRecord, DirectionRecord, MAX_SELECTORS};
pub use codec::{
    ChannelError, MAX_MESSAGE, MAX_PLAINTEXT, MessageType, Opened, Opener, Refusal, SealError,
    Sealer,
};
pub use counters::{COUNTERS_ENTRY_LEN, COUNTERS_VERSION, ChildCounters, MAX_COUNTERS_PER_MESSAGE};
pub use encoding::DecodeError;
pub use gone::Gone;
pub use ike::{
    IKE_RECORD_VERSION, MAX_ALT_NAMES, MAX_CHILDREN, MAX_IDENTITY_LEN, MAX_KEY_LEN, decode_ike_sa,
    encode_ike_sa,
};
pub use secret::{MAX_SECRET_LEN, MIN_SECRET_LEN, SecretError, SharedSecret};
pub use window::RECEIVE_WINDOW;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_counters;
#[cfg(test)]
mod tests_esp;
