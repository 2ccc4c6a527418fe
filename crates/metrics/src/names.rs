//! Metric names and their help texts, exactly as exposed (hickory's `metrics.rs` style).
//!
//! Dashboards, alerts and the architecture's interface list rely on these names; change one
//! only together with everything that reads it. Counter names end in `_total` here, as they
//! appear on the wire; the exporter hands prometheus-client the name without the suffix,
//! because its encoders append `_total` to counters themselves.
//!
//! Label values come from the data plane (`Side::as_str`, `Direction::as_str`,
//! `DropReason::as_str`) and are all low-cardinality: never a client address, SPI or port.

/// Remote clients currently active, by transport. Gauge; label `transport` (`teredo`,
/// `iphttps`).
pub const CLIENTS: &str = "gate64_clients";
/// Help text of [`CLIENTS`]. Teredo has no disconnect: a client that left is only seen to be
/// gone when its peer entry times out, so the gauge says so.
pub const CLIENTS_HELP: &str = "Remote clients, by transport. iphttps: connections with their \
    link up. teredo: clients heard from within limits.peer_idle_timeout_secs (default 30 s); \
    Teredo has no disconnect, so a client that has gone still counts until that idle timeout \
    has passed since its last packet.";

/// Entries in the Teredo relay's peer table. Gauge; no labels.
pub const TEREDO_PEERS: &str = "gate64_teredo_peers";
/// Help text of [`TEREDO_PEERS`].
pub const TEREDO_PEERS_HELP: &str =
    "Entries in the Teredo peer table, including stale peers and peers still pending a bubble.";

/// Bytes received and sent, summed over workers. Counter; labels `side`
/// (`corpnet`, `internet`) and `direction` (`rx`, `tx`).
pub const BYTES_TOTAL: &str = "gate64_bytes_total";
/// Help text of [`BYTES_TOTAL`].
pub const BYTES_TOTAL_HELP: &str = "Bytes gate64 received (direction=rx) or sent (direction=tx) \
    on the corporate network side (side=corpnet, the TUN device) or the internet side \
    (side=internet, the client transports).";

/// Packets received and sent, summed over workers. Counter; labels `side` and `direction`
/// as [`BYTES_TOTAL`].
pub const PACKETS_TOTAL: &str = "gate64_packets_total";
/// Help text of [`PACKETS_TOTAL`].
pub const PACKETS_TOTAL_HELP: &str = "Packets gate64 received (direction=rx) or sent \
    (direction=tx) on the corporate network side (side=corpnet, the TUN device) or the \
    internet side (side=internet, the client transports).";

/// Dropped packets by reason, summed over workers. Counter; label `reason`, one series for
/// every `gate64_dataplane::Drop` reason, zero included.
pub const DROPS_TOTAL: &str = "gate64_drops_total";
/// Help text of [`DROPS_TOTAL`].
pub const DROPS_TOTAL_HELP: &str =
    "Packets gate64 dropped, by reason. Every reason is exported, including those at zero.";

/// Teredo qualifications answered, summed over workers. Counter; no labels.
pub const TEREDO_QUALIFICATIONS_TOTAL: &str = "gate64_teredo_qualifications_total";
/// Help text of [`TEREDO_QUALIFICATIONS_TOTAL`].
pub const TEREDO_QUALIFICATIONS_TOTAL_HELP: &str = "Router Advertisements sent in answer to \
    Teredo Router Solicitations, i.e. client qualifications served.";

/// IP-HTTPS connection set-ups by outcome. Counter; label `result` (`ok`, `tls_error`,
/// `timeout`, `http_error`, `busy`, `pool_exhausted`, `source_handshakes`,
/// `source_connections`, `no_client_hello`, `network_handshakes`, `reclaimed`).
pub const TLS_HANDSHAKES_TOTAL: &str = "gate64_tls_handshakes_total";
/// Help text of [`TLS_HANDSHAKES_TOTAL`].
pub const TLS_HANDSHAKES_TOTAL_HELP: &str = "IP-HTTPS connection set-ups (TLS handshake and HTTP \
    request) by outcome.";

/// IP-HTTPS connections closed because the client stopped reading. Counter; no labels.
pub const IPHTTPS_WRITE_TIMEOUTS_TOTAL: &str = "gate64_iphttps_write_timeouts_total";
/// Help text of [`IPHTTPS_WRITE_TIMEOUTS_TOTAL`].
pub const IPHTTPS_WRITE_TIMEOUTS_TOTAL_HELP: &str = "IP-HTTPS connections closed because a \
    write towards the client made no progress within iphttps.write_timeout_secs.";

/// IP-HTTPS links whose client asked (by the interface id of its first Router Solicitation)
/// for the /64 it held before. Counter; label `result`: `reclaimed` (the link moved to it),
/// `in_use` (another link held it; the link kept a fresh one).
pub const IPHTTPS_PREFIX_RECLAIMS_TOTAL: &str = "gate64_iphttps_prefix_reclaims_total";
/// Help text of [`IPHTTPS_PREFIX_RECLAIMS_TOTAL`].
pub const IPHTTPS_PREFIX_RECLAIMS_TOTAL_HELP: &str = "IP-HTTPS links given back the /64 their \
    client held before (reclaimed), or refused it because another link held it (in_use).";

