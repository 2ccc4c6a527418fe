//! The parts of IKE_AUTH responses the initiator uses.

use std::net::{IpAddr, Ipv6Addr};

use crate::message::{Identification, Payload, Proposal, TrafficSelector, cfg};

/// IDr, CERTs and AUTH of an IKE_AUTH response.
pub(super) struct ResponderProof<'a> {
    pub(super) id: &'a Identification,
    pub(super) certs: Vec<&'a [u8]>,
    pub(super) method: u8,
    pub(super) auth: &'a [u8],
}

impl<'a> ResponderProof<'a> {
    pub(super) fn from(inner: &'a [Payload]) -> Option<Self> {
        let (mut id, mut auth) = (None, None);
        let mut certs = Vec::new();
        for p in inner {
            match p {
                Payload::IdR(i) => id = Some(i),
                Payload::Cert { encoding: 4, data } => certs.push(data.as_slice()),
                Payload::Auth { method, data } => auth = Some((*method, data.as_slice())),
                _ => {}
            }
        }
        let (method, auth) = auth?;
        Some(ResponderProof {
            id: id?,
            certs,
            method,
            auth,
        })
    }
}

/// CP, SA, TSi and TSr of the IKE_AUTH response that completes the exchange.
pub(super) struct ChildReply<'a> {
    pub(super) inner: Option<IpAddr>,
    /// INTERNAL_IP6_DNS servers of the CFG_REPLY.
    pub(super) dns: Vec<Ipv6Addr>,
    /// INTERNAL_DNS_DOMAIN names of the CFG_REPLY (RFC 8598), those that are printable
    /// ASCII.
    pub(super) dns_domains: Vec<String>,
    pub(super) proposals: &'a [Proposal],
    pub(super) tsi: &'a [TrafficSelector],
    pub(super) tsr: &'a [TrafficSelector],
}

impl<'a> ChildReply<'a> {
    pub(super) fn from(inner: &'a [Payload]) -> Option<Self> {
        let (mut address, mut proposals, mut tsi, mut tsr) = (None, None, None, None);
        let (mut dns, mut dns_domains) = (Vec::new(), Vec::new());
        for p in inner {
            match p {
                Payload::Cp(c) if c.kind == cfg::REPLY => {
                    for a in &c.attributes {
                        match a.kind {
                            cfg::INTERNAL_IP6_DNS => {
                                if let Some(o) =
                                    a.value.get(..16).and_then(|b| <[u8; 16]>::try_from(b).ok())
                                {
                                    dns.push(Ipv6Addr::from(o));
                                }
                            }
                            cfg::INTERNAL_DNS_DOMAIN
                                if !a.value.is_empty()
                                    && a.value.len() <= 253
                                    && a.value.iter().all(|b| b.is_ascii_graphic()) =>
                            {
                                dns_domains.push(String::from_utf8_lossy(&a.value).into_owned());
                            }
                            _ => {}
                        }
                    }
                    address = c.attributes.iter().find_map(|a| {
                        let b = a
                            .value
                            .get(..16)
                            .filter(|_| a.kind == cfg::INTERNAL_IP6_ADDRESS)?;
                        <[u8; 16]>::try_from(b)
                            .ok()
                            .map(|o| IpAddr::V6(Ipv6Addr::from(o)))
                    })
                }
                Payload::Sa(l) => proposals = Some(l.as_slice()),
                Payload::TsI(l) => tsi = Some(l.as_slice()),
                Payload::TsR(l) => tsr = Some(l.as_slice()),
                _ => {}
            }
        }
        Some(ChildReply {
            inner: address,
            dns,
            dns_domains,
            proposals: proposals?,
            tsi: tsi?,
            tsr: tsr?,
        })
    }
}
