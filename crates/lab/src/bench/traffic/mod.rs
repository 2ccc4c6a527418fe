//! The capacity traffic: `gate64 bench sink` in the corporate namespace, `gate64 bench flows`
//! in the load generator's; `gate64 bench zone`, the corporate DNS server where Unbound is
//! not installed (`gate64 demo`).
//!
//! Wire format (both ends are ours):
//! - UDP: every datagram starts with [`UdpHeader`] (magic, flow, sequence number, send time)
//!   and the sink echoes it unchanged, so the sender counts loss over the round trip and
//!   samples latency from its own clock.
//! - TCP: the client opens with [`TcpRequest`] (direction, rate, duration). Upload: the client
//!   sends paced data, shuts down its half and reads the 8-byte count of bytes the sink
//!   received. Download: the sink sends paced data for the duration and closes.

mod dns;
mod flows;
mod paths;
mod sink;
mod udp;
mod zone;

pub use flows::{FlowsArgs, FlowsResult, ProbeFailure, run as run_flows};
pub use paths::Paths;
pub use sink::{SinkArgs, run as run_sink};
pub use zone::{ZoneArgs, run as run_zone};

use anyhow::{Result, ensure};
use std::time::Duration;

/// The first bytes of every UDP datagram of the capacity traffic.
const MAGIC: [u8; 4] = *b"G64B";
/// UDP payload size: the inner packet (1048 bytes with IPv6 and UDP headers) plus ESP in UDP
/// and the outer IPv6 header stays below Teredo's 1280-byte MTU.
pub const UDP_PAYLOAD: usize = 1000;
/// Size of a TCP write of the paced senders.
const TCP_CHUNK: usize = 16 * 1024;
/// How often a paced sender catches up with its schedule.
const PACE_TICK: Duration = Duration::from_millis(2);
/// The smallest write of a paced sender before its last: a few full segments, as a bulk TCP
/// sender emits them. Writing what fell due every tick with `TCP_NODELAY` sent ~500-byte
/// segments at the per-flow rates of the capacity search, so the lab measured per-packet
/// costs at packet sizes no bulk transfer has.
const TCP_MIN_WRITE: u64 = 8 * 1024;

/// The header of a capacity UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct UdpHeader {
    flow: u32,
    seq: u64,
    sent_us: u64,
}

impl UdpHeader {
    const LEN: usize = 24;

    fn write(&self, buf: &mut [u8]) {
        buf[..4].copy_from_slice(&MAGIC);
        buf[4..8].copy_from_slice(&self.flow.to_be_bytes());
        buf[8..16].copy_from_slice(&self.seq.to_be_bytes());
        buf[16..24].copy_from_slice(&self.sent_us.to_be_bytes());
    }

    fn parse(buf: &[u8]) -> Option<UdpHeader> {
        if buf.len() < Self::LEN || buf[..4] != MAGIC {
            return None;
        }
        let u64_at = |at: usize| {
            let mut b = [0; 8];
            b.copy_from_slice(&buf[at..at + 8]);
            u64::from_be_bytes(b)
        };
        let mut flow = [0; 4];
        flow.copy_from_slice(&buf[4..8]);
        Some(UdpHeader {
            flow: u32::from_be_bytes(flow),
            seq: u64_at(8),
            sent_us: u64_at(16),
        })
    }
}

/// Direction of a TCP flow, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Upload,
    Download,
}

/// The opening of a capacity TCP connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TcpRequest {
    direction: Direction,
    bytes_per_sec: u64,
    duration_ms: u64,
}

impl TcpRequest {
    const LEN: usize = 17;

    fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        b[0] = match self.direction {
            Direction::Upload => b'U',
            Direction::Download => b'D',
        };
        b[1..9].copy_from_slice(&self.bytes_per_sec.to_be_bytes());
        b[9..17].copy_from_slice(&self.duration_ms.to_be_bytes());
        b
    }

    fn decode(b: &[u8; Self::LEN]) -> Result<TcpRequest> {
        let direction = match b[0] {
            b'U' => Direction::Upload,
            b'D' => Direction::Download,
            other => anyhow::bail!("unknown direction byte {other:#04x}"),
        };
        let mut rate = [0; 8];
        rate.copy_from_slice(&b[1..9]);
        let mut ms = [0; 8];
        ms.copy_from_slice(&b[9..17]);
        let req = TcpRequest {
            direction,
            bytes_per_sec: u64::from_be_bytes(rate),
            duration_ms: u64::from_be_bytes(ms),
        };
        // A bound on what a peer can make the sink do: one hour, 10 Gbit/s.
        ensure!(
            req.duration_ms <= 3_600_000 && req.bytes_per_sec <= 1_250_000_000,
            "request out of range: {req:?}"
        );
        Ok(req)
    }
}

