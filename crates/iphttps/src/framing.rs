//! Packet boundaries in the IP-HTTPS byte stream ([MS-IPHTTPS] §3.1.5.3, §3.2.5.2.2).
//!
//! IP-HTTPS has no framing of its own: after the HTTP heads, each direction is a plain
//! concatenation of IPv6 packets, and a packet's length is `40 + Payload Length` from its own
//! header. So **sending needs nothing**: write each packet's bytes to the TLS stream as they
//! are. Receiving means reading the fixed header, checking the version nibble (6) and cutting
//! at `40 + Payload Length`.
//!
//! A wrong version nibble means the stream has lost sync and nothing after it can be trusted:
//! the spec says to discard the packet, and the server SHOULD close the session (§3.2.5.2.2),
//! so [`FrameError::NotIpv6`] is fatal for the connection. Jumbograms (payload length 0 with a
//! hop-by-hop header, RFC 2675) cannot occur on a 1280-byte-MTU link and are refused as
//! [`FrameError::Jumbo`], also fatal since their real length is unknown.
//!
//! [`Deframer`] only inspects the start of a buffer and returns a length, so the caller can
//! hand out slices of its own buffer; [`StreamBuffer`] is such a buffer, sized so that any
//! packet fits contiguously, compacting only when the tail runs short.

use gate64_wire::ipv6::HEADER_LEN;

/// The largest IPv6 packet without jumbograms: 40-byte header + 65535 bytes of payload.
pub const MAX_PACKET_LEN: usize = HEADER_LEN + 65_535;
/// The link MTU both ends use (§3.1.5.2, §3.2.3.1).
pub const LINK_MTU: usize = 1280;

/// Why the stream cannot be deframed further.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The version nibble is not 6: the stream is out of sync. Close the connection.
    #[error("stream does not carry IPv6 (version nibble)")]
    NotIpv6,
    /// Payload length 0 with a hop-by-hop header: a jumbogram. Close the connection.
    #[error("jumbogram in the stream")]
    Jumbo,
    /// The packet is longer than the configured maximum. Its length is known, so the stream is
    /// still in sync: the caller may skip `len` bytes and count a drop, or close.
    #[error("packet of {len} bytes exceeds the limit")]
    TooLarge {
        /// The announced packet length (header included).
        len: usize,
    },
}

/// Finds packet boundaries; holds only the size limit, no bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deframer {
    max_len: usize,
}

impl Default for Deframer {
    /// Accepts any non-jumbo packet ([`MAX_PACKET_LEN`]).
    fn default() -> Self {
        Deframer {
            max_len: MAX_PACKET_LEN,
        }
    }
}

impl Deframer {
    /// A deframer refusing packets longer than `max_len` bytes (clamped to
    /// [`HEADER_LEN`]..=[`MAX_PACKET_LEN`]). The link MTU is [`LINK_MTU`], but peers are
    /// known to send more, so the default accepts up to [`MAX_PACKET_LEN`].
    pub fn new(max_len: usize) -> Self {
        Deframer {
            max_len: max_len.clamp(HEADER_LEN, MAX_PACKET_LEN),
        }
    }

    /// The configured limit.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Inspects the start of `buf`: `Ok(Some(len))` when a whole packet is at `buf[..len]`,
    /// `Ok(None)` when more bytes are needed. Errors are reported as soon as the bytes that
    /// prove them have arrived (the version from the first byte). Never panics.
    pub fn next_packet(&self, buf: &[u8]) -> Result<Option<usize>, FrameError> {
        let Some(&first) = buf.first() else {
            return Ok(None);
        };
        if first >> 4 != 6 {
            return Err(FrameError::NotIpv6);
        }
        let (Some(&hi), Some(&lo), Some(&next_header)) = (buf.get(4), buf.get(5), buf.get(6))
        else {
            return Ok(None);
        };
        let plen = usize::from(u16::from_be_bytes([hi, lo]));
        if plen == 0 && next_header == 0 {
            return Err(FrameError::Jumbo);
        }
        let len = HEADER_LEN + plen;
        if len > self.max_len {
            return Err(FrameError::TooLarge { len });
        }
        Ok((buf.len() >= len).then_some(len))
    }
}

/// [`Deframer::next_packet`] with the default limit ([`MAX_PACKET_LEN`]).
pub fn next_packet(buf: &[u8]) -> Result<Option<usize>, FrameError> {
    Deframer::default().next_packet(buf)
}

/// A receive buffer for one connection: the driver reads TLS plaintext into
/// [`StreamBuffer::spare`], then takes packets out as slices of the buffer (no copy) with
/// [`StreamBuffer::next_packet`]. Data moves only when the free tail gets shorter than one
/// maximum packet, and then only the bytes not yet consumed (at most one partial packet when
/// the caller drains after every read).
#[derive(Debug, Clone)]
pub struct StreamBuffer {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Default for StreamBuffer {
    fn default() -> Self {
        Self::new(Self::MIN_CAPACITY)
    }
}

impl StreamBuffer {
    /// The smallest capacity: two maximum packets, so a partial packet plus a full read of
    /// another always fit.
    pub const MIN_CAPACITY: usize = 2 * MAX_PACKET_LEN;

