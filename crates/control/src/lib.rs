//! gate64's control protocol: what the running daemon answers on its Unix control socket
//! (root only) and what the admin commands (`gate64 status`, `gate64 disconnect`,
//! `gate64 ha`) ask it.
//!
//! One request and one JSON document per connection: the client writes its request line
//! ([`Request::line`]: `status`, `disconnect ...`, `ha promote` or `ha status`) and ends its
//! side; the daemon answers (the [`Snapshot`], what was [`Disconnected`], what was
//! [`Promoted`], the [`HaState`]) and closes. A client that sends nothing
//! gets the snapshot. The daemon reads at most [`MAX_REQUEST`] bytes of a request.
//!
//! This crate holds the types both sides share and the client ([`client`]); the daemon's
//! server is `gate64-daemon`'s.
#![forbid(unsafe_code)]

pub mod client;
mod disconnect;
mod ha;
mod request;
mod status;

pub use disconnect::{Disconnected, Removed};
pub use ha::{HaState, Promoted};
pub use request::{MAX_REQUEST, Request, Target, parse_spi, spi_hex};
pub use status::{ChildSa, Client, Snapshot};