/// Bytes a paced sender at `bytes_per_sec` should have sent after `elapsed`.
fn due_bytes(bytes_per_sec: u64, elapsed: Duration) -> u64 {
    (u128::from(bytes_per_sec) * elapsed.as_micros() / 1_000_000) as u64
}

/// Writes paced data to `stream` at `bytes_per_sec` for `duration`; returns bytes written.
async fn paced_write<W: tokio::io::AsyncWrite + Unpin>(
    stream: &mut W,
    bytes_per_sec: u64,
    duration: Duration,
) -> std::io::Result<u64> {
    use tokio::io::AsyncWriteExt;
    let chunk = vec![0x5a_u8; TCP_CHUNK];
    let start = tokio::time::Instant::now();
    let mut sent = 0_u64;
    loop {
        let elapsed = start.elapsed();
        // In the last tick (or past the end), what falls due by the end goes at once, and
        // the sender is done.
        let last_tick = elapsed + PACE_TICK >= duration;
        let due = due_bytes(bytes_per_sec, if last_tick { duration } else { elapsed });
        if last_tick && sent >= due {
            return Ok(sent);
        }
        if sent >= due || due - sent < TCP_MIN_WRITE && !last_tick {
            tokio::time::sleep(PACE_TICK).await;
            continue;
        }
        let n = (due - sent).min(TCP_CHUNK as u64) as usize;
        stream.write_all(&chunk[..n]).await?;
        sent += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_header_round_trips_and_refuses_foreign_datagrams() {
        let h = UdpHeader {
            flow: 7,
            seq: 1 << 40,
            sent_us: 123_456,
        };
        let mut buf = [0_u8; UDP_PAYLOAD];
        h.write(&mut buf);
        assert_eq!(UdpHeader::parse(&buf), Some(h));
        assert_eq!(UdpHeader::parse(&buf[..10]), None);
        buf[0] = b'X';
        assert_eq!(UdpHeader::parse(&buf), None);
    }

    #[test]
    fn tcp_request_round_trips_and_is_bounded() {
        let r = TcpRequest {
            direction: Direction::Download,
            bytes_per_sec: 1_000_000,
            duration_ms: 5_000,
        };
        assert_eq!(TcpRequest::decode(&r.encode()).unwrap(), r);
        let mut bad = r.encode();
        bad[0] = b'?';
        assert!(TcpRequest::decode(&bad).is_err());
        let huge = TcpRequest {
            duration_ms: u64::MAX,
            ..r
        };
        assert!(TcpRequest::decode(&huge.encode()).is_err());
    }

    #[test]
    fn pacing_schedule() {
        assert_eq!(due_bytes(1_000_000, Duration::from_millis(500)), 500_000);
        assert_eq!(due_bytes(0, Duration::from_secs(9)), 0);
    }

    /// Records the size of every write.
    #[derive(Default)]
    struct Writes(Vec<usize>);

    impl tokio::io::AsyncWrite for Writes {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.0.push(buf.len());
            std::task::Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// A slow paced sender (100 kB/s: 200 bytes fall due per 2 ms tick) writes several
    /// segments' worth at a time, not what fell due each tick; only the last tick may write
    /// less. No bound on time: a stalled test only makes the writes larger.
    #[tokio::test]
    async fn a_slow_paced_sender_writes_whole_segments() {
        let mut w = Writes::default();
        let sent = paced_write(&mut w, 100_000, Duration::from_millis(300))
            .await
            .unwrap();
        assert_eq!(sent, w.0.iter().sum::<usize>() as u64);
        assert!(sent <= 30_000, "{sent}");
        let whole = w.0.iter().filter(|&&n| n as u64 >= TCP_MIN_WRITE).count();
        assert!(whole >= 1 && w.0.len() <= whole + 1, "{:?}", w.0);
    }
}
