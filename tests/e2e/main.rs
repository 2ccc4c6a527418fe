//! gate64 end-to-end tests, one test binary with a module per area (hickory's layout).
//!
//! Tests named `netns_*` need root and `ip netns` and are `#[ignore]`d so a plain
//! `cargo test` passes anywhere; `scripts/test` runs them as root with `--include-ignored`.
//! They share the lab topology of `gate64_testkit::Topology` and run one at a time.
#![forbid(unsafe_code)]

mod bench_capacity;
mod bench_load;
mod common;
mod dns64;
mod failover;
mod gre;
mod ha_iphttps;
mod ha_sync;
mod ike_auth_flood;
mod ike_bounds;
mod ike_cert_authz;
mod ike_eap;
mod ike_identities_apart;
mod ike_identity;
mod ike_interop;
mod ike_multi_auth;
mod ike_ocsp;
mod ike_proposals;
mod ike_reauth;
mod ike_revocation;
mod ike_rsa;
mod ike_tunnel_rules;
mod iphttps;
mod iphttps_abuse;
mod iphttps_edge;
mod iphttps_revocation;
mod ipsec;
mod ipsec_connect;
mod ipsec_esp_cbc;
mod ipsec_flood;
mod ipsec_fragments;
mod ipsec_gmac;
mod ipsec_mobike;
mod ipsec_native;
mod ipsec_negative;
mod ipsec_qcd;
mod ipsec_reload;
mod ipsec_strongswan;
mod keepalived_notify;
mod lifecycle;
mod nat64;
mod nat64_fairness;
mod native_os;
mod openssl_ca;
mod package;
mod privilege;
mod prometheus;
mod radius;
mod radius_dae;
mod readme_connect;
mod scale_out;
mod scale_out_iphttps;
mod scale_out_resilient;
mod scale_out_takeover;
mod status_page;
mod strongswan_guide;
mod teredo;
mod teredo_edge;