/// Bytes in all IP-HTTPS send queues. Gauge; no labels.
pub const IPHTTPS_QUEUED_BYTES: &str = "gate64_iphttps_queued_bytes";
/// Help text of [`IPHTTPS_QUEUED_BYTES`].
pub const IPHTTPS_QUEUED_BYTES_HELP: &str = "Bytes waiting in all IP-HTTPS send queues \
    together, out of gate64_iphttps_queue_budget_bytes.";

/// The IP-HTTPS send queues' shared budget. Gauge; no labels.
pub const IPHTTPS_QUEUE_BUDGET_BYTES: &str = "gate64_iphttps_queue_budget_bytes";
/// Help text of [`IPHTTPS_QUEUE_BUDGET_BYTES`].
pub const IPHTTPS_QUEUE_BUDGET_BYTES_HELP: &str = "Most bytes all IP-HTTPS send queues may \
    hold together (iphttps.queue_budget_bytes).";

/// NAT64 BIB entries (mappings) by protocol. Gauge; label `proto` (`tcp`, `udp`, `icmp`).
pub const NAT64_BIB_ENTRIES: &str = "gate64_nat64_bib_entries";
/// Help text of [`NAT64_BIB_ENTRIES`].
pub const NAT64_BIB_ENTRIES_HELP: &str = "NAT64 mappings (RFC 6146 BIB entries) by protocol; each \
    holds one pool4 address and port.";

/// NAT64 sessions by protocol. Gauge; label `proto`.
pub const NAT64_SESSIONS: &str = "gate64_nat64_sessions";
/// Help text of [`NAT64_SESSIONS`].
pub const NAT64_SESSIONS_HELP: &str = "NAT64 sessions (RFC 6146) by protocol.";

/// Packets NAT64 translated. Counter; label `direction` (`v6_to_v4`, `v4_to_v6`).
pub const NAT64_TRANSLATIONS_TOTAL: &str = "gate64_nat64_translations_total";
/// Help text of [`NAT64_TRANSLATIONS_TOTAL`].
pub const NAT64_TRANSLATIONS_TOTAL_HELP: &str = "Packets NAT64 translated, by direction.";

/// pool4 transport addresses per protocol. Gauge; no labels.
pub const NAT64_POOL_CAPACITY: &str = "gate64_nat64_pool_capacity";
/// Help text of [`NAT64_POOL_CAPACITY`].
pub const NAT64_POOL_CAPACITY_HELP: &str = "pool4 transport addresses (addresses times ports) \
    each protocol can map; pool use is gate64_nat64_bib_entries / this.";

/// Allocations that found pool4 exhausted. Counter; no labels.
pub const NAT64_POOL_EXHAUSTED_TOTAL: &str = "gate64_nat64_pool_exhausted_total";
/// Help text of [`NAT64_POOL_EXHAUSTED_TOTAL`].
pub const NAT64_POOL_EXHAUSTED_TOTAL_HELP: &str =
    "New NAT64 mappings refused because pool4 had no free port.";

/// DNS64 queries by how they ended. Counter; label `result` (`synthesized`, `native`,
/// `nxdomain`, `error`, `malformed`), every value present, zero included.
pub const DNS64_QUERIES_TOTAL: &str = "gate64_dns64_queries_total";
/// Help text of [`DNS64_QUERIES_TOTAL`].
pub const DNS64_QUERIES_TOTAL_HELP: &str = "DNS64 queries by result: synthesized (AAAA made \
    from A under the NAT64 prefix, ipv4only.arpa, or PTR answered from in-addr.arpa), native \
    (upstream's NOERROR answer), nxdomain, error (SERVFAIL, every upstream failed, NOTIMP, \
    overload), malformed (FORMERR or dropped).";

/// DNS64 queries answered from the cache. Counter; no labels.
pub const DNS64_CACHE_HITS_TOTAL: &str = "gate64_dns64_cache_hits_total";
/// Help text of [`DNS64_CACHE_HITS_TOTAL`].
pub const DNS64_CACHE_HITS_TOTAL_HELP: &str =
    "DNS64 queries answered from the answer cache (also counted in gate64_dns64_queries_total).";

/// NAT64 binding log records lost because the writer fell behind. Counter; no labels.
pub const NAT64_BINDING_LOG_LOST_TOTAL: &str = "gate64_nat64_binding_log_lost_total";
/// Help text of [`NAT64_BINDING_LOG_LOST_TOTAL`].
pub const NAT64_BINDING_LOG_LOST_TOTAL_HELP: &str = "NAT64 binding log records (RFC 6888 \
    section 4) dropped because the log writer fell behind; each is a mapping an abuse request \
    could not be answered for.";

