//! What the driver and `gate64 status` use besides the protocol: the snapshot of an IKE SA
//! and the changes a reload makes to a running responder.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::{Responder, SecondAuthPolicy};
use crate::auth::{Credentials, TrustAnchors};
use crate::child_sa::TunnelKind;

/// A snapshot of one IKE SA, for `gate64 status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IkeSaInfo {
    /// Our SPI (SPIr).
    pub spi_r: u64,
    /// The initiator's SPI.
    pub spi_i: u64,
    /// The client's address and port.
    pub peer: SocketAddr,
    /// Our address and port.
    pub local: SocketAddr,
    /// Whether IKE_AUTH completed.
    pub established: bool,
    /// The authenticated identity, once established (the first round's: the machine).
    pub identity: Option<String>,
    /// The second round's identity (RFC 4739: the user), when the client ran one.
    pub user_identity: Option<String>,
    /// The tunnel of its child SA.
    pub tunnel: Option<TunnelKind>,
    /// The inner address given to the client.
    pub inner: Option<IpAddr>,
    /// gate64's inbound SPIs of its child SAs.
    pub child_spis: Vec<u32>,
    /// How long ago it was created.
    pub age: Duration,
    /// How often it was rekeyed (IKE and child).
    pub rekeys: u32,
}

impl Responder {
    /// New credentials and trust anchors (a reload): IKE SAs negotiated from now on get
    /// them; established ones are not touched (their AUTH is done, and rekeys sign nothing).
    pub fn replace_credentials(&mut self, credentials: Credentials, anchors: TrustAnchors) {
        self.config.credentials = credentials;
        self.config.anchors = super::anchors_for_clients(anchors);
    }

    /// New CAs for RFC 4739 second rounds (`[ipsec] user_ca`, a reload); `None`: the first
    /// round's.
    pub fn replace_user_anchors(&mut self, anchors: Option<TrustAnchors>) {
        self.config.user_anchors = anchors.map(super::anchors_for_clients);
    }

    /// A new RFC 4739 policy (a reload), for IKE SAs negotiated from now on.
    pub fn set_intranet_second_auth(&mut self, policy: SecondAuthPolicy) {
        self.config.intranet_second_auth = policy;
    }
}
