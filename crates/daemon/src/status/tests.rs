use super::*;
use crate::control::{ControlHandlers, bind, serve};
use gate64_admin::status::{render, text};
use gate64_control::client::request_line;
use gate64_dataplane::{DataplaneConfig, Prefix};
use gate64_esp::{ChildSaPair, Cipher, Lifetime, Peer, SaDb, SaKeys, SaParams};
use gate64_ike::responder::IkeSaInfo;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The driver's view: three established IKE SAs, one per child SA of
/// [`shared_with_two_clients`], the infrastructure one of the Teredo client rekeyed twice.
fn ike_sas() -> Vec<IkeSaInfo> {
    [0x100u64, 0x200, 0x300]
        .into_iter()
        .map(|spi| IkeSaInfo {
            spi_r: spi,
            spi_i: spi << 32,
            peer: "[2001:db8::1]:4500".parse().unwrap(),
            local: "[2001:db8:100::1]:4500".parse().unwrap(),
            established: true,
            identity: Some(format!("CN=client{spi:x}")),
            user_identity: (spi == 0x100).then(|| "CN=alice".to_owned()),
            certificate: Some(gate64_ike::auth::CertSummary {
                issuer: "O=gate64 lab, CN=gate64 lab CA".to_owned(),
                serial: format!("{spi:X}"),
                not_after: 1_830_297_600,
            }),
            tunnel: None,
            inner: None,
            inner4: (spi == 0x100).then(|| std::net::Ipv4Addr::new(10, 77, 0, 1)),
            child_spis: vec![spi as u32],
            age: Duration::from_secs(90),
            rekeys: if spi == 0x200 { 2 } else { 0 },
            auth_method: Some(if spi == 0x300 { "eap" } else { "certificate" }),
            radius_user: (spi == 0x300).then(|| "alice".to_owned()),
            filter_id: (spi == 0x300).then(|| "contractors".to_owned()),
        })
        .collect()
}

const ENDPOINT: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);

/// One direction of a child SA of `remote` (AES-GCM, the corporate /48 on gate64's side).
fn params(spi: u32, created: Instant, remote: IpAddr) -> SaParams {
    SaParams {
        spi,
        keys: SaKeys {
            cipher: Cipher::AesGcm16_128,
            key: vec![7; Cipher::AesGcm16_128.keymat_len()],
        },
        esn: false,
        lifetime: Lifetime::UNLIMITED,
        created,
        local_ts: vec![Selector::prefix("2001:db8:100::/48".parse().unwrap())],
        remote_ts: vec![Selector::address(remote)],
    }
}

fn shared_with_two_clients(created: Instant) -> Arc<Shared> {
    let sadb = Arc::new(SaDb::new());
    let teredo: Ipv6Addr = "2001:0:c000:201:2c5a:39cb:9bff:f1f5".parse().unwrap();
    let iphttps: Ipv6Addr = "2001:db8:1:5::77".parse().unwrap();
    let inner: IpAddr = "fd00:c1::101".parse().unwrap();
    for (spi, outer, inner, tunnel, udp) in [
        (0x100, teredo, inner, TunnelKind::Intranet, Some(4501)),
        (0x200, teredo, inner, TunnelKind::Infrastructure, Some(4501)),
        (
            0x300,
            iphttps,
            IpAddr::V6(iphttps),
            TunnelKind::Intranet,
            None,
        ),
    ] {
        sadb.install(ChildSaPair {
            inbound: params(spi, created, inner),
            outbound: params(spi + 1, created, inner),
            peer: Peer {
                outer,
                native: None,
                udp_encap: udp,
                inner: vec![inner],
            },
            tunnel,
            ike_spi: u64::from(spi) << 32,
        })
        .unwrap();
    }
    Shared::new(DataplaneConfig {
        teredo: None,
        relay: Default::default(),
        corp_prefixes: vec![Prefix::new("2001:db8:100::".parse().unwrap(), 48)],
        corp_address: ENDPOINT,
        self_addresses: Vec::new(),
        dns64_listen: Vec::new(),
        require_ipsec: true,
        ipsec_endpoint: Some(ENDPOINT),
        ipsec4: None,
        ipsec_pool: None,
        sadb: Some(sadb),
        ike_per_client_per_sec: 1_000,
        rs_per_sec: 1,
        rs_burst: 1,
        iphttps_prefix: Some(Prefix::new("2001:db8:1::".parse().unwrap(), 48)),
        iphttps_peer_prefix: None,
        nat64: None,
        binding_log: None,
    })
}

