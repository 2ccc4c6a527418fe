//! New credentials while IKE SAs are up (a SIGHUP reload of `[ipsec]` certificate, key, CA).

use super::*;

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
