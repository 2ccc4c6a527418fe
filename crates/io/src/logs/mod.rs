//! The JSON-lines logs: one writer thread per file behind a bounded queue ([`lines`]), used
//! by NAT64's binding log ([`binding`]) and the session log ([`session`]).

pub mod binding;
pub mod lines;
pub mod session;
