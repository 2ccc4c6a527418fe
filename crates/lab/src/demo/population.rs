//! The simulated client population: each emulated client runs the client session of `gate64
//! connect` ([`gate64_client`]) with an [`EmulatedHost`] behind its tunnel instead of a TUN
//! device: it qualifies (Teredo) or connects and autoconfigures (IP-HTTPS: POST, 200, RS, RA),
//! pings the corporate host, then exchanges [`Traffic`] with it until the end of the run.

use super::corp::{BULK_PACKET, CORP_HOST, DISCARD_PORT, ECHO_PORT, bulk_packet, emit_udp};
use super::identities::ClientCa;
use super::lab::{Lab, RandomSeed, udp_socket};
use super::{DemoArgs, Totals, Transport, add};
use anyhow::Result;
use gate64_client::iphttps::Server;
use gate64_client::ipsec::{InnerLink, IpsecHost, IpsecSettings};
use gate64_client::{Host, Ready};
use gate64_teredo::client::Client;
use gate64_wire::{icmpv6, ipv6};
use ipnet::Ipv6Net;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// UDP echo requests: small, like interactive traffic.
const ECHO_PACKET: usize = 128;
/// Client pacing tick.
const TICK: Duration = Duration::from_millis(50);
/// A UDP echo request every this many ticks.
const ECHO_EVERY_TICKS: u32 = 4;
/// First retry delay of an IP-HTTPS client whose connection failed before the link came up.
const IPHTTPS_RETRY: Duration = Duration::from_millis(100);
/// Longest retry delay of an IP-HTTPS client.
const IPHTTPS_RETRY_MAX: Duration = Duration::from_secs(2);

/// Starts `args.clients` emulated clients on `rt`, `n_iphttps` of them IP-HTTPS (when the lab
/// has it), each sending its share of `args.rate_mbit` until `end`.
pub fn spawn(
    rt: &tokio::runtime::Runtime,
    lab: &Lab,
    args: &DemoArgs,
    n_iphttps: usize,
    end: Instant,
    totals: &Arc<Totals>,
) -> Vec<JoinHandle<()>> {
    let per_client = args.rate_mbit() * 1e6 / 8.0 / args.clients as f64;
    let seed = RandomSeed::default();
    (0..args.clients)
        .map(|i| {
            let totals = Arc::clone(totals);
            let seed = seed.next(i as u64);
            let iphttps = lab
                .iphttps
                .as_ref()
                .filter(|_| is_iphttps(i, args.clients, n_iphttps))
                .map(Arc::clone);
            let teredo = lab.teredo;
            let ipsec = lab.ipsec.clone();
            rt.spawn(async move {
                let transport = match iphttps {
                    Some(_) => Transport::Iphttps,
                    None => Transport::Teredo,
                };
                let mut host = EmulatedHost::new(transport, seed, per_client, end, &totals);
                host.needs_sa = ipsec.is_some();
                host.traffic.packet = bulk_packet(ipsec.is_some());
                let r = match ipsec.map(|(base, ca)| own_settings(&base, &ca, i)) {
                    Some(Ok(settings)) => {
                        let mut host = IpsecHost::new(host, Arc::new(settings));
                        emulated_client(iphttps, teredo, seed, end, &mut host).await
                    }
                    Some(Err(e)) => Err(e),
                    None => emulated_client(iphttps, teredo, seed, end, &mut host).await,
                };
                if let Err(e) = r {
                    tracing::warn!(client = i, error = %format!("{e:#}"), "emulated client failed");
                    add(&totals.client_errors, 1);
                }
            })
        })
        .collect()
}

/// Client `i`'s IPsec settings: `base` with a certificate of its own from `ca`.
fn own_settings(base: &IpsecSettings, ca: &ClientCa, i: usize) -> Result<IpsecSettings> {
    let (chain_pem, key_pem) = ca.issue(i)?;
    Ok(IpsecSettings {
        endpoint: base.endpoint,
        chain_pem,
        key_pem,
        ca_pem: base.ca_pem.clone(),
        tunnels: base.tunnels.clone(),
        request_address: base.request_address,
        renew_after: base.renew_after,
        user_pem: None,
        server_id: base.server_id.clone(),
        integrity_only: base.integrity_only,
        udp_encap: base.udp_encap,
    })
}

/// Whether client `i` of `n` is one of the `n_iphttps` IP-HTTPS clients: spread evenly over
/// the population, so both transports start together.
fn is_iphttps(i: usize, n: usize, n_iphttps: usize) -> bool {
    (i + 1) * n_iphttps / n > i * n_iphttps / n
}

