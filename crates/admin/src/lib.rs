//! gate64's admin commands: `status`, `disconnect` and `ha`, which ask the running daemon over its
//! control socket (`gate64-control`), `sessions`, which reads the session log it writes, and
//! `profile`, which writes client profiles from its configuration.
//! Their arguments and what they print are here; the daemon's serving code is not: these
//! commands reach it only through the control protocol. The `gate64` binary puts them
//! behind its CLI.
#![forbid(unsafe_code)]

pub mod disconnect;
pub mod ha;
pub mod profile;
pub mod sessions;
mod socket;
pub mod status;
mod terminal;
