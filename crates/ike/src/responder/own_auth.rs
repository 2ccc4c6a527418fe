//! Our side of IKE_AUTH (RFC 7296 §2.15): IDr, our certificates and our AUTH signature, in two
//! steps so that the signature, the expensive one, can run off the IKE task.
//!
//! [`prepare`] takes everything the signature covers from the IKE SA (its IKE_SA_INIT
//! response, Ni, prf(SK_pr, IDr')), the method and the credentials (shared, so a reload between
//! the two steps changes neither the key nor the chain the answer names); [`OwnAuth::sign`] is
//! a pure function of that and the crypto library's RNG, so any thread may run it: inline on
//! the IKE task, or inside the verification job of the client's AUTH (`auth_jobs`), after that
//! verified and never before.

use std::sync::Arc;

use super::Responder;
use crate::auth::{AuthError, AuthMethod, Credentials, Identity, SigHash};
use crate::message::{Identification, Payload};

/// What our AUTH signs and with what: ready for [`OwnAuth::sign`] on any thread.
pub(crate) struct OwnAuth {
    credentials: Arc<Credentials>,
    idr: Identification,
    method: AuthMethod,
    octets: Vec<u8>,
    peer_hashes: Vec<SigHash>,
}

impl std::fmt::Debug for OwnAuth {
    /// The signed octets include a PRF output keyed by SK_pr: not printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnAuth")
            .field("idr", &self.idr)
            .field("method", &self.method)
            .finish_non_exhaustive()
    }
}

/// Our IDr and what its AUTH covers for IKE SA `spi_r`, by RFC 7427 when the client sent
/// SIGNATURE_HASH_ALGORITHMS. IDr is the identity the client asked for when our certificate
/// holds it (a strongSwan client whose `remote.id` is our address or DNS name), else the
/// configured one (`[ipsec] identity`). Cheap: one PRF and a copy of the IKE_SA_INIT response.
pub(super) fn prepare(
    r: &Responder,
    spi_r: u64,
    requested: Option<&Identity>,
) -> Result<OwnAuth, AuthError> {
    let sa = r.sas.get(&spi_r).ok_or(AuthError::Malformed("no IKE SA"))?;
    let credentials = Arc::clone(&r.config.credentials);
    let ours = match requested {
        Some(id) if credentials.holds_id(id) => id.clone(),
        _ => credentials.id(),
    };
    let idr = Identification {
        kind: ours.id_type.code(),
        data: ours.data.clone(),
    };
    let octets = [
        &sa.init_response[..],
        &sa.ni,
        &sa.keys.sk_pr.prf(&[&idr.body()]),
    ]
    .concat();
    let method = if sa.peer_hashes.is_empty() {
        credentials.classic_method()
    } else {
        AuthMethod::DigitalSignature
    };
    Ok(OwnAuth {
        credentials,
        idr,
        method,
        octets,
        peer_hashes: sa.peer_hashes.clone(),
    })
}

impl OwnAuth {
    /// Signs and returns the payloads our answer carries: IDr, our certificates (leaf first)
    /// and AUTH. CPU and the library's RNG only (an ECDSA or RSA signature: the most expensive
    /// step of our side of IKE_AUTH).
    pub(crate) fn sign(&self) -> Result<Vec<Payload>, AuthError> {
        let credentials = &self.credentials;
        let (method, data) = credentials.sign(self.method, &self.octets, &self.peer_hashes)?;
        let mut payloads = vec![Payload::IdR(self.idr.clone())];
        payloads.extend(credentials.chain_der().map(|c| Payload::Cert {
            encoding: super::CERT_X509_SIGNATURE,
            data: c.to_vec(),
        }));
        payloads.push(Payload::Auth {
            method: method.code(),
            data,
        });
        Ok(payloads)
    }
}
