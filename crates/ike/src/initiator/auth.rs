//! IKE_AUTH from the initiator's side (RFC 7296 §1.2, §2.15): our identity, certificates and
//! AUTH, the CP request for an inner address and the child SA's proposal and selectors; then
//! the responder's proof checked against our anchors and the child SA built from its answer.

use super::*;

impl Initiator {
    pub(super) fn send_auth(
        &mut self,
        now: Instant,
        init_response: &[u8],
        keys: &IkeKeys,
        m: &Message,
    ) -> Result<(), InitiatorError> {
        let hashes = find_notify(&m.payloads, notify::SIGNATURE_HASH_ALGORITHMS)
            .and_then(|n| SigHash::parse_notify(&n.data).ok())
            .unwrap_or_default();
        self.note_multiple_auth(m, &hashes);
        let (idi, auth) = prove(
            &self.config.credentials,
            &self.init_request,
            &self.nr,
            keys,
            &hashes,
        )?;
        // The responder's IKE_SA_INIT message is what it signs (RFC 7296 §2.15).
        self.init_response = init_response.to_vec();
        let mut payloads = self.identities(idi);
        payloads.push(auth);
        // RFC 6290 §4.2: after AUTH, before the CP and the child SA's payloads.
        if self.qcd {
            payloads.push(Self::qcd_request_notify());
        }
        payloads.extend(self.multiple_auth_notifies());
        payloads.extend(self.mid_sync_notify());
        payloads.extend(self.cfg_request());
        payloads.extend([
            Payload::Sa(self.esp_proposals()),
            Payload::TsI(self.config.tsi.clone()),
            Payload::TsR(self.config.tsr.clone()),
        ]);
        let header = Header {
            spi_i: self.spi_i,
            spi_r: self.spi_r,
            exchange: exchange::IKE_AUTH,
            flags: flags::INITIATOR,
            message_id: 1,
        };
        let bytes = keys::seal_message(&header, &payloads, &keys.sk_ei)?;
        self.state = State::Auth;
        self.next_id = 2;
        self.send(now, bytes);
        Ok(())
    }

    /// What IKE_AUTH carries before AUTH: IDi, our certificates, INITIAL_CONTACT (and the
    /// tunnel's name, when asked to), CERTREQ and the IDr we ask for (RFC 7296 §1.2's order).
    fn identities(&self, idi: Identification) -> Vec<Payload> {
        let mut payloads = vec![Payload::IdI(idi)];
        payloads.extend(certificates(&self.config.credentials));
        if self.initial_contact {
            payloads.push(Payload::Notify(Notify::new(
                notify::INITIAL_CONTACT,
                Vec::new(),
            )));
        }
        if self.name_tunnel {
            payloads.push(Payload::Notify(crate::child_sa::tunnel_notify(
                self.config.tunnel,
            )));
        }
        // RFC 7296 §3.7: ask for the responder's certificate under our CAs (strongSwan sends
        // its CERT only when asked).
        payloads.push(Payload::CertReq {
            encoding: 4,
            data: self.config.anchors.certreq_data(),
        });
        if let Some(id) = &self.server_id {
            payloads.push(Payload::IdR(Identification {
                kind: id.id_type.code(),
                data: id.data.clone(),
            }));
        }
        payloads
    }

    /// CP(CFG_REQUEST) for an inner IPv6 address (RFC 7296 §3.15.1), its DNS servers and
    /// split-DNS domains (RFC 8598), when configured; and an inner IPv4 address and IPv4
    /// DNS servers too when our TSi covers IPv4.
    fn cfg_request(&self) -> Option<Payload> {
        let ipv4 = self.config.tsi.iter().any(|ts| ts.start.is_ipv4());
        self.config.request_address.then(|| {
            let four: &[u16] = if ipv4 {
                &[cfg::INTERNAL_IP4_ADDRESS, cfg::INTERNAL_IP4_DNS]
            } else {
                &[]
            };
            let attributes = [
                cfg::INTERNAL_IP6_ADDRESS,
                cfg::INTERNAL_IP6_DNS,
                cfg::INTERNAL_DNS_DOMAIN,
            ]
            .into_iter()
            .chain(four.iter().copied())
            .map(|kind| CfgAttribute {
                kind,
                value: Vec::new(),
            })
            .collect();
            Payload::Cp(Configuration {
                kind: cfg::REQUEST,
                attributes,
            })
        })
    }

    fn esp_proposals(&self) -> Vec<Proposal> {
        esp_proposals(self.child_spi, self.config.integrity_only)
    }

    pub(super) fn on_auth_response(
        &mut self,
        now: Instant,
        datagram: &[u8],
    ) -> Result<(), InitiatorError> {
        let Some((keys, inner)) = self.open_auth_response(datagram)? else {
            return Ok(());
        };
        let proof = ResponderProof::from(&inner).ok_or(InitiatorError::Malformed)?;
        let octets = [
            &self.init_response[..],
            &self.ni,
            &keys.sk_pr.prf(&[&proof.id.body()]),
        ]
        .concat();
        let identity = self
            .verify_responder(now, &proof, &octets)
            .map_err(InitiatorError::Auth)?;
        if self.second_auth_negotiated() {
            return self.send_second_auth(now, &keys, identity);
        }
        self.establish(now, &keys, &inner, identity)
    }