/// Session log records lost because the writer fell behind. Counter; no labels.
pub const SESSION_LOG_LOST_TOTAL: &str = "gate64_session_log_lost_total";
/// Help text of [`SESSION_LOG_LOST_TOTAL`].
pub const SESSION_LOG_LOST_TOTAL_HELP: &str = "Session log records (`[accounting] log`) dropped \
    because the log writer fell behind; each is a connect, tunnel change, disconnect or refused \
    authentication missing from the log.";

/// Refused authentications the session log left out. Counter; no labels.
pub const SESSION_LOG_REFUSALS_SUPPRESSED_TOTAL: &str =
    "gate64_session_log_refusals_suppressed_total";
/// Help text of [`SESSION_LOG_REFUSALS_SUPPRESSED_TOTAL`].
pub const SESSION_LOG_REFUSALS_SUPPRESSED_TOTAL_HELP: &str = "Refused IKE authentications \
    (auth_refused lines) the session log left out because they came faster than its rate \
    limit (a burst of 50, then 5 a second); they are still counted in gate64_ike_refused_total.";

/// Requests and connections the metrics listener turned away. Counter; label `reason`
/// (`foreign_host`, `write_timeout`).
pub const METRICS_HTTP_REJECTED_TOTAL: &str = "gate64_metrics_http_rejected_total";
/// Help text of [`METRICS_HTTP_REJECTED_TOTAL`].
pub const METRICS_HTTP_REJECTED_TOTAL_HELP: &str = "Requests and connections the metrics \
    listener turned away: foreign_host (a request whose Host is neither an IP address, \
    localhost nor a name of metrics.allowed_hosts, answered 421) or write_timeout (a \
    connection closed because its client did not read the answer in time).";

/// RADIUS Accounting-Requests by what became of them. Counter; label `result`.
pub const RADIUS_ACCOUNTING_TOTAL: &str = "gate64_radius_accounting_total";
/// Help text of [`RADIUS_ACCOUNTING_TOTAL`].
pub const RADIUS_ACCOUNTING_TOTAL_HELP: &str = "RADIUS Accounting-Requests (Start, \
    Interim-Update, Stop): acked (a server answered), timeout (no server of \
    [[accounting.radius]] answered after the retransmissions) or queue_full (dropped before \
    sending: the sender was behind).";

/// RADIUS requests sent again. Counter; no labels.
pub const RADIUS_RETRANSMITS_TOTAL: &str = "gate64_radius_retransmits_total";

/// Help text of [`RADIUS_RETRANSMITS_TOTAL`].
pub const RADIUS_RETRANSMITS_TOTAL_HELP: &str = "RADIUS Accounting-Requests sent again \
    because no answer came within 2 seconds.";

/// RADIUS Dynamic Authorization requests (RFC 5176) by outcome. Counter; label `code`
/// (`disconnect`, `coa`, `other`: not a request gate64 knows), label `result`: `ack`, a NAK
/// by its Error-Cause (`nak_session_not_found`, `nak_unsupported_attribute`,
/// `nak_missing_attribute`, `nak_invalid_request`, `nak_invalid_attribute_value`,
/// `nak_resources_unavailable`), or why it was dropped unanswered (`unknown_client`,
/// `malformed`, `bad_code`, `bad_authenticator`, `bad_message_authenticator`, `stale`:
/// Event-Timestamp outside the window, `replay`, `busy`: the replay cache is full).
pub const RADIUS_DAE_REQUESTS_TOTAL: &str = "gate64_radius_dae_requests_total";
/// Help text of [`RADIUS_DAE_REQUESTS_TOTAL`].
pub const RADIUS_DAE_REQUESTS_TOTAL_HELP: &str = "RADIUS Disconnect-Requests and \
    CoA-Requests received, by code and by result (ack, nak_* by Error-Cause, or why dropped).";

/// HA state sync messages (`[ha]`). Counter; labels `direction` (`out`: sent, send_failed,
/// tap_full; `in`: stored (messages taken, updates included; [`HA_STORE_RECORDS`] counts
/// distinct records), from_elsewhere, undecodable, store_full and gate64-ha's refusals
/// malformed, too_long, unauthenticated, replayed, stale_epoch; `takeover`: installed,
/// install_failed, and for the on-demand takeover on_demand (IKE SAs taken over),
/// on_demand_peer_alive, on_demand_limited, on_demand_refused (requests), on_demand_esp (IKE
/// SAs ESP brought in, also in on_demand), on_demand_esp_peer_alive, on_demand_esp_limited,
/// on_demand_esp_refused (ESP packets)) and `result`.
pub const HA_SYNC_TOTAL: &str = "gate64_ha_sync_total";
/// Help text of [`HA_SYNC_TOTAL`].
pub const HA_SYNC_TOTAL_HELP: &str = "HA state sync messages sent and received, and SAs \
    installed at a takeover, by direction and result.";

/// The distinct records the HA standby's store holds for a takeover (`[ha]`): each IKE SA
/// and child SA of the peer counts once however often its record came. Gauge; label `kind`
/// (`ike`, `child`).
pub const HA_STORE_RECORDS: &str = "gate64_ha_store_records";
/// Help text of [`HA_STORE_RECORDS`].
pub const HA_STORE_RECORDS_HELP: &str = "Distinct IKE SA and child SA records the HA store \
    holds for a takeover, by kind.";

