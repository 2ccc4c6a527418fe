//! The answer to a disconnect request.

use serde::{Deserialize, Serialize};

/// What the daemon answers a disconnect request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Disconnected {
    /// The IKE SAs removed.
    pub removed: Vec<Removed>,
    /// The clients whose IP-HTTPS link was closed with them.
    #[serde(default)]
    pub links_closed: Vec<String>,
    /// Why nothing could be done (IPsec not running, a bad request).
    pub error: Option<String>,
}

/// One removed IKE SA.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Removed {
    /// gate64's SPI of it, hexadecimal.
    pub spi: String,
    /// The authenticated identity.
    pub identity: Option<String>,
    /// The client's outer address and port.
    pub peer: String,
    /// The tunnel it carried, when any.
    pub tunnel: Option<String>,
    /// The child SAs that went with it.
    pub child_sas: usize,
}
