//! The child SA types handed to the ESP layer, from `gate64_esp`.

pub use gate64_esp::{ChildSaPair, Cipher, Lifetime, Peer, SaKeys, SaParams, Selector, TunnelKind};