/// Configuration reloads (SIGHUP) by outcome. Counter; label `result` (`ok`, `refused`).
pub const CONFIG_RELOADS_TOTAL: &str = "gate64_config_reloads_total";
/// Help text of [`CONFIG_RELOADS_TOTAL`].
pub const CONFIG_RELOADS_TOTAL_HELP: &str = "Configuration reloads (SIGHUP): ok (applied) or \
    refused (invalid, or a key that needs a restart changed; the old configuration stays).";

/// Per-worker counter sets summed into the counters above. Gauge; no labels.
pub const WORKERS: &str = "gate64_workers";
/// Help text of [`WORKERS`].
pub const WORKERS_HELP: &str = "Per-worker counter sets that the counters sum over (data-plane \
    workers and transport tasks registered with the exporter).";

/// The running build. Gauge, always 1; label `version`.
pub const BUILD_INFO: &str = "gate64_build_info";
/// Help text of [`BUILD_INFO`].
pub const BUILD_INFO_HELP: &str = "Always 1; the version label names the running gate64 build.";

/// GRE tunnels by state. Gauge; label `state` (`up`: keepalives answered or off; `down`).
pub const GRE_TUNNELS: &str = "gate64_gre_tunnels";
/// Help text of [`GRE_TUNNELS`].
pub const GRE_TUNNELS_HELP: &str = "GRE tunnels by state: up (keepalives answered, or \
    keepalives off) or down (keepalive_retries keepalives unanswered).";

/// Inner bytes through GRE tunnels. Counter; labels `tunnel` (the configured name) and
/// `direction` (`rx` from the peer, `tx` to it).
pub const GRE_BYTES_TOTAL: &str = "gate64_gre_bytes_total";
/// Help text of [`GRE_BYTES_TOTAL`].
pub const GRE_BYTES_TOTAL_HELP: &str = "Bytes of inner packets gate64 decapsulated from a GRE \
    tunnel (direction=rx) or encapsulated into it (direction=tx), by tunnel name.";

/// Inner packets through GRE tunnels. Counter; labels as [`GRE_BYTES_TOTAL`].
pub const GRE_PACKETS_TOTAL: &str = "gate64_gre_packets_total";
/// Help text of [`GRE_PACKETS_TOTAL`].
pub const GRE_PACKETS_TOTAL_HELP: &str = "Inner packets gate64 decapsulated from a GRE tunnel \
    (direction=rx) or encapsulated into it (direction=tx), by tunnel name.";
/// Inner bytes of ESP, summed over workers. Counter; label `direction`.
pub const IPSEC_BYTES_TOTAL: &str = "gate64_ipsec_bytes_total";
/// Help text of [`IPSEC_BYTES_TOTAL`].
pub const IPSEC_BYTES_TOTAL_HELP: &str = "Bytes of the inner packets of ESP gate64 opened from \
    clients (direction=rx) or sealed to them (direction=tx): the traffic inside the tunnels, as \
    the session log counts it per session.";

/// ESP packets, summed over workers. Counter; label `direction` as [`IPSEC_BYTES_TOTAL`].
pub const IPSEC_PACKETS_TOTAL: &str = "gate64_ipsec_packets_total";
/// Help text of [`IPSEC_PACKETS_TOTAL`].
pub const IPSEC_PACKETS_TOTAL_HELP: &str = "ESP packets gate64 opened from clients \
    (direction=rx) or sealed to them (direction=tx).";

/// IKE SAs established (main-mode SAs in DirectAccess' terms; about two per client, one per
/// tunnel). Gauge; no labels.
pub const IPSEC_MMSA: &str = "gate64_ipsec_mmsa";
/// Help text of [`IPSEC_MMSA`].
pub const IPSEC_MMSA_HELP: &str = "IKE SAs established (MMSA): about two per connected client, \
    one per tunnel (infrastructure and intranet).";

/// Child SAs installed (quick-mode SAs). Gauge; no labels.
pub const IPSEC_QMSA: &str = "gate64_ipsec_qmsa";
/// Help text of [`IPSEC_QMSA`].
pub const IPSEC_QMSA_HELP: &str = "Child SAs installed (QMSA), including those being replaced \
    by a rekey.";

/// IKE negotiations by outcome. Counter; label `result` (`ok`, `auth_failed`, `no_proposal`,
/// `ts_unacceptable`, `timeout`, `error`).
pub const IKE_NEGOTIATIONS_TOTAL: &str = "gate64_ike_negotiations_total";
/// Help text of [`IKE_NEGOTIATIONS_TOTAL`].
pub const IKE_NEGOTIATIONS_TOTAL_HELP: &str = "IKE negotiations (IKE_SA_INIT with IKE_AUTH, \
    or CREATE_CHILD_SA) by outcome.";

