//! Default values of the optional keys, as documented in `docs/config.md`.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

/// `server.workers`: 0 means one worker per CPU core.
pub const WORKERS: usize = 0;
/// `server.tls_threads`: 0 means half the CPU cores, at least one.
pub const TLS_THREADS: usize = 0;
/// `teredo.port`: the Teredo UDP port (RFC 4380 §2.6 `Teredo_UDP_port`).
pub const TEREDO_PORT: u16 = 3544;
/// `corpnet.tun`: the name of the TUN interface towards the corporate network.
pub const TUN: &str = "gate64";
/// `corpnet.tun_napi`: off. A TUN write then forwards the packet within the worker's system
/// call, as a plain TUN does. Handing each write to a NAPI kernel thread instead costs a
/// wake-up of that thread per batch, which on the 2-core VMs measured cost more CPU than the
/// kernel's GRO in the thread saved: gate64 already writes TCP super-packets coalesced per
/// flow (docs/performance.md, "The TUN's NAPI threads").
pub const TUN_NAPI: bool = false;

/// `corpnet.mtu`, in bytes: the IPv6 minimum link MTU (RFC 8200 §5).
pub const MTU: u16 = 1280;
/// `metrics.listen`: the Prometheus exporter's address (loopback only).
pub const METRICS_LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9164));
/// `limits.rs_per_source_per_sec`: router solicitations accepted per source per second.
pub const RS_PER_SOURCE_PER_SEC: u32 = 20;
/// `limits.rs_burst`, when `rs_per_source_per_sec` is not set either. Otherwise the default
/// burst is twice the configured rate.
pub const RS_BURST: u32 = 40;
/// `limits.max_teredo_peers`: entries in the Teredo relay's peer table.
pub const MAX_TEREDO_PEERS: usize = 1_000_000;
/// `limits.relay_queue_packets`: packets queued per peer while the relay bubbles it.
pub const RELAY_QUEUE_PACKETS: usize = 8;
/// `limits.peer_idle_timeout_secs`: RFC 4380 §5.2.4 keeps a peer 30 s after the last
/// packet.
pub const PEER_IDLE_TIMEOUT_SECS: u64 = 30;
/// `limits.max_teredo_peers_per_ipv4`: peer entries per IPv4 address (one per mapping; a
/// NAT's clients share its address).
pub const MAX_TEREDO_PEERS_PER_IPV4: usize = 256;
/// `limits.teredo_relay_per_source_per_sec`: bubbles the Teredo server relays per sender
/// IPv4 address per second (the burst is twice it).
pub const TEREDO_RELAY_PER_SOURCE_PER_SEC: u32 = 10;
/// `limits.teredo_relay_per_destination_per_sec`: bubbles gate64 sends per second towards one
/// IPv4 address that is not a verified peer (the burst is twice it).
pub const TEREDO_RELAY_PER_DESTINATION_PER_SEC: u32 = 10;
/// `limits.max_tls_handshakes`: TLS handshakes in progress at the same time.
pub const MAX_TLS_HANDSHAKES: usize = 1024;
/// `limits.max_iphttps_connections`: established IP-HTTPS connections. Below the 65,536 /64s
/// of the /48 the example configuration gives `iphttps.prefix`, so that pool is never the
/// limit, and freed /64s rest in the pool's queue before reuse.
pub const MAX_IPHTTPS_CONNECTIONS: usize = 50_000;
/// `limits.tls_handshake_timeout_secs`: time allowed from TCP accept to the end of the TLS
/// handshake.
pub const TLS_HANDSHAKE_TIMEOUT_SECS: u64 = 10;
/// `iphttps.listen`: the HTTPS port on every IPv4 address.
pub const IPHTTPS_LISTEN: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 443));
/// `iphttps.path`: the URI path of the IP-HTTPS URL that Windows DirectAccess configures
/// (`https://<name>:443/IPHTTPS`).
pub const IPHTTPS_PATH: &str = "/IPHTTPS";
/// `iphttps.idle_timeout_secs`: [MS-IPHTTPS] advises against short idle timeouts, since
/// a quiet tunnel is normal.
pub const IPHTTPS_IDLE_TIMEOUT_SECS: u64 = 900;
/// `iphttps.ra_interval_secs`: seconds between unsolicited router advertisements.
pub const IPHTTPS_RA_INTERVAL_SECS: u64 = 300;
/// `iphttps.send_queue_bytes`: most bytes queued per connection towards the client (less
/// while the connection drains slowly: about 10 ms of its drain rate).
pub const IPHTTPS_SEND_QUEUE_BYTES: usize = 4 * 1024 * 1024;
/// `iphttps.max_handshakes_per_source`: connections from one source (IPv4 /32, IPv6 /64)
/// between TCP accept and link-up at a time; 1/32 of the default `limits.max_tls_handshakes`,
/// so one host never holds more than a small share of them.
pub const IPHTTPS_MAX_HANDSHAKES_PER_SOURCE: usize = 32;
/// `iphttps.max_handshakes_per_network`: connections from one network (IPv4 /24, IPv6 /48:
/// what one site or one hosting customer typically holds) between TCP accept and link-up at
/// a time; 1/8 of the default `limits.max_tls_handshakes`, so that a few hosts of one network
/// cannot take the handshake slots between them.
pub const IPHTTPS_MAX_HANDSHAKES_PER_NETWORK: usize = 128;
/// `iphttps.max_connections_per_source`: connections from one source (IPv4 /32, IPv6 /64) at
/// a time; room for a large office behind one NAT address.
pub const IPHTTPS_MAX_CONNECTIONS_PER_SOURCE: usize = 1024;
/// `iphttps.client_hello_timeout_secs`: time from TCP accept until the first byte of the TLS
/// ClientHello; a client sends it right after the TCP handshake.
pub const IPHTTPS_CLIENT_HELLO_TIMEOUT_SECS: u64 = 2;
/// `iphttps.write_timeout_secs`: time a write towards the client may make no progress before
/// the connection is closed (a client that stopped reading).
pub const IPHTTPS_WRITE_TIMEOUT_SECS: u64 = 30;
/// `iphttps.queue_budget_bytes`: all IP-HTTPS send queues together hold at most this.
pub const IPHTTPS_QUEUE_BUDGET_BYTES: usize = 256 * 1024 * 1024;
/// `log.level`.
pub const LOG_LEVEL: &str = "info";
/// `control.socket`: where `gate64 status` finds the daemon.
pub const CONTROL_SOCKET: &str = "/run/gate64/control.sock";
/// `ipsec.half_open_cookie_threshold`: half-open IKE SAs before cookies (strongSwan's
/// `cookie_threshold`).
pub const IKE_HALF_OPEN_COOKIE_THRESHOLD: usize = 30;
/// `ipsec.max_half_open_per_source`: half-open IKE SAs per source: an IPv4 address, an IPv6
/// /64, a Teredo client's NAT mapping (strongSwan's `block_threshold`).
pub const IKE_MAX_HALF_OPEN_PER_SOURCE: usize = 5;
/// `ipsec.max_half_open_bytes`: bytes all half-open IKE SAs may hold (their IKE_SA_INIT
/// messages, cached responses and IKE_AUTH fragments). A handshake holds about 2 KB while
/// half-open, so 64 MiB is ~30,000 of them at once (more than 30 s of the IKE task's whole
/// rate); a peer that sends 64 KiB messages fills it with ~500, from at least 100 sources.
pub const IKE_MAX_HALF_OPEN_BYTES: usize = 64 * 1024 * 1024;
/// `ipsec.max_ike_sas`: IKE SAs in all. An established one holds ~1.4 KB of heap (2.8 KB per
/// client with both tunnels, `crates/ike/tests/memory.rs`) plus its ESP keys in the SA
/// database. 220,000 is 100,000 clients with both tunnels and a tenth more for set-ups in
/// flight and clients that come back before their old IKE SAs are gone (at exactly 200,000 a
/// 100,000-client set-up was refused its last SAs); under ~1 GB with the child SAs.
pub const IKE_MAX_SAS: usize = 220_000;
/// `ipsec.max_ike_sas_per_identity`: a DirectAccess client holds two IKE SAs (one per
/// tunnel), three or four while rekeying them.
pub const IKE_MAX_SAS_PER_IDENTITY: usize = 4;
/// `ipsec.max_child_sas_per_ike_sa`: one child SA per IKE SA, two during a rekey; the rest
/// is room for clients that rekey early.
pub const IKE_MAX_CHILD_SAS_PER_IKE_SA: usize = 8;
/// `ipsec.auth_threads`: 0, one IKE worker thread (key exchanges, IKE_AUTH verifications) per
/// CPU gate64 may use.
pub const IKE_AUTH_THREADS: usize = 0;
/// `ipsec.ike_packets_per_source_per_sec`: IKE packets per second one source may have
/// handled. gate64's benchmark sends about 200 per second from each of its 32 source
/// addresses at 2,000 handshakes per second; a flood from one address (~50,000 per second in
/// the netns test) is cut to this, and as many again at once.
pub const IKE_PACKETS_PER_SOURCE_PER_SEC: u32 = 1_000;
/// `ipsec.child_lifetime_secs`: child SA rekey after 1 hour (strongSwan's child `rekey_time`).
pub const CHILD_LIFETIME_SECS: u64 = 3600;
/// `ipsec.dpd_secs`: an IKE SA idle for 30 s gets a liveness check (strongSwan's `dpd_delay`
/// in its DirectAccess-like examples).
pub const DPD_SECS: u64 = 30;
/// `ipsec.reauth_secs`: a client authenticates anew once a day (strongSwan's and Windows'
/// usual IKEv2 reauthentication), so a certificate that expired or was revoked without a CRL
/// reaching gate64 is looked at again within a day.
pub const REAUTH_SECS: u64 = 86_400;
/// `ipsec.ocsp_max_age_secs`: an OCSP answer without nextUpdate counts for an hour from its
/// thisUpdate.
pub const OCSP_MAX_AGE_SECS: u64 = 3600;
/// `ipsec.crl_refresh_secs`: how often the CRL files' modification times are looked at.
pub const CRL_REFRESH_SECS: u64 = 300;
