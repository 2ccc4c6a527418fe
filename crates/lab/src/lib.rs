//! gate64's lab: `gate64 demo` (no root: a short capacity run in an unprivileged user
//! namespace, or the daemon on loopback sockets with an in-process corporate network) and
//! `gate64 bench capacity` (root: the real daemon, emulated Teredo and IP-HTTPS clients with
//! IPsec, NAT64/DNS64 in network namespaces), with the hidden `bench load`, `sink` and
//! `flows` roles they run in each namespace. Built on `gate64-testkit`'s namespaces; the
//! daemon's own crates never depend on it.
#![forbid(unsafe_code)]

pub mod bench;
pub mod demo;