/// IKE SAs gate64 ended itself, with their child SAs. Counter; label `reason` (`admin`:
/// `gate64 disconnect`; `revoked`: a CRL lists its certificate; `replaced`: a new IKE SA of
/// the same identity and tunnel took its place; `reauth`: its client did not authenticate
/// anew within `reauth_secs`; `expired`: its certificate passed its notAfter; `radius`: a
/// RADIUS Disconnect-Request; `session_timeout`: the end a RADIUS CoA-Request's
/// Session-Timeout set).
pub const IPSEC_DISCONNECTS_TOTAL: &str = "gate64_ipsec_disconnects_total";
/// Help text of [`IPSEC_DISCONNECTS_TOTAL`].
pub const IPSEC_DISCONNECTS_TOTAL_HELP: &str = "IKE SAs (with their child SAs) gate64 ended \
    itself, by reason.";

/// Rekeys by what was rekeyed. Counter; label `kind` (`ike`, `child`).
pub const IPSEC_REKEYS_TOTAL: &str = "gate64_ipsec_rekeys_total";
/// Help text of [`IPSEC_REKEYS_TOTAL`].
pub const IPSEC_REKEYS_TOTAL_HELP: &str = "IKE SAs (kind=ike) and child SAs (kind=child) \
    rekeyed.";

/// ESP packets whose integrity check failed. Counter; no labels.
pub const ESP_AUTH_FAILURES_TOTAL: &str = "gate64_esp_auth_failures_total";
/// Help text of [`ESP_AUTH_FAILURES_TOTAL`].
pub const ESP_AUTH_FAILURES_TOTAL_HELP: &str = "ESP packets whose integrity check (ICV) \
    failed; also counted as gate64_drops_total{reason=\"esp_auth\"}.";

/// ESP packets refused by the anti-replay window. Counter; no labels.
pub const ESP_REPLAY_DROPS_TOTAL: &str = "gate64_esp_replay_drops_total";
/// Help text of [`ESP_REPLAY_DROPS_TOTAL`].
pub const ESP_REPLAY_DROPS_TOTAL_HELP: &str = "ESP packets refused as replayed or too old \
    (RFC 4303 anti-replay); also counted as gate64_drops_total{reason=\"esp_replay\"}.";

/// How long IKE negotiations took. Histogram, seconds; no labels.
pub const IKE_NEGOTIATION_DURATION_SECONDS: &str = "gate64_ike_negotiation_duration_seconds";
/// Help text of [`IKE_NEGOTIATION_DURATION_SECONDS`].
pub const IKE_NEGOTIATION_DURATION_SECONDS_HELP: &str = "Time from a peer's first message to \
    the negotiation's end, whatever its outcome.";

/// IKE datagrams the IKE driver shed before the responder saw them, or IKE_AUTH requests
/// whose verification (IKE_SA_INIT requests whose key exchange) it had no room for. Counter;
/// label `reason` (`source_rate`, `batch_share`, `auth_queue_source`, `auth_queue_full`,
/// `init_queue_full`).
pub const IKE_SHED_TOTAL: &str = "gate64_ike_shed_total";
/// Help text of [`IKE_SHED_TOTAL`].
pub const IKE_SHED_TOTAL_HELP: &str = "IKE datagrams on UDP 500/4500 dropped unread by the \
    responder: their source address was over ipsec.ike_packets_per_source_per_sec \
    (reason=source_rate), or already had its share of a backlogged batch (reason=batch_share); \
    and IKE_AUTH requests dropped before verification: their source already had its share of \
    verifications in flight (reason=auth_queue_source), or the verification threads' queue was \
    full (reason=auth_queue_full); and IKE_SA_INIT requests dropped before their key exchange: \
    the worker threads' queue of key exchanges was full (reason=init_queue_full).";

/// CRLs in force whose nextUpdate has passed (their CA is late with a new one). Gauge;
/// label `crls`: `ipsec` (`ipsec.crls`, checked by IKE) or `iphttps` (`iphttps.client_crls`,
/// checked by the IP-HTTPS listener's TLS handshake).
pub const IPSEC_CRLS_EXPIRED: &str = "gate64_ipsec_crls_expired";
/// Help text of [`IPSEC_CRLS_EXPIRED`].
pub const IPSEC_CRLS_EXPIRED_HELP: &str = "CRLs in force whose nextUpdate has passed: their CA \
    has not published a newer one (ipsec.crl_expired says whether they still count); crls is \
    ipsec (ipsec.crls, IKE) or iphttps (iphttps.client_crls, the IP-HTTPS TLS handshake).";
/// The earliest nextUpdate among the CRLs of `ipsec.crls` in force, seconds since the epoch
/// (0 without any). Gauge; no labels.
pub const IPSEC_CRL_NEXT_UPDATE: &str = "gate64_ipsec_crl_next_update_timestamp_seconds";
/// Help text of [`IPSEC_CRL_NEXT_UPDATE`].
pub const IPSEC_CRL_NEXT_UPDATE_HELP: &str = "The earliest nextUpdate among the CRLs of \
    ipsec.crls in force, seconds since the epoch (0 without any): alert before it passes.";

