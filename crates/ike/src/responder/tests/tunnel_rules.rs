//! `[[ipsec.tunnel_rule]]`: the tunnel of a client that does not name one, by the CA that
//! issued its certificate or a pattern of its names; the checks that depend on the tunnel see
//! the rule's.

use super::*;
use crate::auth::CaSet;

/// The lab with a second trusted CA, the "device" CA issuing machine certificates.
struct DeviceLab {
    lab: Lab,
    device_ca: Ca,
}

impl DeviceLab {
    fn new() -> Self {
        DeviceLab {
            lab: Lab::new(),
            device_ca: ca("gate64 device CA"),
        }
    }

    /// A responder trusting both CAs, with `rules`.
    fn responder(
        &self,
        now: Instant,
        rules: Vec<TunnelRule>,
        edit: impl FnOnce(&mut ResponderConfig),
    ) -> Responder {
        let both = format!("{}{}", self.lab.clients_ca.pem, self.device_ca.pem);
        self.lab.responder(now, |c| {
            c.anchors = TrustAnchors::from_pem(both.as_bytes())
                .expect("both CAs")
                .for_clients(ClientEku::Strict);
            c.tunnel_rules = rules;
            edit(c);
        })
    }

    fn device_rule(&self, tunnel: TunnelKind) -> TunnelRule {
        TunnelRule {
            tunnel,
            ca: Some(CaSet::from_pem(self.device_ca.pem.as_bytes()).expect("device CA")),
            identity: None,
        }
    }
}

fn pattern_rule(tunnel: TunnelKind, pattern: &str) -> TunnelRule {
    TunnelRule {
        tunnel,
        ca: None,
        identity: Some(IdentityPattern::new(pattern)),
    }
}

/// How a test client asks: its TSr, the tunnel it names (if any), INITIAL_CONTACT or not.
struct Ask<'a> {
    tsr: &'a str,
    named: Option<TunnelKind>,
    initial_contact: bool,
}

const ANY_UNNAMED: Ask<'static> = Ask {
    tsr: "::/0",
    named: None,
    initial_contact: true,
};

/// What one client's IKE_AUTH came to.
struct Outcome {
    /// The tunnel of the child SA gate64 built, if any (as its events report it).
    tunnel: Option<TunnelKind>,
    /// The corporate selectors the client got, as (start, end).
    corporate: Vec<(IpAddr, IpAddr)>,
    /// The responder's events meanwhile.
    events: Vec<Event>,
}

