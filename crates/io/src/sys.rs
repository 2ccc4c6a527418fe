//! The system calls the workers, the TUN queues and the DNS64 server make, as `gate64-sys`
//! offers them (the one crate with `unsafe` code): UDP batches and GSO, descriptor I/O and
//! epoll, socket options, UDP and TCP on one port, and `getrandom`.

pub use gate64_sys::fd::{Epoll, read, write, writev2};
pub use gate64_sys::random::getrandom;
pub use gate64_sys::socket::{
    set_buffer_force, set_notsent_lowat, set_pmtudisc_dont, socket_drops, udp_and_tcp_on_one_port,
};
pub use gate64_sys::udp::{
    BATCH, COALESCED_IOVS, Coalesced, Destination, GSO_MAX_BYTES, GSO_MAX_SEGMENTS, Received,
    ReceivedFrom, recv_batch, recv_batch_from, recv_coalesced, send_batch, send_batch_reporting,
    send_gso, set_udp_gro,
};