/// An infrastructure child SA of the client at `outer` (its inner address the same), ESP
/// in UDP from port 4500, native from `native`, installed.
pub(crate) fn install_client(
    sadb: &SaDb,
    spi: u32,
    created: Instant,
    outer: Ipv6Addr,
    native: Option<std::net::SocketAddr>,
) {
    let inner = IpAddr::V6(outer);
    sadb.install(ChildSaPair {
        inbound: params(spi, created, inner),
        outbound: params(spi + 1, created, inner),
        peer: Peer {
            outer,
            native,
            udp_encap: Some(4500),
            inner: vec![inner],
        },
        tunnel: TunnelKind::Infrastructure,
        ike_spi: u64::from(spi) << 32,
    })
    .unwrap();
}

/// A client whose SAs run on an `[ipsec] listen` socket is `native`, whatever its address;
/// an address of no transport without that socket stays `other`.
#[test]
fn a_native_client_shows_transport_native() {
    let created = Instant::now();
    let shared = shared_with_two_clients(created);
    let sadb = shared.sadb().unwrap();
    let native_outer = Ipv4Addr::new(198, 51, 100, 10).to_ipv6_mapped();
    let plain: Ipv6Addr = "2001:db8:200::10".parse().unwrap();
    for (spi, outer, native) in [
        (
            0x400,
            native_outer,
            Some("192.0.2.10:4500".parse().unwrap()),
        ),
        (0x500, plain, None),
    ] {
        install_client(sadb, spi, created, outer, native);
    }
    let s = snapshot(&shared, None, created);
    let transport = |outer: Ipv6Addr| {
        s.clients
            .iter()
            .find(|c| c.outer == outer)
            .map(|c| c.transport.as_str())
    };
    assert_eq!(transport(native_outer), Some("native"));
    assert_eq!(transport(plain), Some("other"));
    let shown = render(&s);
    assert!(
        shown.contains("::ffff:198.51.100.10: native, inner ::ffff:198.51.100.10, port 4500\n"),
        "{shown}"
    );
}

/// Machines behind one NAT share its address and differ by port: one client each, with its
/// own inner address; one machine's two tunnels, through one mapping, are one client.
#[test]
fn native_clients_behind_one_nat_are_listed_apart() {
    let created = Instant::now();
    let shared = shared_with_two_clients(created);
    let sadb = shared.sadb().unwrap();
    let nat = Ipv4Addr::new(198, 51, 100, 7).to_ipv6_mapped();
    let listen = Some("192.0.2.10:4500".parse().unwrap());
    for (spi, port, inner, tunnel) in [
        (0x400, 40001, "fd00:c1::1", TunnelKind::Infrastructure),
        (0x410, 40001, "fd00:c1::1", TunnelKind::Intranet),
        (0x500, 40002, "fd00:c1::2", TunnelKind::Intranet),
    ] {
        let inner: IpAddr = inner.parse().unwrap();
        sadb.install(ChildSaPair {
            inbound: params(spi, created, inner),
            outbound: params(spi + 1, created, inner),
            peer: Peer {
                outer: nat,
                native: listen,
                udp_encap: Some(port),
                inner: vec![inner],
            },
            tunnel,
            ike_spi: u64::from(spi) << 32,
        })
        .unwrap();
    }
    let s = snapshot(&shared, None, created);
    let natted: Vec<(Option<u16>, Vec<IpAddr>, usize)> = s
        .clients
        .iter()
        .filter(|c| c.outer == nat)
        .map(|c| (c.port, c.inner.clone(), c.sas.len()))
        .collect();
    assert_eq!(
        natted,
        [
            (Some(40001), vec!["fd00:c1::1".parse().unwrap()], 2),
            (Some(40002), vec!["fd00:c1::2".parse().unwrap()], 1),
        ]
    );
    assert!(
        s.clients
            .iter()
            .filter(|c| c.transport != "native")
            .all(|c| c.port.is_none()),
        "Teredo and IP-HTTPS clients carry no port"
    );
    let shown = render(&s);
    assert!(
        shown.contains("::ffff:198.51.100.7: native, inner fd00:c1::1, port 40001\n"),
        "{shown}"
    );
    assert!(
        shown.contains("::ffff:198.51.100.7: native, inner fd00:c1::2, port 40002\n"),
        "{shown}"
    );
}