    /// A buffer of `capacity` bytes (at least [`StreamBuffer::MIN_CAPACITY`]).
    pub fn new(capacity: usize) -> Self {
        StreamBuffer {
            buf: vec![0; capacity.max(Self::MIN_CAPACITY)].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// Total capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Bytes received and not consumed yet.
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Number of bytes in [`StreamBuffer::data`].
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// True when nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Free space to read into; follow with [`StreamBuffer::commit`]. Compacts first when the
    /// tail is shorter than [`MAX_PACKET_LEN`]. Empty only when the caller left more than
    /// `capacity − MAX_PACKET_LEN` bytes unconsumed.
    pub fn spare(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.buf.len() - self.end < MAX_PACKET_LEN && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.buf[self.end..]
    }

    /// Marks `n` bytes written into [`StreamBuffer::spare`] as data.
    ///
    /// # Panics
    /// When `n` exceeds the spare space: a bug in the caller, not a network condition.
    pub fn commit(&mut self, n: usize) {
        assert!(n <= self.buf.len() - self.end, "commit beyond spare()");
        self.end += n;
    }

    /// Copies as much of `data` as fits (compacting if needed) and returns how much that was.
    /// For tests and drivers whose reads do not go through [`StreamBuffer::spare`].
    pub fn extend_from_slice(&mut self, data: &[u8]) -> usize {
        let spare = self.spare();
        let n = data.len().min(spare.len());
        spare[..n].copy_from_slice(&data[..n]);
        self.commit(n);
        n
    }

    /// Drops `n` bytes from the front (clamped to [`StreamBuffer::len`]), e.g. the HTTP head or
    /// a packet refused with [`FrameError::TooLarge`].
    pub fn consume(&mut self, n: usize) {
        self.start += n.min(self.len());
    }

    /// Takes the next complete packet out of the buffer: `Ok(None)` when more bytes are needed.
    /// On an error nothing is consumed.
    pub fn next_packet(&mut self, deframer: &Deframer) -> Result<Option<&[u8]>, FrameError> {
        match deframer.next_packet(self.data())? {
            Some(len) => {
                let at = self.start;
                self.start += len;
                Ok(Some(&self.buf[at..at + len]))
            }
            None => Ok(None),
        }
    }

    /// Forgets everything buffered.
    pub fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gate64_wire::ipv6;
    use proptest::prelude::*;
    use std::net::Ipv6Addr;

    fn packet(len: usize, fill: u8) -> Vec<u8> {
        let mut p = vec![fill; len];
        let plen = u16::try_from(len - HEADER_LEN).unwrap();
        ipv6::emit_header(
            &mut p,
            plen,
            ipv6::NH_UDP,
            64,
            &Ipv6Addr::new(0x2001, 0xdb8, 1, 1, 0, 0, 0, 1),
            &Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 1),
        )
        .unwrap();
        p
    }

    #[test]
    fn two_packets_in_one_buffer() {
        let mut s = packet(60, 1);
        s.extend_from_slice(&packet(1280, 2));
        assert_eq!(next_packet(&s), Ok(Some(60)));
        assert_eq!(next_packet(&s[60..]), Ok(Some(1280)));
        assert_eq!(next_packet(&s[1340..]), Ok(None));

        let mut b = StreamBuffer::default();
        assert_eq!(b.extend_from_slice(&s), s.len());
        let d = Deframer::default();
        assert_eq!(b.next_packet(&d).unwrap().unwrap(), &s[..60]);
        assert_eq!(b.next_packet(&d).unwrap().unwrap(), &s[60..]);
        assert_eq!(b.next_packet(&d), Ok(None));
        assert!(b.is_empty());
    }

    #[test]
    fn packet_split_across_pushes() {
        let p = packet(1280, 7);
        let d = Deframer::new(LINK_MTU);
        for cut in [1, 6, 7, 39, 40, 41, 1279] {
            let mut b = StreamBuffer::default();
            b.extend_from_slice(&p[..cut]);
            assert_eq!(b.next_packet(&d), Ok(None), "cut {cut}");
            assert_eq!(b.len(), cut);
            b.extend_from_slice(&p[cut..]);
            assert_eq!(b.next_packet(&d).unwrap().unwrap(), &p[..]);
        }
    }

    #[test]
    fn truncated_needs_more() {
        let p = packet(100, 0);
        for cut in 0..p.len() {
            assert_eq!(next_packet(&p[..cut]), Ok(None), "cut {cut}");
        }
        assert_eq!(next_packet(&p), Ok(Some(100)));
    }

    #[test]
    fn non_ipv6_is_fatal_at_once() {
        assert_eq!(next_packet(&[0x45]), Err(FrameError::NotIpv6));
        let mut p = packet(60, 0);
        p[0] = 0x45;
        assert_eq!(next_packet(&p), Err(FrameError::NotIpv6));
        // An HTTP head where packets were expected.
        assert_eq!(
            next_packet(b"POST / HTTP/1.1\r\n"),
            Err(FrameError::NotIpv6)
        );
        let mut b = StreamBuffer::default();
        b.extend_from_slice(&p);
        assert_eq!(
            b.next_packet(&Deframer::default()),
            Err(FrameError::NotIpv6)
        );
        assert_eq!(b.len(), 60, "nothing consumed on error");
    }

    #[test]
    fn jumbo_is_refused() {
        let mut p = packet(48, 0);
        p[4] = 0;
        p[5] = 0;
        p[6] = 0; // hop-by-hop
        assert_eq!(next_packet(&p[..7]), Err(FrameError::Jumbo));
        // Payload length 0 with another next header is an empty packet, not a jumbogram.
        p[6] = ipv6::NH_NONE;
        assert_eq!(next_packet(&p), Ok(Some(40)));
    }

    #[test]
    fn size_limit() {
        let p = packet(1500, 0);
        assert_eq!(
            Deframer::new(LINK_MTU).next_packet(&p),
            Err(FrameError::TooLarge { len: 1500 })
        );
        assert_eq!(Deframer::default().next_packet(&p), Ok(Some(1500)));
        let mut big = packet(MAX_PACKET_LEN, 3);
        assert_eq!(next_packet(&big), Ok(Some(MAX_PACKET_LEN)));
        big.truncate(1000);
        assert_eq!(next_packet(&big), Ok(None));
        // The stream stays in sync after skipping a too-large packet.
        let mut b = StreamBuffer::default();
        b.extend_from_slice(&p);
        b.extend_from_slice(&packet(80, 1));
        let d = Deframer::new(LINK_MTU);
        let Err(FrameError::TooLarge { len }) = b.next_packet(&d) else {
            panic!("expected TooLarge");
        };
        b.consume(len);
        assert_eq!(b.next_packet(&d).unwrap().unwrap().len(), 80);
    }

    #[test]
    fn stream_buffer_compacts_a_partial_packet() {
        let mut b = StreamBuffer::default();
        let d = Deframer::default();
        let big = packet(MAX_PACKET_LEN, 9);
        let small = packet(1280, 4);
        // Fill until the tail is shorter than one maximum packet, leaving a partial one.
        b.extend_from_slice(&big);
        b.extend_from_slice(&big[..MAX_PACKET_LEN - 100]);
        assert_eq!(b.next_packet(&d).unwrap().unwrap().len(), MAX_PACKET_LEN);
        assert_eq!(b.next_packet(&d), Ok(None));
        assert_eq!(b.spare().len(), b.capacity() - (MAX_PACKET_LEN - 100));
        b.extend_from_slice(&big[MAX_PACKET_LEN - 100..]);
        b.extend_from_slice(&small);
        assert_eq!(b.next_packet(&d).unwrap().unwrap(), &big[..]);
        assert_eq!(b.next_packet(&d).unwrap().unwrap(), &small[..]);
        assert!(b.is_empty());
        assert_eq!(b.spare().len(), b.capacity());
    }

    #[test]
    fn capacity_is_at_least_two_max_packets() {
        assert_eq!(StreamBuffer::new(10).capacity(), 2 * MAX_PACKET_LEN);
        assert_eq!(StreamBuffer::new(300_000).capacity(), 300_000);
    }

    proptest! {
        #[test]
        fn deframer_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..4096),
                                 max in 0usize..70_000) {
            let d = Deframer::new(max);
            if let Ok(Some(n)) = d.next_packet(&buf) {
                prop_assert!(n <= buf.len() && n >= HEADER_LEN && n <= d.max_len());
            }
        }