    /// Opens a response to one of our IKE_AUTH requests. `None` when it does not open with
    /// the responder's keys (not from the responder: ignored, the retransmission stays
    /// armed); the responder's error notify, when it carries one, as the error.
    pub(super) fn open_auth_response(
        &mut self,
        datagram: &[u8],
    ) -> Result<Option<(IkeKeys, Vec<Payload>)>, InitiatorError> {
        let keys = self.keys.clone().ok_or(InitiatorError::Malformed)?;
        let Ok((_, inner)) = keys::open_message(datagram, &keys.sk_er) else {
            return Ok(None);
        };
        self.outstanding = None;
        if let Some(kind) = find_error_notify(&inner) {
            return Err(InitiatorError::Notify(kind));
        }
        Ok(Some((keys, inner)))
    }

    /// Builds the child SA from the response carrying SA, TSi and TSr, and reports it.
    pub(super) fn establish(
        &mut self,
        now: Instant,
        keys: &IkeKeys,
        inner: &[Payload],
        identity: String,
    ) -> Result<(), InitiatorError> {
        self.keep_qcd_token(inner);
        self.note_mid_sync(inner);
        let parts = ChildReply::from(inner).ok_or(InitiatorError::Malformed)?;
        let nonces = (self.ni.as_slice(), self.nr.as_slice());
        let child = self.child(now, keys, &parts, self.child_spi, nonces)?;
        self.child_now = Some(rekey::CurrentChild::of(&parts));
        self.state = State::Established;
        self.init_request = Vec::new();
        self.init_response = Vec::new();
        let auth_lifetime = inner.iter().find_map(|p| match p {
            Payload::Notify(n) if n.kind == notify::AUTH_LIFETIME => {
                <[u8; 4]>::try_from(&n.data[..])
                    .ok()
                    .map(|secs| Duration::from_secs(u64::from(u32::from_be_bytes(secs))))
            }
            _ => None,
        });
        self.events.push_back(InitiatorEvent::Established {
            identity,
            inner: parts.inner,
            dns: parts.dns,
            dns_domains: parts.dns_domains,
            child: Box::new(child),
            auth_lifetime,
        });
        Ok(())
    }

    fn verify_responder(
        &self,
        now: Instant,
        p: &ResponderProof<'_>,
        octets: &[u8],
    ) -> Result<String, AuthError> {
        let wall = self.clock.1 + now.saturating_duration_since(self.clock.0);
        let (leaf, rest) = p.certs.split_first().ok_or(AuthError::NoCertificate)?;
        let cert = self.config.anchors.verify_peer(leaf, rest, wall)?;
        if !cert.matches_id(&Identity::from_payload_body(&p.id.body())?) {
            return Err(AuthError::IdMismatch);
        }
        if let Some(id) = self.server_id.as_ref().filter(|id| !cert.matches_id(id)) {
            return Err(AuthError::ExpectedIdMismatch {
                expected: id.to_string(),
                carried: cert.held_ids().join(", "),
            });
        }
        let method =
            AuthMethod::from_code(p.method).ok_or(AuthError::UnsupportedMethod(p.method))?;
        cert.verify_auth(method, p.auth, octets)?;
        // The responder proved its key: its chain may skip the signatures next time (the
        // anchors' cache is shared by every initiator given a clone of them).
        self.config.anchors.remember_verified(&cert);
        Ok(cert.subject())
    }
}

/// Our IDi and the AUTH payload that proves `credentials` (RFC 7296 §2.15: the signature over
/// our IKE_SA_INIT message, the responder's nonce and prf(SK_pi, IDi)): a digital signature
/// (RFC 7427) when the responder named hash algorithms, the key's classic method otherwise.
pub(super) fn prove(
    credentials: &Credentials,
    init_request: &[u8],
    nr: &[u8],
    keys: &IkeKeys,
    peer_hashes: &[SigHash],
) -> Result<(Identification, Payload), InitiatorError> {
    let ours = credentials.id();
    let idi = Identification {
        kind: ours.id_type.code(),
        data: ours.data,
    };
    let octets = [init_request, nr, &keys.sk_pi.prf(&[&idi.body()])].concat();
    let method = if peer_hashes.is_empty() {
        credentials.classic_method()
    } else {
        AuthMethod::DigitalSignature
    };
    let (method, data) = credentials
        .sign(method, &octets, peer_hashes)
        .map_err(InitiatorError::Auth)?;
    let auth = Payload::Auth {
        method: method.code(),
        data,
    };
    Ok((idi, auth))
}

/// The CERT payloads of `credentials`' chain, X.509 in DER (encoding 4, RFC 7296 §3.6).
pub(super) fn certificates(credentials: &Credentials) -> impl Iterator<Item = Payload> + '_ {
    credentials.chain_der().map(|c| Payload::Cert {
        encoding: 4,
        data: c.to_vec(),
    })
}