/// OCSP lookups of client certificates by outcome. Counter; label `result` (`good`,
/// `revoked`, `unknown`, `unavailable`, `cached`).
pub const IKE_OCSP_TOTAL: &str = "gate64_ike_ocsp_total";
/// Help text of [`IKE_OCSP_TOTAL`].
pub const IKE_OCSP_TOTAL_HELP: &str = "OCSP lookups of client certificates (ipsec.ocsp) by \
    outcome: the responder's answer (good, revoked, unknown), no usable answer (unavailable: \
    unreachable, an HTTP error, or an answer that did not verify), or the cache's (cached).";

/// Client certificate chains the IKE responder's cache of verified chains holds now (both
/// authentication rounds' CAs, at most 4,096 each). Gauge; no labels.
pub const IKE_CHAIN_CACHE_ENTRIES: &str = "gate64_ike_chain_cache_entries";
/// Help text of [`IKE_CHAIN_CACHE_ENTRIES`].
pub const IKE_CHAIN_CACHE_ENTRIES_HELP: &str = "Client certificate chains held by the IKE \
    responder's cache of verified chains (at most 4096 for ipsec.ca and 4096 for \
    ipsec.user_ca); a reload or a new CRL starts the cache empty.";
/// Lookups of client chains in that cache and chains it dropped, by result. Counter; label
/// `result`: `hit`, `miss`, `evicted`. Counted since gate64 started, across reloads.
pub const IKE_CHAIN_CACHE_TOTAL: &str = "gate64_ike_chain_cache_total";
/// Help text of [`IKE_CHAIN_CACHE_TOTAL`].
pub const IKE_CHAIN_CACHE_TOTAL_HELP: &str = "The IKE responder's cache of verified client \
    certificate chains, across reloads: lookups that found the chain (hit: no path building \
    or CA signature checks; validity and CRLs are still checked), lookups that did not \
    (miss: verified in full), and chains dropped as the oldest of a full cache (evicted).";

/// IKE requests the responder refused, by reason. Counter; label `reason`, the responder's
/// refusal (`malformed`, `integrity`, `cookie_required`, `half_open_cap`, `half_open_host_cap`,
/// `half_open_bytes`, `ike_sa_cap`, `identity_cap`, `duplicate_identity`, `same_tunnel`,
/// `child_sa_cap`,
/// `too_many_certs`, `chain_not_linear`, `retransmit_elsewhere`, `late_response`, `auth_failed`,
/// ...); a reason appears once it has happened.
pub const IKE_REFUSED_TOTAL: &str = "gate64_ike_refused_total";
/// Help text of [`IKE_REFUSED_TOTAL`].
pub const IKE_REFUSED_TOTAL_HELP: &str = "IKE requests the responder refused after reading \
    them, by reason: a cap on IKE state (half_open_cap, half_open_bytes, ike_sa_cap, \
    identity_cap, child_sa_cap), a certificate chain refused before path building \
    (too_many_certs, chain_not_linear), a duplicate from another address than the original \
    (retransmit_elsewhere), a second answer to a liveness check already answered \
    (late_response), or a protocol refusal.";

/// Half-open IKE SAs (IKE_SA_INIT answered, IKE_AUTH not yet). Gauge; no labels.
pub const IKE_HALF_OPEN: &str = "gate64_ike_half_open";
/// Help text of [`IKE_HALF_OPEN`].
pub const IKE_HALF_OPEN_HELP: &str = "Half-open IKE SAs: IKE_SA_INIT answered, IKE_AUTH not \
    completed; above ipsec.half_open_cookie_threshold new peers get a cookie.";

/// IKE_SA_INIT requests answered with a cookie. Counter; no labels.
pub const IKE_COOKIES_SENT_TOTAL: &str = "gate64_ike_cookies_sent_total";
/// Help text of [`IKE_COOKIES_SENT_TOTAL`].
pub const IKE_COOKIES_SENT_TOTAL_HELP: &str = "IKE_SA_INIT requests answered with a cookie \
    (RFC 7296 section 2.6) instead of state.";
/// Native clients' MOBIKE address updates (RFC 4555 UPDATE_SA_ADDRESSES), by outcome.
/// Counter; label `result`: `moved`, `unchanged`, `check_failed`, `malformed`, `nat_refused`.
pub const IKE_MOBIKE_UPDATES_TOTAL: &str = "gate64_ike_mobike_updates_total";
/// Unprotected Quick Crash Detection answers (RFC 6290), by result.
pub const IKE_QCD_TOTAL: &str = "gate64_ike_qcd_total";
/// Help text of [`IKE_QCD_TOTAL`].
pub const IKE_QCD_TOTAL_HELP: &str = "Requests for IKE SAs this node does not have (after a \
    restart or a failover) answered with an unprotected INVALID_IKE_SPI and the Quick Crash \
    Detection token of RFC 6290 ([ipsec] qcd_secret_file), by result: sent, or capped (not \
    sent: over the per-source or total rate, or the request was shorter than the answer).";
