use super::*;
use gate64_esp::Selector;

fn sel(a: &str, b: &str) -> Selector {
    Selector {
        start: a.parse().unwrap(),
        end: b.parse().unwrap(),
        protocol: 0,
        ports: 0..=u16::MAX,
    }
}

fn nets(v: &[Ipv6Net]) -> Vec<String> {
    v.iter().map(ToString::to_string).collect()
}

#[test]
fn a_selector_range_becomes_its_prefixes() {
    assert_eq!(
        nets(&prefixes_of(&sel(
            "fd00:c0::",
            "fd00:c0::ffff:ffff:ffff:ffff"
        ))),
        ["fd00:c0::/64"]
    );
    assert_eq!(
        nets(&prefixes_of(&sel("fd00:c0::53", "fd00:c0::53"))),
        ["fd00:c0::53/128"]
    );
    assert_eq!(
        nets(&prefixes_of(&sel(
            "::",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
        ))),
        ["::/0"]
    );
    // An unaligned range: the fewest aligned blocks that cover exactly it.
    assert_eq!(
        nets(&prefixes_of(&sel("fd00::1", "fd00::6"))),
        ["fd00::1/128", "fd00::2/127", "fd00::4/127", "fd00::6/128"]
    );
    assert!(prefixes_of(&sel("10.0.0.0", "10.0.0.255")).is_empty());
    assert!(prefixes_of(&sel("fd00::6", "fd00::1")).is_empty());
}

#[test]
fn ike_rides_udp_4500_behind_the_non_esp_marker() {
    let local: SocketAddr = "[2001:0:c000:201::1]:4500".parse().unwrap();
    let remote: SocketAddr = "[2001:db8:100:1::2]:4500".parse().unwrap();
    let ike = [0x11u8; 40];
    let pkt = ike_packet(local, remote, &ike).unwrap();
    let p = ipv6::Packet::new_checked(&pkt).unwrap();
    assert_eq!((p.next_header(), p.total_len()), (ipv6::NH_UDP, pkt.len()));
    let u = udp::Packet::new_checked(p.payload()).unwrap();
    assert_eq!((u.src_port(), u.dst_port()), (4500, 4500));
    assert_eq!(&u.payload()[..4], &[0, 0, 0, 0]);
    assert_eq!(&u.payload()[4..], &ike);
    let (IpAddr::V6(s), IpAddr::V6(d)) = (local.ip(), remote.ip()) else {
        unreachable!()
    };
    let pseudo = gate64_wire::checksum::pseudo_header_v6(&s, &d, ipv6::NH_UDP, u32::from(u.len()));
    assert!(u.verify_checksum(pseudo));
    let v4: SocketAddr = "192.0.2.1:4500".parse().unwrap();
    assert!(ike_packet(v4, remote, &ike).is_none());
}

/// One direction's SA parameters, AES-256-GCM, for both ends of a test.
fn gcm_params(spi: u32) -> gate64_esp::SaParams {
    let cipher = gate64_esp::Cipher::AesGcm16_256;
    gate64_esp::SaParams {
        spi,
        keys: gate64_esp::SaKeys {
            cipher,
            key: (0..cipher.keymat_len()).map(|i| i as u8).collect(),
        },
        esn: false,
        lifetime: gate64_esp::Lifetime::UNLIMITED,
        created: Instant::now(),
        local_ts: vec![Selector::prefix("fd00:c0::/64".parse().unwrap())],
        remote_ts: vec![Selector::prefix("fd00:c1::100/128".parse().unwrap())],
    }
}

