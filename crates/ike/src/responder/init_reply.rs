//! What an IKE_SA_INIT response is made of (RFC 7296 §1.2): the unprotected error and
//! cookie answers, the NAT detection hashes (§2.23) and the payloads of the response proper.
//! Shared by the request's checks (`init.rs`) and the answer built once its key exchange is
//! done (`init_jobs.rs`).

use std::net::{IpAddr, SocketAddr};

use aws_lc_rs::digest;

use super::Responder;
use super::proposal::ike_reply;
use crate::auth::SigHash;
use crate::keys::{Group, Suite};
use crate::message::{Header, Message, Notify, Payload, flags, notify};

/// An unprotected IKE_SA_INIT response carrying one notify (errors and cookies).
pub(crate) fn error_response(request: Header, kind: u16, data: Vec<u8>) -> Vec<u8> {
    let header = Header {
        spi_r: 0,
        flags: flags::RESPONSE,
        ..request
    };
    Message {
        header,
        payloads: vec![Payload::Notify(Notify::new(kind, data))],
    }
    .emit()
}

/// RFC 7296 §2.23: SHA-1(SPIi | SPIr | IP address | port).
pub fn nat_detection_hash(spi_i: u64, spi_r: u64, addr: SocketAddr) -> Vec<u8> {
    let mut ctx = digest::Context::new(&digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(&spi_i.to_be_bytes());
    ctx.update(&spi_r.to_be_bytes());
    match addr.ip() {
        IpAddr::V4(a) => ctx.update(&a.octets()),
        IpAddr::V6(a) => ctx.update(&a.octets()),
    }
    ctx.update(&addr.port().to_be_bytes());
    ctx.finish().as_ref().to_vec()
}

/// SAr1, KEr, Nr, the NAT detection notifies, CERTREQ and the capability notifies the client
/// announced (RFC 7296 §1.2, §2.23; RFC 7383 §2.3; RFC 7427 §4).
#[allow(clippy::too_many_arguments)]
pub(super) fn response_payloads(
    r: &Responder,
    (spi_i, spi_r): (u64, u64),
    (local, remote): (SocketAddr, SocketAddr),
    public: &[u8],
    nr: &[u8],
    (number, suite, group): (u8, Suite, Group),
    peer_hashes: &[SigHash],
    peer_fragmentation: bool,
) -> Vec<Payload> {
    let chosen = ike_reply(number, suite, group, Vec::new());
    let nat =
        |kind, addr| Payload::Notify(Notify::new(kind, nat_detection_hash(spi_i, spi_r, addr)));
    let mut payloads = vec![
        Payload::Sa(vec![chosen]),
        Payload::Ke {
            group: group.id(),
            data: public.to_vec(),
        },
        Payload::Nonce(nr.to_vec()),
        nat(notify::NAT_DETECTION_SOURCE_IP, local),
        nat(notify::NAT_DETECTION_DESTINATION_IP, remote),
        Payload::CertReq {
            encoding: super::CERT_X509_SIGNATURE,
            data: r.config.anchors.certreq_data(),
        },
    ];
    if peer_fragmentation {
        payloads.push(Payload::Notify(Notify::new(
            notify::IKEV2_FRAGMENTATION_SUPPORTED,
            Vec::new(),
        )));
    }
    if !peer_hashes.is_empty() {
        payloads.push(Payload::Notify(Notify::new(
            notify::SIGNATURE_HASH_ALGORITHMS,
            SigHash::notify_data(),
        )));
    }
    payloads
}