/// One emulated client over IP-HTTPS (with a server) or Teredo.
async fn emulated_client<H: Host>(
    iphttps: Option<Arc<Server>>,
    teredo: SocketAddrV4,
    seed: u64,
    end: Instant,
    host: &mut H,
) -> Result<()> {
    match iphttps {
        Some(server) => emulated_iphttps_client(&server, seed, end, host).await,
        None => emulated_teredo_client(teredo, seed, host).await,
    }
}

/// One emulated Teredo client: qualify, then the host's traffic until its end.
async fn emulated_teredo_client<H: Host>(
    server: SocketAddrV4,
    seed: u64,
    host: &mut H,
) -> Result<()> {
    let sock = tokio::net::UdpSocket::from_std({
        let s = udp_socket(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))?;
        s.set_nonblocking(true)?;
        s
    })?;
    sock.connect(server).await?;
    let mut client = Client::new(server, seed);
    gate64_client::teredo::run(&sock, &mut client, host).await
}

/// One emulated IP-HTTPS client: the IP-HTTPS session with the host's traffic as raw IPv6 on
/// the TLS stream until its end. A connection failing before the link is up is retried
/// (100 ms, doubling); a link lost afterwards is an error.
async fn emulated_iphttps_client<H: Host>(
    server: &Server,
    seed: u64,
    end: Instant,
    host: &mut H,
) -> Result<()> {
    let mut retry = IPHTTPS_RETRY;
    loop {
        let mut linked = false;
        let until = tokio::time::Instant::from_std(end);
        match server.session(seed, until, host, &mut linked).await {
            Ok(()) => return Ok(()),
            Err(e) if linked || Instant::now() + retry >= end => return Err(e),
            Err(e) => {
                tracing::debug!(error = %format!("{e:#}"), retry = ?retry, "IP-HTTPS connection failed");
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(IPHTTPS_RETRY_MAX);
            }
        }
    }
}

/// The host behind an emulated client's tunnel: [`Traffic`] from the address the tunnel gave
/// it, counted in the run's [`Totals`], until `end`.
struct EmulatedHost<'a> {
    traffic: Traffic,
    address: Option<Ipv6Addr>,
    end: Instant,
    totals: &'a Totals,
    /// The corporate host is reached only through a child SA: the traffic waits for one.
    needs_sa: bool,
    /// A child SA covers the corporate host.
    sa_up: bool,
}

impl<'a> EmulatedHost<'a> {
    fn new(transport: Transport, seed: u64, rate: f64, end: Instant, totals: &'a Totals) -> Self {
        EmulatedHost {
            traffic: Traffic::new(transport, seed, rate),
            address: None,
            end,
            totals,
            needs_sa: false,
            sa_up: false,
        }
    }

    /// The address the traffic goes from, once it may go.
    fn source(&self) -> Option<Ipv6Addr> {
        self.address.filter(|_| self.sa_up || !self.needs_sa)
    }
}

impl InnerLink for EmulatedHost<'_> {
    /// The demo's clients do not ask for an inner address (their transport address is the
    /// inner one); the traffic starts once a tunnel's routes cover the corporate host.
    fn install_inner(&mut self, _inner: Ipv6Addr, routes: &[Ipv6Net], _mss: u16) -> Result<()> {
        if routes.iter().any(|r| r.contains(&CORP_HOST)) {
            self.sa_up = true;
        }
        Ok(())
    }
}

impl Host for EmulatedHost<'_> {
    async fn configure(&mut self, address: Ipv6Addr, _prefix_len: u8, _mtu: u32) -> Result<()> {
        // Counted once per client: a Teredo client's new NAT mapping or an IP-HTTPS client's
        // new prefix is the same client.
        if self.address.replace(address).is_none() {
            add(&self.totals.qualified[self.traffic.transport as usize], 1);
        }
        Ok(())
    }

    async fn deliver(&mut self, packet: &[u8]) {
        self.traffic.received(packet, self.totals);
    }

    async fn flush(&mut self) {}

    fn refused(&mut self) {
        add(&self.totals.client_errors, 1);
    }

    async fn ready(&mut self) -> Result<Ready> {
        // Traffic with nothing scheduled yet is due at once.
        let due = match self.source() {
            Some(_) => self.traffic.wake().unwrap_or_else(Instant::now),
            None => self.end,
        };
        tokio::time::sleep_until(tokio::time::Instant::from_std(due.min(self.end))).await;
        Ok(if Instant::now() >= self.end {
            Ready::Done
        } else {
            Ready::Packets
        })
    }

    fn take(&mut self, now: Instant, out: &mut Vec<u8>) -> Result<bool> {
        let Some(me) = self.source() else {
            return Ok(false);
        };
        let before = out.len();
        self.traffic.poll(now, &me, self.totals, out)?;
        Ok(out.len() > before)
    }
}

