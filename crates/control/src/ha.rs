//! The answers to `gate64 ha promote` and `gate64 ha status`.

use serde::{Deserialize, Serialize};

/// What the daemon answers `ha promote`: what the takeover installed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Promoted {
    /// IKE SAs installed into the responder.
    pub ike_installed: u64,
    /// IKE SAs that could not be installed (an SPI taken, keys unusable, an address that
    /// cannot be leased here); the daemon logs each.
    pub ike_failed: u64,
    /// Child SAs installed into the SA database.
    pub child_installed: u64,
    /// Child SAs that could not be installed.
    pub child_failed: u64,
    /// Why nothing was done (no `[ha]`, IPsec not running, the sync task did not answer).
    pub error: Option<String>,
}

impl Promoted {
    /// A takeover that did nothing, and why.
    pub fn refused(error: impl Into<String>) -> Promoted {
        Promoted {
            error: Some(error.into()),
            ..Promoted::default()
        }
    }
}

/// What the daemon answers `ha status`: the sync channel's state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HaState {
    /// `ha.peer`.
    pub peer: Option<String>,
    /// The peer's IKE SAs stored here, waiting for a takeover.
    pub stored_ike_sas: u64,
    /// The peer's child SAs stored here.
    pub stored_child_sas: u64,
    /// Seconds since the last message from the peer that authenticated; `null` when none
    /// came since this daemon started.
    pub last_from_peer_secs: Option<f64>,
    /// Whether the peer counts as quiet: no authentic message for longer than the quiet
    /// interval, so that an authenticated packet of a client of its may take it over here.
    pub peer_quiet: bool,
    /// SAs installed by takeovers so far (`ha promote`, SIGUSR1, on demand).
    pub installed: u64,
    /// SAs a takeover could not install.
    pub install_failed: u64,
    /// IKE SAs taken over on demand (a client's authenticated request while the peer was
    /// quiet).
    pub on_demand: u64,
    /// Why there is nothing to show (no `[ha]`, the sync task did not answer).
    pub error: Option<String>,
}
