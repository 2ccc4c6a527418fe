//! Teredo (RFC 4380, with the RFC 5991 flag updates), sans-IO: addresses, the server role
//! (qualification: RS → RA; what it relays), the relay role (peer table, bubbles), RFC 6081
//! trailers and the client role.
//!
//! Nothing here opens a socket or reads a clock: the caller passes datagrams and `now`, and
//! gets back decisions and bytes written into its own buffers. Parsers never panic on input.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod addr;
pub mod client;
pub mod relay;
pub mod server;
pub mod trailer;

pub use addr::{Address, TEREDO_PORT};
pub use relay::{Peers, RelayConfig, TxDecision};
pub use server::{Ingress, Reject, Server, ServerConfig, check_relayed};