#[test]
fn snapshot_groups_sas_by_client_with_their_transport() {
    let created = Instant::now();
    let shared = shared_with_two_clients(created);
    let s = snapshot(
        &shared,
        Some(ike_sas().as_slice()),
        created + Duration::from_secs(90),
    );
    assert_eq!((s.ike_sas, s.child_sas, s.clients.len()), (3, 3, 2));
    assert_eq!(s.endpoint, Some(ENDPOINT));
    let teredo = &s.clients[0];
    assert_eq!(teredo.transport, "teredo");
    assert_eq!(teredo.inner, ["fd00:c1::101".parse::<IpAddr>().unwrap()]);
    assert_eq!(
        teredo.address4,
        Some(std::net::Ipv4Addr::new(10, 77, 0, 1)),
        "from the IKE SA of either of its child SAs"
    );
    assert_eq!(s.clients[1].address4, None);
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["clients"][0]["address4"], "10.77.0.1");
    assert!(json["clients"][1]["address4"].is_null(), "{json}");
    let tunnels: Vec<&str> = teredo.sas.iter().map(|sa| sa.tunnel.as_str()).collect();
    assert_eq!(tunnels, ["infrastructure", "intranet"]);
    let sa = &teredo.sas[0];
    assert_eq!(
        (sa.spi_in, sa.spi_out, sa.udp_encap),
        (0x200, 0x201, Some(4501))
    );
    assert_eq!(sa.local_ts, ["2001:db8:100::/48"]);
    assert_eq!(sa.remote_ts, ["fd00:c1::101/128"]);
    assert_eq!(sa.age_secs, 90);
    assert_eq!(
        sa.esp, "aes128gcm16",
        "the suite as esp_proposals spells it"
    );
    assert_eq!(sa.identity.as_deref(), Some("CN=client200"));
    assert_eq!(sa.rekeys, Some(2));
    assert_eq!(sa.user_identity, None);
    // The intranet IKE SA ran an RFC 4739 second round: both identities are shown.
    let intranet = &teredo.sas[1];
    assert_eq!(intranet.identity.as_deref(), Some("CN=client100"));
    assert_eq!(intranet.user_identity.as_deref(), Some("CN=alice"));
    assert_eq!(s.clients[1].transport, "iphttps");
    assert_eq!(intranet.auth_method.as_deref(), Some("certificate"));
    // The IP-HTTPS client's IKE SA was authenticated by EAP with a Filter-Id.
    let eap = &s.clients[1].sas[0];
    assert_eq!(eap.auth_method.as_deref(), Some("eap"));
    assert_eq!(eap.radius_user.as_deref(), Some("alice"));
    assert_eq!(eap.filter_id.as_deref(), Some("contractors"));
    assert_eq!(eap.limit, None);
    // The JSON the socket carries reads back as the same snapshot.
    let json = serde_json::to_string(&s).unwrap();
    assert_eq!(serde_json::from_str::<Snapshot>(&json).unwrap(), s);
    assert!(json.contains(r#""identity":"CN=client100","user_identity":"CN=alice""#));
    assert!(json.contains(
        r#""issuer":"O=gate64 lab, CN=gate64 lab CA","serial":"100","not_after":"2028-01-01T00:00:00.000Z""#
    ));
    assert!(json.contains(r#""identity":"CN=client200","user_identity":null"#));
}

#[test]
fn render_lists_every_sa_like_swanctl() {
    let created = Instant::now();
    let text = render(&snapshot(
        &shared_with_two_clients(created),
        Some(ike_sas().as_slice()),
        created,
    ));
    for needle in [
        "gate64 2001:db8:100::1: 3 IKE SAs, 3 child SAs, 2 clients\n",
        "2001:0:c000:201:2c5a:39cb:9bff:f1f5: teredo, inner fd00:c1::101, 10.77.0.1\n",
        "  infrastructure: IKE 0000020000000000, CN=client200, ESP in UDP 4500:4501 aes128gcm16, installed 0s ago, 2 rekeys\n",
        "    certificate: issuer O=gate64 lab, CN=gate64 lab CA, serial 200, valid until 2028-01-01T00:00:00.000Z\n",
        "    in  00000200, 0 bytes, 0 packets\n",
        "    out 00000201, 0 bytes, 0 packets\n",
        "    local  2001:db8:100::/48\n",
        "    remote fd00:c1::101/128\n",
        "  intranet: IKE 0000010000000000, CN=client100 + user CN=alice, ESP in UDP 4500:4501 aes128gcm16, installed 0s ago, 0 rekeys\n",
        "2001:db8:1:5::77: iphttps, inner 2001:db8:1:5::77\n",
        "  intranet: IKE 0000030000000000, CN=client300, ESP aes128gcm16, installed 0s ago, 0 rekeys\n",
    ] {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }
}

#[test]
fn selectors_print_as_prefixes_or_ranges() {
    let range = Selector {
        start: "10.0.0.1".parse().unwrap(),
        end: "10.0.0.6".parse().unwrap(),
        protocol: 0,
        ports: 0..=65535,
    };
    assert_eq!(selector(&range), "10.0.0.1..10.0.0.6");
    assert_eq!(
        selector(&Selector::prefix("10.0.0.0/8".parse().unwrap())),
        "10.0.0.0/8"
    );
    assert_eq!(selector(&Selector::prefix("::/0".parse().unwrap())), "::/0");
}

/// The daemon's answer to `line`, asked as `gate64 status` and `gate64 disconnect` ask it
/// (the blocking client, off the runtime that serves).
async fn ask(path: &Path, line: &str) -> Vec<u8> {
    let (path, line) = (path.to_owned(), line.to_owned());
    tokio::task::spawn_blocking(move || request_line(&path, &line).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn the_socket_serves_the_snapshot_to_its_own_user() {
    let dir = std::env::temp_dir().join(format!("gate64-status-{}", std::process::id()));
    let path = dir.join("sub").join("control.sock");
    let (listener, _bound) = bind(&path).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    // A second daemon on the same socket is refused while the first serves.
    assert!(bind(&path).is_err());
    let created = Instant::now();
    let shared = shared_with_two_clients(created);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let read: Arc<dyn Fn() -> Snapshot + Send + Sync> =
        Arc::new(move || snapshot(&shared, Some(ike_sas().as_slice()), Instant::now()));
    // The disconnect handler answers what a driver would: one IKE SA for "CN=alice".
    let disconnect = Arc::new(|target: gate64_ike::responder::DisconnectTarget| {
        let hit =
            target == gate64_ike::responder::DisconnectTarget::Identity("CN=alice".to_owned());
        Some(crate::disconnect::Ended {
            ike_sas: ike_sas().into_iter().take(usize::from(hit)).collect(),
            links_closed: (hit)
                .then(|| "2001:db8:1:2::1".parse().unwrap())
                .into_iter()
                .collect(),
        })
    });
    let ha_promote = Arc::new(|| gate64_control::Promoted {
        ike_installed: 2,
        child_installed: 4,
        ..Default::default()
    });
    let ha_status = Arc::new(|| gate64_control::HaState {
        stored_ike_sas: 7,
        ..Default::default()
    });
    let handlers = ControlHandlers {
        read,
        disconnect,
        ha_promote,
        ha_status,
    };
    let task = tokio::spawn(serve(listener, handlers, stop_rx));
    let s: Snapshot = serde_json::from_slice(&ask(&path, "status").await).unwrap();
    assert_eq!(s.clients.len(), 2);
    let json: Snapshot = serde_json::from_str(&text(&s, true).unwrap()).unwrap();
    assert_eq!(json, s);
    let text = text(&s, false).unwrap();
    assert!(
        text.starts_with("gate64 2001:db8:100::1: 3 IKE SAs"),
        "{text}"
    );
    // A disconnect request gets what the handler removed; a silent peer the snapshot.
    let body = ask(&path, "disconnect identity CN=alice").await;
    let answer: gate64_control::Disconnected = serde_json::from_slice(&body).unwrap();
    assert_eq!((answer.removed.len(), answer.error), (1, None));
    assert_eq!(answer.links_closed, ["2001:db8:1:2::1"]);
    let body = ask(&path, "disconnect identity CN=bob").await;
    let answer: gate64_control::Disconnected = serde_json::from_slice(&body).unwrap();
    assert!(answer.removed.is_empty());
    let body = ask(&path, "disconnect sideways").await;
    let answer: gate64_control::Disconnected = serde_json::from_slice(&body).unwrap();
    assert!(answer.error.is_some());
    // The HA requests get their handlers' answers; an unknown one its refusal.
    let body = ask(&path, "ha promote").await;
    let promoted: gate64_control::Promoted = serde_json::from_slice(&body).unwrap();
    assert_eq!((promoted.ike_installed, promoted.child_installed), (2, 4));
    let body = ask(&path, "ha promote pid 0").await;
    let elsewhere: gate64_control::Promoted = serde_json::from_slice(&body).unwrap();
    assert!(elsewhere.error.is_some_and(|e| e.contains("not pid 0")));
    let body = ask(&path, &format!("ha promote pid {}", std::process::id())).await;
    let promoted: gate64_control::Promoted = serde_json::from_slice(&body).unwrap();
    assert_eq!((promoted.ike_installed, promoted.error), (2, None));
    let body = ask(&path, "ha status").await;
    let state: gate64_control::HaState = serde_json::from_slice(&body).unwrap();
    assert_eq!(state.stored_ike_sas, 7);
    let body = ask(&path, "ha demote").await;
    let refused: gate64_control::Promoted = serde_json::from_slice(&body).unwrap();
    assert!(refused.error.is_some_and(|e| e.contains("demote")));
    let mut silent = tokio::net::UnixStream::connect(&path).await.unwrap();
    tokio::io::AsyncWriteExt::shutdown(&mut silent)
        .await
        .unwrap();
    let mut body = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut silent, &mut body)
        .await
        .unwrap();
    assert!(serde_json::from_slice::<Snapshot>(&body).is_ok());
    stop_tx.send(true).unwrap();
    task.await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The policy a session's IKE SA is under shows on each of its child SAs, with its rate
/// limit as text; one without `rate_mbps` has no limit, and removing the policy clears both.
#[test]
fn applied_policy_and_its_limit_show_per_child_sa() {
    let created = Instant::now();
    let shared = shared_with_two_clients(created);
    let sadb = shared.sadb().unwrap();
    let cfg = gate64_config::Config::from_toml_str(
        r#"
[[policy]]
name = "slow"
prefixes = ["2001:db8:100::5/128"]
rate_mbps = 2

[[policy]]
name = "contractors"
prefixes = ["2001:db8:100::5/128"]

[teredo]
server_addresses = ["192.0.2.1", "192.0.2.2"]
[corpnet]
ipv6_prefixes = ["2001:db8:100::/48"]
address6 = "2001:db8:100::1"
"#,
    )
    .unwrap();
    let policies = crate::policy::Policies::new(&cfg);
    let of = |s: &Snapshot, spi_in: u32| {
        let sa = s
            .clients
            .iter()
            .flat_map(|c| &c.sas)
            .find(|sa| sa.spi_in == spi_in)
            .unwrap();
        (sa.policy.clone(), sa.limit.clone(), sa.filter_id.clone())
    };
    // A CoA put "slow" on the IP-HTTPS client's IKE SA, whose Access-Accept said contractors.
    assert_eq!(policies.apply(sadb, 0x300 << 32, Some("slow")), Ok(1));
    assert_eq!(
        policies.apply(sadb, 0x100 << 32, Some("contractors")),
        Ok(1)
    );
    let s = snapshot(&shared, Some(ike_sas().as_slice()), created);
    assert_eq!(
        of(&s, 0x300),
        (
            Some("slow".into()),
            Some("2 Mbit/s each way".into()),
            Some("contractors".into())
        )
    );
    assert_eq!(of(&s, 0x100), (Some("contractors".into()), None, None));
    assert_eq!(of(&s, 0x200), (None, None, None), "no policy, no limit");
    let json = serde_json::to_value(&s).unwrap();
    let sa = &json["clients"][1]["sas"][0];
    assert_eq!(sa["limit"], "2 Mbit/s each way", "{sa}");
    assert_eq!(sa["policy"], "slow", "{sa}");
    assert!(json["clients"][0]["sas"][0]["limit"].is_null(), "{json}");
    assert!(
        render(&s).contains("policy slow, limit 2 Mbit/s each way\n"),
        "{}",
        render(&s)
    );
    // Taken off again: nothing shows.
    assert_eq!(policies.apply(sadb, 0x300 << 32, None), Ok(1));
    let s = snapshot(&shared, Some(ike_sas().as_slice()), created);
    assert_eq!(of(&s, 0x300), (None, None, Some("contractors".into())));
}