#[test]
fn esp_without_udp_is_next_header_50_and_opens() {
    let (src, dst): (Ipv6Addr, Ipv6Addr) = (
        "2001:db8:1:2::5".parse().unwrap(),
        "2001:db8:100::1".parse().unwrap(),
    );
    let out_sa = Outbound::new(&gcm_params(0x1234_5678)).unwrap();
    let in_sa = Inbound::new(&gcm_params(0x1234_5678)).unwrap();
    let mut inner = vec![0u8; 100];
    inner[0] = 0x60;
    inner[6] = 59;
    inner[8..24].copy_from_slice(&"fd00:c1::100".parse::<Ipv6Addr>().unwrap().octets());
    inner[24..40].copy_from_slice(&"fd00:c0::53".parse::<Ipv6Addr>().unwrap().octets());
    let mut out = vec![0xaa; 3];
    seal_raw(&out_sa, (src, dst), &inner, &mut out).unwrap();
    assert_eq!(&out[..3], &[0xaa; 3], "appended behind what was there");
    let p = ipv6::Packet::new_checked(&out[3..]).unwrap();
    assert_eq!((p.src(), p.dst(), p.next_header()), (src, dst, NH_ESP));
    assert_eq!(p.total_len(), out.len() - 3);
    assert_eq!(p.payload().len(), esp_len(inner.len()));
    assert_eq!(spi_of(p.payload()), Some(0x1234_5678));
    let mut esp = p.payload().to_vec();
    let opened = in_sa.open(&mut esp).unwrap();
    assert_eq!(
        (&esp[opened.inner], opened.next_header),
        (&inner[..], NEXT_HEADER_IPV6)
    );
    // The same packet in UDP is 8 bytes longer.
    let mut udp = Vec::new();
    let nat_t = |a| SocketAddr::new(IpAddr::V6(a), NAT_T_PORT);
    seal_udp(&out_sa, nat_t(src), nat_t(dst), &inner, &mut udp).unwrap();
    assert_eq!(udp.len(), out.len() - 3 + udp::HEADER_LEN);
}

#[test]
fn retries_back_off_with_a_random_part() {
    for failures in 0..40 {
        let base = RETRY_AFTER
            .saturating_mul(1u32.checked_shl(failures).unwrap_or(u32::MAX))
            .min(RETRY_MAX);
        let d = retry_delay(failures);
        assert!(d >= base / 2 && d <= base, "{failures}: {d:?} for {base:?}");
    }
    assert!(retry_delay(30) <= RETRY_MAX);
}

#[test]
fn an_announced_auth_lifetime_brings_the_renewal_forward() {
    let configured = Duration::from_secs(45 * 60);
    assert_eq!(renew_after(configured, None), configured);
    assert_eq!(
        renew_after(configured, Some(Duration::from_secs(600))),
        Duration::from_secs(540)
    );
    assert_eq!(
        renew_after(configured, Some(Duration::from_secs(86_400))),
        configured
    );
}

#[test]
fn a_refusal_names_the_notify_its_cause_and_the_flags_to_change() {
    let auth = InitiatorError::Notify(notify::AUTHENTICATION_FAILED).to_string();
    assert!(auth.contains("AUTHENTICATION_FAILED (24)"), "{auth}");
    assert!(auth.contains("certificate"), "{auth}");
    let ts = InitiatorError::Notify(notify::TS_UNACCEPTABLE);
    assert!(ts.to_string().contains("TS_UNACCEPTABLE (38)"), "{ts}");
    let hint = failure_hint(&ts).expect("TS_UNACCEPTABLE points at the selector flags");
    assert!(hint.contains("--infrastructure-ts"), "{hint}");
    assert!(hint.contains("infrastructure_prefixes"), "{hint}");
    assert_eq!(
        failure_hint(&InitiatorError::Notify(notify::AUTHENTICATION_FAILED)),
        None
    );
    let unknown = InitiatorError::Notify(0).to_string();
    assert!(unknown.contains("unknown notify (0)"), "{unknown}");
    // A responder's Delete is said as such, not as a notify numbered 0.
    let deleted = InitiatorError::Deleted.to_string();
    assert!(
        deleted.contains("deleted the IKE SA") && deleted.contains("session log"),
        "{deleted}"
    );
}

#[test]
fn a_server_certificate_without_the_expected_identity_names_both_and_the_flag() {
    let e = InitiatorError::Auth(gate64_ike::auth::AuthError::ExpectedIdMismatch {
        expected: "ip:2001:db8::1".into(),
        carried: "fqdn:gate64.example.com, dn:CN=gate64.example.com".into(),
    });
    let text = e.to_string();
    assert!(
        text.contains("identity does not match the certificate"),
        "{text}"
    );
    assert!(text.contains("expected ip:2001:db8::1"), "{text}");
    assert!(text.contains("carries fqdn:gate64.example.com"), "{text}");
    let hint = failure_hint(&e).expect("a hint naming the flag");
    assert!(hint.contains("--ipsec-server-id"), "{hint}");
}