/// Help text of [`IKE_MOBIKE_UPDATES_TOTAL`].
pub const IKE_MOBIKE_UPDATES_TOTAL_HELP: &str = "MOBIKE UPDATE_SA_ADDRESSES requests of \
    native IKEv2 clients (RFC 4555), by outcome: moved (the return-routability check at the \
    new address succeeded and the IKE and child SAs moved), unchanged (from the current \
    address), check_failed (the COOKIE2 check went unanswered or wrong; the SAs stayed), \
    malformed (notifies of wrong lengths, refused), nat_refused (NO_NATS_ALLOWED with a NAT \
    found).";
/// NAT keepalives read on the IKE driver's 4500 sockets.
pub const IKE_KEEPALIVES_TOTAL: &str = "gate64_ike_keepalives_total";
/// Help text of [`IKE_KEEPALIVES_TOTAL`].
pub const IKE_KEEPALIVES_TOTAL_HELP: &str = "NAT keepalives (the one byte 0xFF, RFC 3948 \
    section 2.3) read on UDP 4500 of the IPsec endpoint and of ipsec.listen, consumed.";
/// Datagrams the kernel dropped on the IKE driver's sockets because a receive buffer was full.
pub const IKE_SOCKET_DROPS_TOTAL: &str = "gate64_ike_socket_drops_total";
/// Help text of [`IKE_SOCKET_DROPS_TOTAL`].
pub const IKE_SOCKET_DROPS_TOTAL_HELP: &str = "Datagrams the kernel dropped on the IKE \
    sockets (UDP 500 and 4500) before gate64 read them, because the receive buffer was full: \
    the IKE responder is overloaded.";
/// Liveness checks given extra retransmissions because IKE input was being dropped.
pub const IKE_LIVENESS_EXTENDED_TOTAL: &str = "gate64_ike_liveness_extended_total";
/// Help text of [`IKE_LIVENESS_EXTENDED_TOTAL`].
pub const IKE_LIVENESS_EXTENDED_TOTAL_HELP: &str = "Retransmissions of unanswered liveness \
    checks past the usual 3 (at most 3 more per check) because the IKE sockets dropped \
    datagrams while the check was outstanding: its answer may have been among them.";
/// RFC 6311 Message ID synchronization of IKE SAs a takeover installed (`[ha]`), by `result`:
/// synced (the client answered with the nonce and both sides took the larger IDs),
/// unsupported (the client never announced support: the synced IDs stay), failed (no
/// answer after the retransmissions, or a wrong one: the synced IDs stay).
pub const HA_MID_SYNC_TOTAL: &str = "gate64_ha_mid_sync_total";
/// Help text of [`HA_MID_SYNC_TOTAL`].
pub const HA_MID_SYNC_TOTAL_HELP: &str = "RFC 6311 Message ID syncs with the clients of IKE \
    SAs taken over from the HA peer, by result (synced, unsupported, failed).";
/// Liveness checks put off to a later slice of time by the cap on checks per second.
pub const IKE_LIVENESS_DEFERRED_TOTAL: &str = "gate64_ike_liveness_deferred_total";
/// Help text of [`IKE_LIVENESS_DEFERRED_TOTAL`].
pub const IKE_LIVENESS_DEFERRED_TOTAL_HELP: &str = "Liveness checks put off to a later \
    tenth of a second because the current one had started its share (twice the IKE SAs' \
    steady-state rate, 100 to 10,000 a second): checks that came due together. A check put \
    off twice counts twice.";

