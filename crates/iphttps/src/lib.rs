//! IP-HTTPS ([MS-IPHTTPS]: IPv6 over an HTTP/1.1 connection inside TLS), sans-IO: the HTTP
//! preamble (§3.1.5.2, §3.2.5.1), the stream framing (§3.1.5.3, §3.2.5.2.2), the server's link
//! duties (Router Advertisements with a per-client /64, source checks, §3.2.5.2.1) and the
//! client role.
//!
//! - [`http`]: parse the client's `POST`, build the `200 OK` (or an error answer), and the
//!   client side of the same exchange. Bounded: 32 headers, 8 KiB of head.
//! - [`framing`]: find packet boundaries in the byte stream ([`Deframer`]) and a zero-copy
//!   receive buffer ([`StreamBuffer`]).
//! - [`server`]: one [`Connection`] per HTTP connection (AwaitingRequest → LinkUp → Closed)
//!   and the [`PrefixPool`] that gives every connection its own /64.
//! - [`pool`]: the [`PrefixPool`], which also gives a reconnecting client its /64 back.
//! - [`client`]: [`ClientConnection`], the client role (POST, RS, RA → address).
//!
//! Contract: nothing here opens a socket, touches TLS, reads a clock or an OS RNG. The caller
//! passes bytes and `now` (and, for the `Date` header, a preformatted date string, see
//! [`http::http_date`]); decisions come back as enums and bytes are written into caller
//! buffers. Parsers never panic on network input; the property tests check this for the HTTP
//! parser and the deframer.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
pub mod framing;
pub mod http;
pub mod pool;
pub mod server;

pub use client::{ClientConnection, ClientError, Event};
pub use framing::{Deframer, FrameError, MAX_PACKET_LEN, StreamBuffer};
pub use http::{HttpError, Request};
pub use server::{
    CloseReason, Connection, DropReason, EgressFilter, EgressTally, Handshake, PacketVerdict,
    PrefixPool, ServerConfig,
};