/// Appends one packet written by `emit` into at most `max` bytes of `out`; returns its length.
fn push_packet(
    out: &mut Vec<u8>,
    max: usize,
    emit: impl FnOnce(&mut [u8]) -> gate64_wire::Result<usize>,
) -> io::Result<usize> {
    let start = out.len();
    out.resize(start + max, 0);
    match emit(&mut out[start..]) {
        Ok(n) => {
            out.truncate(start + n);
            Ok(n)
        }
        Err(e) => {
            out.truncate(start);
            Err(io::Error::other(e))
        }
    }
}

/// What every emulated client does once it has an address, whatever the transport: ping
/// [`CORP_HOST`] (once a second until answered), then send `rate` bytes/s to its discard port
/// plus a UDP echo request every few ticks.
struct Traffic {
    transport: Transport,
    rate: f64,
    /// Bulk packet size ([`bulk_packet`]).
    packet: usize,
    pinged: bool,
    next_ping: Option<Instant>,
    next_tick: Option<Instant>,
    ticks: u32,
    tokens: f64,
    ident: u16,
}

impl Traffic {
    fn new(transport: Transport, seed: u64, rate: f64) -> Self {
        Traffic {
            transport,
            rate,
            packet: BULK_PACKET,
            pinged: false,
            next_ping: None,
            next_tick: None,
            ticks: 0,
            tokens: 0.0,
            ident: (seed >> 16) as u16,
        }
    }

    /// Appends what is due at `now` from address `me` to `out`, IPv6 packets back to back.
    fn poll(
        &mut self,
        now: Instant,
        me: &Ipv6Addr,
        totals: &Totals,
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        if !self.pinged && self.next_ping.is_none_or(|t| now >= t) {
            self.ident = self.ident.wrapping_add(1);
            let ident = self.ident;
            push_packet(out, self.packet, |b| {
                icmpv6::emit_echo(b, true, me, &CORP_HOST, ident, 1, b"gate64 demo")
            })?;
            self.next_ping = Some(now + Duration::from_secs(1));
        }
        if self.pinged && self.next_tick.is_none_or(|t| now >= t) {
            if !totals.running.load(Ordering::Relaxed) {
                // Bring-up: nothing but pings until every client is up ([`Totals::running`]).
                self.next_tick = Some(now + TICK);
                return Ok(());
            }
            let (rate, packet) = (self.rate, self.packet);
            self.tokens = (self.tokens + rate * TICK.as_secs_f64()).min(rate * 0.2 + packet as f64);
            while self.tokens >= packet as f64 {
                let n = push_packet(out, packet, |b| {
                    emit_udp(b, me, &CORP_HOST, DISCARD_PORT, DISCARD_PORT, packet - 48)
                })?;
                add(&totals.up_bytes, n as u64);
                self.tokens -= packet as f64;
            }
            if self.ticks.is_multiple_of(ECHO_EVERY_TICKS) {
                push_packet(out, packet, |b| {
                    emit_udp(b, me, &CORP_HOST, 40_000, ECHO_PORT, ECHO_PACKET - 48)
                })?;
                add(&totals.echo_sent, 1);
            }
            self.ticks = self.ticks.wrapping_add(1);
            self.next_tick = Some(self.next_tick.unwrap_or(now).max(now - TICK) + TICK);
        }
        Ok(())
    }

    /// When [`Traffic::poll`] has something to do next.
    fn wake(&self) -> Option<Instant> {
        if self.pinged {
            self.next_tick
        } else {
            self.next_ping
        }
    }

    /// An IPv6 packet delivered to the client.
    fn received(&mut self, pkt: &[u8], totals: &Totals) {
        let Ok(p) = ipv6::Packet::new_checked(pkt) else {
            return;
        };
        match (p.next_header(), icmpv6::type_code(&p)) {
            (ipv6::NH_ICMPV6, Some((icmpv6::TYPE_ECHO_REPLY, 0))) if !self.pinged => {
                self.pinged = true;
                add(&totals.pinged[self.transport as usize], 1);
            }
            (ipv6::NH_UDP, _) if p.payload().len() >= 8 => {
                let sport = u16::from_be_bytes([p.payload()[0], p.payload()[1]]);
                if sport == ECHO_PORT {
                    add(&totals.echo_answered, 1);
                } else {
                    add(&totals.down_bytes, pkt.len() as u64);
                }
            }
            _ => {}
        }
    }
}