/// Every metric above as `(name, help)`, in exposition order.
pub const ALL: &[(&str, &str)] = &[
    (CLIENTS, CLIENTS_HELP),
    (TEREDO_PEERS, TEREDO_PEERS_HELP),
    (BYTES_TOTAL, BYTES_TOTAL_HELP),
    (PACKETS_TOTAL, PACKETS_TOTAL_HELP),
    (DROPS_TOTAL, DROPS_TOTAL_HELP),
    (
        TEREDO_QUALIFICATIONS_TOTAL,
        TEREDO_QUALIFICATIONS_TOTAL_HELP,
    ),
    (TLS_HANDSHAKES_TOTAL, TLS_HANDSHAKES_TOTAL_HELP),
    (
        IPHTTPS_WRITE_TIMEOUTS_TOTAL,
        IPHTTPS_WRITE_TIMEOUTS_TOTAL_HELP,
    ),
    (
        IPHTTPS_PREFIX_RECLAIMS_TOTAL,
        IPHTTPS_PREFIX_RECLAIMS_TOTAL_HELP,
    ),
    (IPHTTPS_QUEUED_BYTES, IPHTTPS_QUEUED_BYTES_HELP),
    (IPHTTPS_QUEUE_BUDGET_BYTES, IPHTTPS_QUEUE_BUDGET_BYTES_HELP),
    (NAT64_BIB_ENTRIES, NAT64_BIB_ENTRIES_HELP),
    (NAT64_SESSIONS, NAT64_SESSIONS_HELP),
    (NAT64_TRANSLATIONS_TOTAL, NAT64_TRANSLATIONS_TOTAL_HELP),
    (NAT64_POOL_CAPACITY, NAT64_POOL_CAPACITY_HELP),
    (NAT64_POOL_EXHAUSTED_TOTAL, NAT64_POOL_EXHAUSTED_TOTAL_HELP),
    (DNS64_QUERIES_TOTAL, DNS64_QUERIES_TOTAL_HELP),
    (DNS64_CACHE_HITS_TOTAL, DNS64_CACHE_HITS_TOTAL_HELP),
    (
        NAT64_BINDING_LOG_LOST_TOTAL,
        NAT64_BINDING_LOG_LOST_TOTAL_HELP,
    ),
    (SESSION_LOG_LOST_TOTAL, SESSION_LOG_LOST_TOTAL_HELP),
    (
        SESSION_LOG_REFUSALS_SUPPRESSED_TOTAL,
        SESSION_LOG_REFUSALS_SUPPRESSED_TOTAL_HELP,
    ),
    (
        METRICS_HTTP_REJECTED_TOTAL,
        METRICS_HTTP_REJECTED_TOTAL_HELP,
    ),
    (IPSEC_BYTES_TOTAL, IPSEC_BYTES_TOTAL_HELP),
    (RADIUS_ACCOUNTING_TOTAL, RADIUS_ACCOUNTING_TOTAL_HELP),
    (RADIUS_RETRANSMITS_TOTAL, RADIUS_RETRANSMITS_TOTAL_HELP),
    (RADIUS_DAE_REQUESTS_TOTAL, RADIUS_DAE_REQUESTS_TOTAL_HELP),
    (HA_SYNC_TOTAL, HA_SYNC_TOTAL_HELP),
    (HA_MID_SYNC_TOTAL, HA_MID_SYNC_TOTAL_HELP),
    (HA_STORE_RECORDS, HA_STORE_RECORDS_HELP),
    (IPSEC_PACKETS_TOTAL, IPSEC_PACKETS_TOTAL_HELP),
    (CONFIG_RELOADS_TOTAL, CONFIG_RELOADS_TOTAL_HELP),
    (GRE_TUNNELS, GRE_TUNNELS_HELP),
    (GRE_BYTES_TOTAL, GRE_BYTES_TOTAL_HELP),
    (GRE_PACKETS_TOTAL, GRE_PACKETS_TOTAL_HELP),
    (IPSEC_MMSA, IPSEC_MMSA_HELP),
    (IPSEC_QMSA, IPSEC_QMSA_HELP),
    (IKE_NEGOTIATIONS_TOTAL, IKE_NEGOTIATIONS_TOTAL_HELP),
    (IPSEC_REKEYS_TOTAL, IPSEC_REKEYS_TOTAL_HELP),
    (IPSEC_DISCONNECTS_TOTAL, IPSEC_DISCONNECTS_TOTAL_HELP),
    (ESP_AUTH_FAILURES_TOTAL, ESP_AUTH_FAILURES_TOTAL_HELP),
    (ESP_REPLAY_DROPS_TOTAL, ESP_REPLAY_DROPS_TOTAL_HELP),
    (
        IKE_NEGOTIATION_DURATION_SECONDS,
        IKE_NEGOTIATION_DURATION_SECONDS_HELP,
    ),
    (IKE_HALF_OPEN, IKE_HALF_OPEN_HELP),
    (IKE_COOKIES_SENT_TOTAL, IKE_COOKIES_SENT_TOTAL_HELP),
    (IKE_MOBIKE_UPDATES_TOTAL, IKE_MOBIKE_UPDATES_TOTAL_HELP),
    (IKE_QCD_TOTAL, IKE_QCD_TOTAL_HELP),
    (IKE_KEEPALIVES_TOTAL, IKE_KEEPALIVES_TOTAL_HELP),
    (IKE_SOCKET_DROPS_TOTAL, IKE_SOCKET_DROPS_TOTAL_HELP),
    (
        IKE_LIVENESS_EXTENDED_TOTAL,
        IKE_LIVENESS_EXTENDED_TOTAL_HELP,
    ),
    (
        IKE_LIVENESS_DEFERRED_TOTAL,
        IKE_LIVENESS_DEFERRED_TOTAL_HELP,
    ),
    (IKE_SHED_TOTAL, IKE_SHED_TOTAL_HELP),
    (IKE_OCSP_TOTAL, IKE_OCSP_TOTAL_HELP),
    (IKE_CHAIN_CACHE_ENTRIES, IKE_CHAIN_CACHE_ENTRIES_HELP),
    (IKE_CHAIN_CACHE_TOTAL, IKE_CHAIN_CACHE_TOTAL_HELP),
    (IPSEC_CRLS_EXPIRED, IPSEC_CRLS_EXPIRED_HELP),
    (IPSEC_CRL_NEXT_UPDATE, IPSEC_CRL_NEXT_UPDATE_HELP),
    (IKE_REFUSED_TOTAL, IKE_REFUSED_TOTAL_HELP),
    (WORKERS, WORKERS_HELP),
    (BUILD_INFO, BUILD_INFO_HELP),
];
