//! Why a packet was dropped. Every drop becomes a `gate64_drops_total{reason}` label and a
//! `debug!` field, so any loss is explainable from the counters alone.

macro_rules! drops {
    ($($(#[doc = $doc:literal])* $variant:ident => $label:literal,)*) => {
        /// Why a packet was dropped.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum DropReason {
            $($(#[doc = $doc])* $variant,)*
        }

        impl DropReason {
            /// Every reason, in label order.
            pub const ALL: &'static [DropReason] = &[$(DropReason::$variant,)*];
            /// Number of reasons.
            pub const COUNT: usize = DropReason::ALL.len();

            /// The `reason` label value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(DropReason::$variant => $label,)*
                }
            }
        }
    };
}

drops! {
    /// Shorter than its headers or length fields announce.
    Truncated => "truncated",
    /// A field holds a forbidden value (bad Teredo header, IPv6 version not 6, ...).
    Malformed => "malformed",
    /// Well-formed but unsupported (jumbogram).
    Unsupported => "unsupported",
    /// RFC 4380 §5.3.1: the outer IPv4 source is not global unicast.
    NonGlobalSource => "non_global_source",
    /// The datagram came from, or would go to, one of gate64's own Teredo addresses (loop
    /// guard).
    LoopGuard => "loop_guard",
    /// The inner IPv6 source is not the Teredo address of the UDP source it came from.
    SpoofedSource => "spoofed_source",
    /// A Teredo client of another server; gate64 relays only for its own clients.
    ForeignClient => "foreign_client",
    /// Router Solicitations from this source exceeded `[limits]`.
    RsRateLimited => "rs_rate_limited",
    /// ICMPv6 to gate64's link-local side that it does not answer (bad checksum, not an RS).
    UnhandledIcmpv6 => "unhandled_icmpv6",
    /// Destination is link-local, multicast, loopback or unspecified: never forwarded.
    BadDestination => "bad_destination",
    /// Destination is neither a corporate prefix, gate64 itself, nor one of its clients.
    NoRoute => "no_route",
    /// The policy step refused the packet: no IPsec SA covers it (and `[ipsec] require` is
    /// on).
    NoSa => "no_sa",
    /// A packet towards a client (from the corporate network, NAT64 or another client) that
    /// no outbound child SA covers while `[ipsec] require` is on: only IKE from the IPsec
    /// endpoint, ICMPv6 errors, neighbour discovery and gate64's own echo replies reach a
    /// client outside a child SA.
    NoSaToClient => "no_sa_to_client",
    /// A client's packet to gate64 itself that is not what a client needs there (neighbour
    /// discovery, ICMPv6 echo, DNS64): another port on one of gate64's addresses, or Pref64
    /// + one of gate64's own IPv4 addresses.
    ToSelf => "to_self",
    /// A Teredo destination whose embedded IPv4 address is not global unicast.
    NonGlobalMapping => "non_global_mapping",
    /// The per-peer relay queue (waiting for a bubble answer) is full.
    RelayQueueFull => "relay_queue_full",
    /// Queued for a client that never answered its bubbles (RFC 4380 §5.4.1).
    BubbleTimeout => "bubble_timeout",
    /// The Teredo peer table reached `[limits] max_teredo_peers` and the peer's shard holds
    /// nothing a newcomer may replace (an unverified newcomer never replaces a verified peer).
    PeerTableFull => "peer_table_full",
    /// The kernel refused to send the packet (socket or TUN error).
    TxError => "tx_error",
    /// The IP-HTTPS connection's bounded send queue is full (the client reads too slowly).
    IphttpsQueueFull => "iphttps_queue_full",
    /// Bytes in an IP-HTTPS stream that are not an IPv6 packet (the session is closed).
    NotIpv6 => "not_ipv6",
    /// Hop limit or TTL ran out at gate64 (an ICMP Time Exceeded goes back).
    TtlExceeded => "ttl_exceeded",
    /// Larger than the next link's MTU (an ICMP Packet Too Big / Fragmentation Needed goes
    /// back).
    PacketTooBig => "packet_too_big",
    /// NAT64: an IPv4 packet for a pool4 address and port no client holds, or that filtering
    /// refuses (RFC 6146 §3.5.1.1; ICMPv4 port unreachable goes back).
    Nat64NoBinding => "nat64_no_binding",
    /// NAT64: a TCP segment that neither opens nor belongs to a session (RFC 6146 §3.5.2.2).
    Nat64NoSession => "nat64_no_session",
    /// NAT64: no free IPv4 port in pool4 (RFC 6146 §3.5.1.1; ICMPv6 address unreachable goes
    /// back).
    Nat64PoolExhausted => "nat64_pool_exhausted",
    /// NAT64: `[nat64] max_sessions` reached.
    Nat64SessionLimit => "nat64_session_limit",
    /// NAT64: the client holds `[nat64] max_sessions_per_client` sessions (RFC 6888 REQ-4;
    /// ICMPv6 administratively prohibited goes back).
    Nat64ClientSessionLimit => "nat64_client_session_limit",
    /// NAT64: the client holds `[nat64] max_ports_per_client` pool4 ports of the protocol, or
    /// its share of pool4 (RFC 6888 REQ-3; ICMPv6 administratively prohibited goes back).
    Nat64ClientPortLimit => "nat64_client_port_limit",
    /// NAT64: the IPv4 address inside Pref64 may not be translated to (loopback, multicast,
    /// broadcast, or private under the Well-Known Prefix).
    Nat64BadAddress => "nat64_bad_address",
    /// NAT64: a non-first fragment (gate64 does not reassemble yet).
    Nat64Fragment => "nat64_fragment",
    /// NAT64: no IPv4 equivalent or not handled (other protocols, ICMP types RFC 7915 drops,
    /// bad ICMP error checksums, packets that would need IPv6 fragmentation).
    Nat64Untranslatable => "nat64_untranslatable",
    /// A bubble to relay whose trailing bytes are not well-formed RFC 6081 trailers.
    TeredoBadTrailer => "teredo_bad_trailer",
    /// Something the Teredo server role does not relay between clients (only bubbles; data
    /// takes the relay, to verified peers only).
    TeredoNotRelayable => "teredo_not_relayable",
    /// Bubbles relayed on behalf of this IPv4 source exceeded
    /// `[limits] teredo_relay_per_source_per_sec`.
    RelaySourceRateLimited => "teredo_relay_source_rate_limited",
    /// Bubbles towards this IPv4 address (not a verified peer) exceeded
    /// `[limits] teredo_relay_per_destination_per_sec`.
    RelayDestinationRateLimited => "teredo_relay_destination_rate_limited",
    /// The Teredo peer's IPv4 address holds `[limits] max_teredo_peers_per_ipv4` verified
    /// entries; an unverified newcomer does not replace them.
    PeerIpv4Full => "peer_ipv4_full",
    /// GRE: a known peer sent a packet without the tunnel's RFC 2890 key or with
    /// another one.
    GreBadKey => "gre_bad_key",
    /// GRE: no tunnel between these outer addresses.
    GreUnknownPeer => "gre_unknown_peer",
    /// GRE: sequence number not after the last one accepted (RFC 2890 §2.2).
    GreSequence => "gre_sequence",
    /// GRE: the RFC 2784 checksum does not verify.
    GreChecksum => "gre_checksum",
    /// GRE: the inner packet's TTL or hop limit is 0 or 1.
    GreTtl => "gre_ttl",
    /// GRE: truncated, a version other than 0, RFC 1701 bits set, or an inner packet that is
    /// not what the Protocol Type says.
    GreMalformed => "gre_malformed",
    /// GRE: a packet read from a tenant's TUN that no tunnel of the tenant routes.
    GreNoRoute => "gre_no_route",
    /// GRE: an inner packet that cannot be encapsulated (no headroom, too long).
    GreNoRoom => "gre_no_room",
    /// ESP whose integrity check failed (RFC 4303 §3.4.4: wrong key, altered, forged).
    EspAuth => "esp_auth",
    /// ESP with a sequence number already seen or left of the anti-replay window (RFC 4303
    /// §3.4.3).
    EspReplay => "esp_replay",
    /// An opened ESP packet whose inner addresses lie outside its child SA's traffic selectors
    /// (RFC 4301 §5.2).
    EspSelector => "esp_selector",
    /// A packet of a child SA whose session has a policy (`[[policy]]`, named by RADIUS's
    /// Filter-Id), from the client to an address the policy does not reach, or towards the
    /// client from one: inside the tunnel's selectors, outside the policy's prefixes.
    Policy => "policy",
    /// A packet of a child SA whose session's policy limits its rate (`rate_mbps`), over
    /// that rate in its direction.
    RateLimit => "rate_limit",
    /// ESP with an SPI no child SA of gate64's has (RFC 4303 §3.4.2).
    EspUnknownSpi => "esp_unknown_spi",
    /// GRE: a packet for a tunnel that keepalives found down (its routes are withdrawn).
    GreTunnelDown => "gre_tunnel_down",
    /// IKE to the IPsec endpoint from one client (a Teredo address, an IP-HTTPS /64, an SA's
    /// peer) beyond `[ipsec] ike_packets_per_source_per_sec` per worker: shed on the road,
    /// before the TUN, the kernel's socket and the IKE responder.
    IkeRateLimited => "ike_rate_limited",
    /// A fragment to the IPsec endpoint carrying no data, or a non-final one with less than
    /// 512 bytes of it (`reassembly::MIN_FRAGMENT`): no sender on an IPv6 path (MTU 1280 at
    /// least) needs one that small.
    FragTooSmall => "frag_too_small",
    /// A datagram to the IPsec endpoint in more than 64 fragments (`reassembly::MAX_FRAGMENTS`):
    /// the fragment, and every fragment of the datagram kept so far.
    FragTooMany => "frag_too_many",
    /// A fragment overlapping another of its datagram (RFC 8200 §4.5, RFC 5722): it and every
    /// fragment of the datagram kept so far.
    FragOverlap => "frag_overlap",
    /// An exact copy (same offset and length) of a fragment already kept; the datagram goes on
    /// (RFC 8200 §4.5 allows dropping exact duplicates alone).
    FragDuplicate => "frag_duplicate",
    /// A fragment that would start a datagram while the worker's reassembly table is full of
    /// other clients' datagrams, none expired (one client never evicts another's).
    FragTableFull => "frag_table_full",
    /// Every fragment kept of a datagram that did not complete within its time
    /// (`reassembly::TIMEOUT`).
    FragTimeout => "frag_timeout",
    /// Every fragment kept of a client's oldest datagram, given up when the same client (Teredo
    /// mapping, IP-HTTPS connection) starts one more than `reassembly::PER_CLIENT`.
    FragClientLimit => "frag_client_limit",
}

/// A header that does not parse: the wire error's own reason.
impl From<gate64_wire::Error> for DropReason {
    fn from(e: gate64_wire::Error) -> Self {
        DropReason::from(gate64_teredo::Reject::from(e))
    }
}