/// Connects a client with `leaf` as `ask` says.
fn connect(
    lab: &Lab,
    r: &mut Responder,
    now: Instant,
    leaf: &(String, String),
    ask: &Ask<'_>,
) -> Outcome {
    let kind = ask.named.unwrap_or(TunnelKind::Intranet);
    let mut i = lab.initiator_as(now, kind, ask.tsr, (&leaf.0, &leaf.1), Group::Ecp256);
    if ask.named.is_some() {
        i = i.naming_tunnel();
    }
    if !ask.initial_contact {
        i = i.without_initial_contact();
    }
    i.start(now);
    exchange_all(r, &mut i, now);
    let corporate = match i.poll_event() {
        Some(InitiatorEvent::Established { child, .. }) => child
            .outbound
            .remote_ts
            .iter()
            .map(|t| (t.start, t.end))
            .collect(),
        _ => Vec::new(),
    };
    let events = events(r);
    let tunnel = child_ups(&events).first().map(|c| c.tunnel);
    Outcome {
        tunnel,
        corporate,
        events,
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

/// The tunnel of each established IKE SA, by identity's issuer, as `gate64 status` shows it.
fn tunnels(r: &Responder, now: Instant) -> Vec<Option<TunnelKind>> {
    let mut t: Vec<_> = r.ike_sas(now).into_iter().map(|s| s.tunnel).collect();
    t.sort_by_key(|t| format!("{t:?}"));
    t
}

/// A Windows-style pair: a machine certificate of the device CA and a user's of the clients
/// CA, both proposing `::/0` without naming a tunnel. The device CA's rule makes the first the
/// infrastructure tunnel (TSr narrowed into its prefixes); the other matches no rule and is
/// the intranet, as the TSr alone makes it. Neither replaces the other.
#[test]
fn a_rule_by_ca_makes_an_unnamed_any_client_the_infrastructure_tunnel() {
    let d = DeviceLab::new();
    let now = Instant::now();
    let mut r = d.responder(now, vec![d.device_rule(TunnelKind::Infrastructure)], |_| {});
    let machine = leaf(&d.device_ca, "pc1.gate64.lab");
    let user = leaf(&d.lab.clients_ca, "alice.gate64.lab");
    let device = connect(&d.lab, &mut r, now, &machine, &ANY_UNNAMED);
    assert_eq!(device.tunnel, Some(TunnelKind::Infrastructure));
    assert_eq!(device.corporate, [(ip("fd00:c0::53"), ip("fd00:c0::53"))]);
    let user = connect(&d.lab, &mut r, now, &user, &ANY_UNNAMED);
    assert_eq!(user.tunnel, Some(TunnelKind::Intranet));
    assert_eq!(
        user.corporate,
        [(ip("fd00:c0::"), ip("fd00:c0::ffff:ffff:ffff:ffff"))]
    );
    let up: Vec<Option<TunnelKind>> = device
        .events
        .iter()
        .chain(&user.events)
        .filter_map(|e| match e {
            Event::IkeSaUp { tunnel, .. } => Some(*tunnel),
            _ => None,
        })
        .collect();
    assert_eq!(
        up,
        [Some(TunnelKind::Infrastructure), Some(TunnelKind::Intranet)]
    );
    assert!(
        !device
            .events
            .iter()
            .chain(&user.events)
            .any(|e| matches!(e, Event::IkeSaEnded { .. } | Event::Refused { .. }))
    );
    assert_eq!(
        tunnels(&r, now),
        [Some(TunnelKind::Infrastructure), Some(TunnelKind::Intranet)]
    );
}

/// The rule's CA may sit above the issuing CA: a leaf of an intermediate under the device CA
/// matches it too.
#[test]
fn a_rule_by_ca_matches_a_leaf_of_an_intermediate_under_it() {
    let d = DeviceLab::new();
    let now = Instant::now();
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "gate64 device issuing CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let inter_cert = params
        .signed_by(&key, &d.device_ca.issuer)
        .expect("intermediate");
    let inter = Ca {
        pem: inter_cert.pem(),
        issuer: Issuer::new(params, key),
    };
    let (chain, key) = leaf(&inter, "pc2.gate64.lab");
    let chain = format!("{chain}{}", inter.pem);
    let mut r = d.responder(now, vec![d.device_rule(TunnelKind::Infrastructure)], |_| {});
    let got = connect(&d.lab, &mut r, now, &(chain, key), &ANY_UNNAMED);
    assert_eq!(got.tunnel, Some(TunnelKind::Infrastructure));
}

/// A rule naming a CA gate64 trusts nothing under never matches another CA's certificate, even
/// one with the same name: the rule compares the name and the key.
#[test]
fn a_rule_by_ca_compares_the_key_not_only_the_name() {
    let d = DeviceLab::new();
    let now = Instant::now();
    let impostor = ca("gate64 device CA");
    let rule = TunnelRule {
        tunnel: TunnelKind::Infrastructure,
        ca: Some(CaSet::from_pem(impostor.pem.as_bytes()).expect("CA")),
        identity: None,
    };
    let mut r = d.responder(now, vec![rule], |_| {});
    let machine = leaf(&d.device_ca, "pc1.gate64.lab");
    let got = connect(&d.lab, &mut r, now, &machine, &ANY_UNNAMED);
    assert_eq!(got.tunnel, Some(TunnelKind::Intranet));
}

/// A rule by name pattern (`*` any run, case-insensitive) against the subject CN and DNS
/// names; a certificate whose names do not match gets today's choice.
#[test]
fn a_rule_by_identity_pattern_picks_the_tunnel() {
    let d = DeviceLab::new();
    let now = Instant::now();
    let rules = vec![pattern_rule(
        TunnelKind::Infrastructure,
        "*.DEVICES.gate64.lab",
    )];
    let mut r = d.responder(now, rules, |_| {});
    let pc = leaf(&d.lab.clients_ca, "pc7.devices.gate64.lab");
    let got = connect(&d.lab, &mut r, now, &pc, &ANY_UNNAMED);
    assert_eq!(got.tunnel, Some(TunnelKind::Infrastructure));
    let other = leaf(&d.lab.clients_ca, "devices.gate64.lab");
    let got = connect(&d.lab, &mut r, now, &other, &ANY_UNNAMED);
    assert_eq!(
        got.tunnel,
        Some(TunnelKind::Intranet),
        "no match: the TSr decides"
    );
}

/// A rule with both conditions needs both.
#[test]
fn a_rule_with_ca_and_identity_needs_both() {
    let d = DeviceLab::new();
    let now = Instant::now();
    let mut rule = d.device_rule(TunnelKind::Infrastructure);
    rule.identity = Some(IdentityPattern::new("pc*"));
    let mut r = d.responder(now, vec![rule], |_| {});
    let right_ca_wrong_name = leaf(&d.device_ca, "kiosk1.gate64.lab");
    let wrong_ca_right_name = leaf(&d.lab.clients_ca, "pc9.gate64.lab");
    let both = leaf(&d.device_ca, "pc9.gate64.lab");
    let mut tunnel = |l| connect(&d.lab, &mut r, now, l, &ANY_UNNAMED).tunnel;
    assert_eq!(tunnel(&right_ca_wrong_name), Some(TunnelKind::Intranet));
    assert_eq!(tunnel(&wrong_ca_right_name), Some(TunnelKind::Intranet));
    assert_eq!(tunnel(&both), Some(TunnelKind::Infrastructure));
}

/// The first rule that matches wins, in the order written.
#[test]
fn the_first_matching_rule_wins() {
    let d = DeviceLab::new();
    let now = Instant::now();
    let machine = leaf(&d.device_ca, "pc1.gate64.lab");
    for (rules, want) in [
        (
            vec![
                pattern_rule(TunnelKind::Intranet, "pc1.*"),
                d.device_rule(TunnelKind::Infrastructure),
            ],
            TunnelKind::Intranet,
        ),
        (
            vec![
                d.device_rule(TunnelKind::Infrastructure),
                pattern_rule(TunnelKind::Intranet, "pc1.*"),
            ],
            TunnelKind::Infrastructure,
        ),
    ] {
        let mut r = d.responder(now, rules, |_| {});
        let got = connect(&d.lab, &mut r, now, &machine, &ANY_UNNAMED);
        assert_eq!(got.tunnel, Some(want));
    }
}

/// A client that names its tunnel keeps its choice: the machine certificate a rule sends to
/// the infrastructure builds the intranet when it names it (as `gate64 connect` builds both
/// tunnels with one certificate).
#[test]
fn a_named_tunnel_wins_over_a_rule() {
    let d = DeviceLab::new();
    let now = Instant::now();
    let mut r = d.responder(now, vec![d.device_rule(TunnelKind::Infrastructure)], |_| {});
    let machine = leaf(&d.device_ca, "pc1.gate64.lab");
    let named = Ask {
        tsr: "::/0",
        named: Some(TunnelKind::Intranet),
        initial_contact: true,
    };
    let got = connect(&d.lab, &mut r, now, &machine, &named);
    assert_eq!(got.tunnel, Some(TunnelKind::Intranet));
}

/// A rule's tunnel narrows TSr as a named one does: a TSr with nothing in that tunnel's
/// prefixes is TS_UNACCEPTABLE, though the TSr alone would have made it the intranet.
#[test]
fn a_rule_whose_tunnel_takes_none_of_the_tsr_is_ts_unacceptable() {
    let d = DeviceLab::new();
    let now = Instant::now();
    let mut r = d.responder(now, vec![d.device_rule(TunnelKind::Infrastructure)], |_| {});
    let machine = leaf(&d.device_ca, "pc1.gate64.lab");
    let intranet_only = Ask {
        tsr: "fd00:c0::1000/116",
        named: None,
        initial_contact: true,
    };
    let got = connect(&d.lab, &mut r, now, &machine, &intranet_only);
    assert_eq!(got.tunnel, None);
    assert!(got.events.contains(&Event::Refused {
        peer: addr(CLIENT),
        reason: Refusal::TsUnacceptable
    }));
}

/// `unique_ids = "keep"` judges the rule's tunnel: an identity holding the intranet (named)
/// may still build the infrastructure tunnel the rule gives its unnamed `::/0` IKE SA (which
/// by its TSr alone would be the intranet again, and refused), and a third one on it is
/// refused.
#[test]
fn uniqueness_sees_the_rules_tunnel() {
    let d = DeviceLab::new();
    let now = Instant::now();
    let mut r = d.responder(now, vec![d.device_rule(TunnelKind::Infrastructure)], |c| {
        c.unique_ids = UniqueIds::Keep;
    });
    let machine = leaf(&d.device_ca, "pc1.gate64.lab");
    let named_intranet = Ask {
        tsr: "::/0",
        named: Some(TunnelKind::Intranet),
        initial_contact: false,
    };
    let unnamed = Ask {
        initial_contact: false,
        ..ANY_UNNAMED
    };
    let first = connect(&d.lab, &mut r, now, &machine, &named_intranet);
    assert_eq!(first.tunnel, Some(TunnelKind::Intranet));
    let second = connect(&d.lab, &mut r, now, &machine, &unnamed);
    assert_eq!(second.tunnel, Some(TunnelKind::Infrastructure));
    let third = connect(&d.lab, &mut r, now, &machine, &unnamed);
    assert_eq!(third.tunnel, None);
    assert!(third.events.iter().any(|e| matches!(
        e,
        Event::Negotiation {
            result: Err(Refusal::DuplicateIdentity),
            ..
        }
    )));
    assert_eq!(r.established(), 2);
}

/// The per-identity cap judges the rule's tunnel too: with room for one IKE SA, a restarted
/// device (INITIAL_CONTACT) replaces its infrastructure IKE SA, which does not count against
/// it because it is the same tunnel.
#[test]
fn the_identity_cap_sees_the_rules_tunnel() {
    let d = DeviceLab::new();
    let now = Instant::now();
    let mut r = d.responder(now, vec![d.device_rule(TunnelKind::Infrastructure)], |c| {
        c.max_ike_sas_per_identity = 1;
    });
    let machine = leaf(&d.device_ca, "pc1.gate64.lab");
    let first = connect(&d.lab, &mut r, now, &machine, &ANY_UNNAMED);
    assert_eq!(first.tunnel, Some(TunnelKind::Infrastructure));
    let again = connect(&d.lab, &mut r, now, &machine, &ANY_UNNAMED);
    assert_eq!(again.tunnel, Some(TunnelKind::Infrastructure));
    assert!(again.events.iter().any(|e| matches!(
        e,
        Event::IkeSaEnded {
            reason: EndReason::Replaced,
            ..
        }
    )));
    assert_eq!(r.established(), 1);
}

/// RFC 4739 under `required`: the intranet needs a second round, and a rule that makes an
/// unnamed `::/0` client the infrastructure tunnel lets it in with one round (by its TSr alone
/// it would be the intranet, and refused).
#[test]
fn second_auth_policy_sees_the_rules_tunnel() {
    let d = DeviceLab::new();
    let now = Instant::now();
    let machine = leaf(&d.device_ca, "pc1.gate64.lab");
    let mut r = d.responder(now, vec![], |c| {
        c.intranet_second_auth = SecondAuthPolicy::Required;
    });
    assert_eq!(
        connect(&d.lab, &mut r, now, &machine, &ANY_UNNAMED).tunnel,
        None
    );
    let mut r = d.responder(now, vec![d.device_rule(TunnelKind::Infrastructure)], |c| {
        c.intranet_second_auth = SecondAuthPolicy::Required;
    });
    let got = connect(&d.lab, &mut r, now, &machine, &ANY_UNNAMED);
    assert_eq!(got.tunnel, Some(TunnelKind::Infrastructure));
}

/// A reload's new rules apply to the next IKE_AUTH.
#[test]
fn set_tunnel_rules_applies_to_the_next_ike_auth() {
    let d = DeviceLab::new();
    let now = Instant::now();
    let mut r = d.responder(now, vec![], |_| {});
    let machine = leaf(&d.device_ca, "pc1.gate64.lab");
    let got = connect(&d.lab, &mut r, now, &machine, &ANY_UNNAMED);
    assert_eq!(got.tunnel, Some(TunnelKind::Intranet));
    r.set_tunnel_rules(vec![d.device_rule(TunnelKind::Infrastructure)]);
    let got = connect(&d.lab, &mut r, now, &machine, &ANY_UNNAMED);
    assert_eq!(got.tunnel, Some(TunnelKind::Infrastructure));
}

/// A CREATE_CHILD_SA of an IKE SA whose tunnel a rule chose, asking again for the `::/0` it
/// first asked for (as a client that re-proposes its configured selectors does): its TSr is
/// narrowed into that tunnel, not refused as the intranet's.
#[test]
fn a_create_child_sa_asking_for_any_keeps_the_rules_tunnel() {
    let d = DeviceLab::new();
    let now = Instant::now();
    let mut r = d.responder(now, vec![d.device_rule(TunnelKind::Infrastructure)], |_| {});
    let (chain, key) = leaf(&d.device_ca, "pc1.gate64.lab");
    let mut i = d.lab.initiator_as(
        now,
        TunnelKind::Infrastructure,
        "::/0",
        (&chain, &key),
        Group::Ecp256,
    );
    i.start(now);
    exchange_all(&mut r, &mut i, now);
    let (inner, _) = established(&mut i);
    let inner = inner.expect("an inner address");
    let _ = events(&mut r);
    let any = TrafficSelector::range(
        "::".parse().expect("a"),
        IpAddr::V6(std::net::Ipv6Addr::from(u128::MAX)),
    );
    let payloads = [
        esp_proposal(0x6000, None),
        Payload::Nonce(vec![5; 32]),
        Payload::TsI(vec![TrafficSelector::range(inner, inner)]),
        Payload::TsR(vec![any]),
    ];
    let req = request(&mut i, exchange::CREATE_CHILD_SA, &payloads);
    r.handle(now, addr(SERVER), addr(CLIENT), &req);
    let answer = open_response(&i, &r.poll_transmit().expect("answer"));
    let tsr = answer.iter().find_map(|p| match p {
        Payload::TsR(t) => Some(t.clone()),
        _ => None,
    });
    let corporate = ip("fd00:c0::53");
    assert_eq!(
        tsr.map(|t| t.iter().map(|s| (s.start, s.end)).collect::<Vec<_>>()),
        Some(vec![(corporate, corporate)]),
        "{answer:?}"
    );
    let ev = events(&mut r);
    assert_eq!(
        child_ups(&ev).iter().map(|c| c.tunnel).collect::<Vec<_>>(),
        [TunnelKind::Infrastructure]
    );
}
