//! Session accounting for gate64: who was connected, from where, for how long, with how
//! many bytes.
//!
//! [`Tracker`] turns the IKE responder's events (IKE SAs and child SAs up and down, the
//! responder's reasons for ending one, refused authentications) and each removed child SA's
//! final counters into session [`Line`]s: a connect, tunnels up and down, a disconnect with
//! the session's totals. The daemon writes them to the session log (`[accounting] log`,
//! one JSON object per line); [`sessions`] reads such a log back for `gate64 sessions`.
//! Sans-IO: no sockets, files or clocks here.

pub mod accountant;
pub mod dae;
pub mod radius;
pub mod record;
pub mod sessions;
pub mod time;
pub mod tracker;

pub use record::{Counts, EventKind, Line, Transport, Tunnel};
pub use tracker::Tracker;
