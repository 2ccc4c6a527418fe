//! An IKE SA between the responder's form ([`SyncedIkeSa`]) and the sync channel's
//! ([`IkeSaRecord`]). Here, in the daemon, because neither gate64-ike nor gate64-ha may
//! depend on the other (scripts/check-layers).

use gate64_ha::{ChildRef, IkeKeys, IkeSaRecord};
use gate64_ike::keys::Secret;
use gate64_ike::responder::{SyncedChildRef, SyncedIkeKeys, SyncedIkeSa};
use zeroize::Zeroizing;

/// The record of `s`.
pub(crate) fn record_of(s: &SyncedIkeSa) -> IkeSaRecord {
    let k = &s.keys;
    let z = |s: &Secret| Zeroizing::new(s.0.clone());
    IkeSaRecord {
        spi_i: s.spi_i,
        spi_r: s.spi_r,
        prf: s.prf,
        integ: s.integ,
        encr: s.encr,
        encr_key_bits: s.encr_key_bits,
        keys: IkeKeys {
            sk_d: z(&k.sk_d),
            sk_ai: z(&k.sk_ai),
            sk_ar: z(&k.sk_ar),
            sk_ei: z(&k.sk_ei),
            sk_er: z(&k.sk_er),
            sk_pi: z(&k.sk_pi),
            sk_pr: z(&k.sk_pr),
        },
        next_id_in: s.next_id_in,
        next_id_out: s.next_id_out,
        identity: s.identity.clone(),
        alt_names: s.alt_names.clone(),
        identity_key: s.identity_key,
        peer_id: s.peer_id.clone(),
        tunnel: s.tunnel,
        intranet_allowed: s.intranet_allowed,
        mobike: s.mobike,
        fragmentation: s.fragmentation,
        leased: s.leased,
        local: s.local,
        peer: s.remote,
        inner: s.inner,
        inner4: s.inner4,
        children: (s.children.iter())
            .map(|c| ChildRef {
                inbound_spi: c.inbound_spi,
                outbound_spi: c.outbound_spi,
                age: c.age,
            })
            .collect(),
        age: s.age,
        authenticated_age: s.authenticated_age,
        rekeys: s.rekeys,
    }
}

/// What the responder installs from `r`.
pub(crate) fn synced_of(r: &IkeSaRecord) -> SyncedIkeSa {
    let k = &r.keys;
    let s = |z: &Zeroizing<Vec<u8>>| Secret(z.to_vec());
    SyncedIkeSa {
        spi_i: r.spi_i,
        spi_r: r.spi_r,
        prf: r.prf,
        integ: r.integ,
        encr: r.encr,
        encr_key_bits: r.encr_key_bits,
        keys: SyncedIkeKeys {
            sk_d: s(&k.sk_d),
            sk_ai: s(&k.sk_ai),
            sk_ar: s(&k.sk_ar),
            sk_ei: s(&k.sk_ei),
            sk_er: s(&k.sk_er),
            sk_pi: s(&k.sk_pi),
            sk_pr: s(&k.sk_pr),
        },
        next_id_in: r.next_id_in,
        next_id_out: r.next_id_out,
        local: r.local,
        remote: r.peer,
        identity: r.identity.clone(),
        alt_names: r.alt_names.clone(),
        identity_key: r.identity_key,
        peer_id: r.peer_id.clone(),
        tunnel: r.tunnel,
        intranet_allowed: r.intranet_allowed,
        mobike: r.mobike,
        fragmentation: r.fragmentation,
        inner: r.inner,
        leased: r.leased,
        inner4: r.inner4,
        children: (r.children.iter())
            .map(|c| SyncedChildRef {
                inbound_spi: c.inbound_spi,
                outbound_spi: c.outbound_spi,
                age: c.age,
            })
            .collect(),
        age: r.age,
        authenticated_age: r.authenticated_age,
        rekeys: r.rekeys,
    }
}

#[cfg(test)]
pub(crate) use tests::sample;

#[cfg(test)]
mod tests {
    use super::*;
    use gate64_ike::child_sa::TunnelKind;
    use std::time::Duration;

    #[test]
    fn a_synced_ike_sa_survives_the_record_and_its_encoding() {
        let sa = sample();
        let bytes = record_of(&sa).encode();
        let back = IkeSaRecord::decode(&bytes).unwrap();
        assert_eq!(synced_of(&back), sa);
    }

    /// An IKE SA with AES-GCM keys, one child SA and a lease.
    pub(crate) fn sample() -> SyncedIkeSa {
        let key = |b: u8, n: usize| Secret(vec![b; n]);
        SyncedIkeSa {
            spi_i: 1,
            spi_r: 2,
            prf: 5,
            integ: 0,
            encr: 20,
            encr_key_bits: 256,
            keys: SyncedIkeKeys {
                sk_d: key(1, 32),
                sk_ai: key(0, 0),
                sk_ar: key(0, 0),
                sk_ei: key(2, 36),
                sk_er: key(3, 36),
                sk_pi: key(4, 32),
                sk_pr: key(5, 32),
            },
            next_id_in: 9,
            next_id_out: 4,
            local: "[2001:db8::1]:4500".parse().unwrap(),
            remote: "[2001:db8::7]:4500".parse().unwrap(),
            identity: "CN=c7".to_owned(),
            alt_names: vec!["c7.corp".to_owned()],
            identity_key: [7; 32],
            peer_id: None,
            tunnel: TunnelKind::Infrastructure,
            intranet_allowed: false,
            mobike: true,
            fragmentation: false,
            inner: Some("fd00:c1::5".parse().unwrap()),
            leased: true,
            inner4: None,
            children: vec![SyncedChildRef {
                inbound_spi: 0xc1,
                outbound_spi: 0xd1,
                age: Duration::from_secs(5),
            }],
            age: Duration::from_secs(9),
            authenticated_age: Some(Duration::from_secs(9)),
            rekeys: 0,
        }
    }
}
