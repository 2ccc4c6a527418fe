//! The child SA types handed to the ESP layer, from `gate64_esp`.

pub use gate64_esp::{ChildSaPair, Cipher, Lifetime, Peer, SaKeys, SaParams, Selector, TunnelKind};

use crate::message::{Notify, Payload, find_notify, notify};

/// The [`notify::GATE64_TUNNEL`] status notify naming `kind`.
pub fn tunnel_notify(kind: TunnelKind) -> Notify {
    let octet = match kind {
        TunnelKind::Infrastructure => notify::TUNNEL_INFRASTRUCTURE,
        TunnelKind::Intranet => notify::TUNNEL_INTRANET,
    };
    Notify::new(notify::GATE64_TUNNEL, vec![octet])
}

/// The tunnel a [`notify::GATE64_TUNNEL`] notify among `payloads` names; none when there is
/// none, or when its data is not exactly one known octet (then the traffic selectors alone
/// decide, as for any other client).
pub fn named_tunnel(payloads: &[Payload]) -> Option<TunnelKind> {
    match find_notify(payloads, notify::GATE64_TUNNEL)?
        .data
        .as_slice()
    {
        [notify::TUNNEL_INFRASTRUCTURE] => Some(TunnelKind::Infrastructure),
        [notify::TUNNEL_INTRANET] => Some(TunnelKind::Intranet),
        _ => None,
    }
}
