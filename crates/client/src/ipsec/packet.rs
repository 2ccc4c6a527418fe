//! The packets the client's IPsec layer puts on the transport: IKE datagrams and ESP in
//! IPv6 + UDP with its checksum (RFC 3948 §2.1, §2.2; the checksum is mandatory over IPv6,
//! RFC 8200 §8.1), or ESP in IPv6 alone (next header 50) when the SA is not
//! UDP-encapsulated.

use super::*;

/// Appends IPv6 + UDP (`src` -> `dst`) + ESP of the IPv6 packet `inner` sealed under `sa`
/// to `out` (RFC 3948 §2.1); `out` is left as it was on failure.
pub fn seal_udp(
    sa: &Outbound,
    src: SocketAddr,
    dst: SocketAddr,
    inner: &[u8],
    out: &mut Vec<u8>,
) -> Result<()> {
    let base = out.len();
    let esp = esp_len(inner.len());
    let udp_len = u16::try_from(udp::HEADER_LEN + esp).context("packet too large to seal")?;
    let at = base + ipv6::HEADER_LEN + udp::HEADER_LEN;
    out.resize(at + esp, 0);
    out[at + SPI_SEQ_IV_LEN..at + SPI_SEQ_IV_LEN + inner.len()].copy_from_slice(inner);
    if let Err(e) = sa.seal(&mut out[at..], 0, inner.len(), NEXT_HEADER_IPV6) {
        out.truncate(base);
        anyhow::bail!("sealing: {e:?}");
    }
    write_udp_headers(&mut out[base..], src, dst, udp_len);
    Ok(())
}

/// Appends IPv6 (`src` -> `dst`, next header 50) + ESP of the IPv6 packet `inner` sealed
/// under `sa` to `out` (RFC 4303 §3.1.2); `out` is left as it was on failure.
pub fn seal_raw(
    sa: &Outbound,
    (src, dst): (Ipv6Addr, Ipv6Addr),
    inner: &[u8],
    out: &mut Vec<u8>,
) -> Result<()> {
    let base = out.len();
    let esp = esp_len(inner.len());
    let payload_len = u16::try_from(esp).context("packet too large to seal")?;
    let at = base + ipv6::HEADER_LEN;
    out.resize(at + esp, 0);
    out[at + SPI_SEQ_IV_LEN..at + SPI_SEQ_IV_LEN + inner.len()].copy_from_slice(inner);
    if let Err(e) = sa.seal(&mut out[at..], 0, inner.len(), NEXT_HEADER_IPV6) {
        out.truncate(base);
        anyhow::bail!("sealing: {e:?}");
    }
    if let Err(e) = ipv6::emit_header(&mut out[base..], payload_len, NH_ESP, HOP_LIMIT, &src, &dst)
    {
        out.truncate(base);
        anyhow::bail!("IPv6 header: {e:?}");
    }
    Ok(())
}

/// Writes the IPv6 and UDP headers (`src` -> `dst`) in front of the `udp_len - 8` bytes of
/// payload already in `pkt`, and the UDP checksum (mandatory over IPv6, RFC 8200 §8.1).
fn write_udp_headers(pkt: &mut [u8], src: SocketAddr, dst: SocketAddr, udp_len: u16) {
    let (IpAddr::V6(s), IpAddr::V6(d)) = (src.ip(), dst.ip()) else {
        return;
    };
    let _ = ipv6::emit_header(pkt, udp_len, ipv6::NH_UDP, HOP_LIMIT, &s, &d);
    if let Some(dgram) = pkt.get_mut(ipv6::HEADER_LEN..) {
        let _ = udp::emit_over_v6(dgram, (&s, &d), src.port(), dst.port());
    }
}

/// An IKE datagram as the IPv6/UDP packet the transport carries: on port 4500 behind the
/// non-ESP marker (RFC 3948 §2.2). `None` for a non-IPv6 address pair or an oversize message.
pub fn ike_packet(local: SocketAddr, remote: SocketAddr, ike: &[u8]) -> Option<Vec<u8>> {
    if !(local.is_ipv6() && remote.is_ipv6()) {
        return None;
    }
    let marker = if remote.port() == NAT_T_PORT {
        udp_encap::NON_ESP_MARKER.len()
    } else {
        0
    };
    let udp_len = u16::try_from(udp::HEADER_LEN + marker + ike.len()).ok()?;
    let mut pkt = vec![0u8; ipv6::HEADER_LEN + usize::from(udp_len)];
    pkt[ipv6::HEADER_LEN + udp::HEADER_LEN + marker..].copy_from_slice(ike);
    write_udp_headers(&mut pkt, local, remote, udp_len);
    Some(pkt)
}