        #[test]
        fn stream_buffer_never_panics_and_yields_valid_packets(
            chunks in proptest::collection::vec(
                proptest::collection::vec(any::<u8>(), 0..600),
                0..20,
            ),
        ) {
            let mut b = StreamBuffer::default();
            let d = Deframer::default();
            for c in &chunks {
                b.extend_from_slice(c);
                while let Ok(Some(p)) = b.next_packet(&d) {
                    prop_assert_eq!(p[0] >> 4, 6);
                    let plen = usize::from(u16::from_be_bytes([p[4], p[5]]));
                    prop_assert_eq!(p.len(), HEADER_LEN + plen);
                }
            }
        }

        #[test]
        fn any_split_of_a_packet_stream_gives_the_same_packets(
            lens in proptest::collection::vec(40usize..1500, 1..8),
            split in 1usize..2000,
        ) {
            let mut stream = Vec::new();
            for (i, l) in lens.iter().enumerate() {
                stream.extend_from_slice(&packet(*l, i as u8));
            }
            let mut b = StreamBuffer::default();
            let d = Deframer::default();
            let mut got = Vec::new();
            for c in stream.chunks(split) {
                b.extend_from_slice(c);
                while let Some(p) = b.next_packet(&d).unwrap() {
                    got.push(p.len());
                }
            }
            prop_assert_eq!(got, lens);
        }
    }
}
