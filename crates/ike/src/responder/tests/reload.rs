//! New credentials while IKE SAs are up (a SIGHUP reload of `[ipsec]` certificate, key, CA).

use super::*;
use crate::auth::ChainCacheCounts;

fn responder_identity(i: &mut Initiator) -> String {
    match i.poll_event() {
        Some(InitiatorEvent::Established { identity, .. }) => identity,
        other => panic!("initiator not established: {other:?}"),
    }
}

/// Handshakes after `replace_credentials` see the new certificate; the IKE SA established
/// before keeps running (it answers a liveness check), and a client of a CA the new anchors
/// add gets in.
#[test]
fn replaced_credentials_serve_new_handshakes_and_keep_established_sas() {
    let lab = Lab::new();
    let now = Instant::now();
    let mut r = lab.responder(now, |_| {});
    let mut before = lab.infrastructure(now);
    before.start(now);
    exchange_all(&mut r, &mut before, now);
    let old = responder_identity(&mut before);
    assert!(old.contains("gate64.lab"), "{old}");

    let (chain, key) = leaf(&lab.servers_ca, "renewed.gate64.lab");
    let renewed = Credentials::from_pem(chain.as_bytes(), key.as_bytes()).expect("credentials");
    let new_clients = ca("gate64 clients CA 2");
    let mut anchors_pem = lab.clients_ca.pem.clone();
    anchors_pem.push_str(&new_clients.pem);
    let anchors = TrustAnchors::from_pem(anchors_pem.as_bytes()).expect("anchors");
    r.replace_credentials(renewed, anchors);

    let mut after = lab.initiator(
        now,
        TunnelKind::Intranet,
        "fd00:c0::/64",
        &new_clients,
        Group::Ecp256,
    );
    after.start(now);
    exchange_all(&mut r, &mut after, now);
    let new = responder_identity(&mut after);
    assert!(new.contains("renewed.gate64.lab"), "{new}");

    let sas = r.ike_sas(now);
    assert_eq!(sas.iter().filter(|s| s.established).count(), 2, "{sas:?}");
    // The old IKE SA still speaks: an INFORMATIONAL request gets a response under its keys.
    let ping = request(&mut before, exchange::INFORMATIONAL, &[]);
    r.handle(now, addr(SERVER), addr(CLIENT), &ping);
    let reply = r.poll_transmit().expect("liveness answered");
    assert!(open_response(&before, &reply).is_empty());
}

/// `Responder::chain_cache` (what `gate64_ike_chain_cache_*` export): a client's second
/// tunnel hits the cache its first one filled; a reload's new anchors start it empty (the
/// next tunnel misses, the one after hits) and the counters carry on; the second round's
/// anchors count into the same counters, whenever they are set.
#[test]
fn the_chain_cache_counters_carry_on_across_a_reload() {
    let lab = Lab::new();
    let now = Instant::now();
    let users = ca("gate64 users CA");
    // The same certificate on the same tunnel again, at once: not a client to replace.
    let mut r = lab.responder(now, |c| {
        c.unique_ids = UniqueIds::Never;
        c.user_anchors = Some(TrustAnchors::from_pem(users.pem.as_bytes()).expect("users CA"));
    });
    let shared = |r: &Responder| {
        let user = r.config.user_anchors.as_ref().expect("user anchors");
        std::sync::Arc::ptr_eq(user.cache_stats(), r.config.anchors.cache_stats())
    };
    assert!(
        shared(&r),
        "the second round counts into the first round's counters"
    );
    assert_eq!(r.chain_cache(), ChainCacheCounts::default());
    let (chain, key) = leaf(&lab.clients_ca, "client1.gate64.lab");
    let tunnel = |r: &mut Responder, kind, tsr| {
        let mut i = lab.initiator_as(now, kind, tsr, (&chain, &key), Group::Ecp256);
        i.start(now);
        exchange_all(r, &mut i, now);
        responder_identity(&mut i);
    };
    tunnel(&mut r, TunnelKind::Infrastructure, "fd00:c0::53/128");
    tunnel(&mut r, TunnelKind::Intranet, "fd00:c0::/64");
    let before = ChainCacheCounts {
        entries: 1,
        hits: 1,
        misses: 1,
        evicted: 0,
    };
    assert_eq!(r.chain_cache(), before);

    let (server, server_key) = leaf(&lab.servers_ca, "gate64.lab");
    let credentials =
        Credentials::from_pem(server.as_bytes(), server_key.as_bytes()).expect("credentials");
    let anchors = TrustAnchors::from_pem(lab.clients_ca.pem.as_bytes()).expect("anchors");
    r.replace_credentials(credentials, anchors);
    r.replace_user_anchors(Some(
        TrustAnchors::from_pem(users.pem.as_bytes()).expect("users CA"),
    ));
    assert!(
        shared(&r),
        "a reload's second-round anchors count into them too"
    );
    assert_eq!(
        r.chain_cache(),
        ChainCacheCounts {
            entries: 0,
            ..before
        }
    );
    tunnel(&mut r, TunnelKind::Intranet, "fd00:c0::/64");
    tunnel(&mut r, TunnelKind::Infrastructure, "fd00:c0::53/128");
    let after = ChainCacheCounts {
        entries: 1,
        hits: 2,
        misses: 2,
        evicted: 0,
    };
    assert_eq!(r.chain_cache(), after);
    // New CRLs (a CRL file that changed) empty the cache and keep the counters too.
    r.replace_crls(crate::auth::Crls::default());
    assert_eq!(
        r.chain_cache(),
        ChainCacheCounts {
            entries: 0,
            ..after
        }
    );
}
