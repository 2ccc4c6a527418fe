//! `gate64 bench sink`: the corporate servers. On every `--listen` address: a UDP socket that
//! echoes capacity datagrams, and a TCP listener that serves [`TcpRequest`]s.

use super::{Direction, TcpRequest, UdpHeader, paced_write};
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// Options of `gate64 bench sink`.
#[derive(Debug, Clone, clap::Args)]
pub struct SinkArgs {
    /// Address and port to serve on, TCP and UDP (repeatable), e.g. `[::]:9000`,
    /// `0.0.0.0:9000`.
    #[arg(long, required = true)]
    pub listen: Vec<SocketAddr>,
    /// Runtime threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

/// Runs the sink until killed.
pub fn run(args: &SinkArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .context("starting a runtime")?;
    rt.block_on(serve(args.listen.clone()))
}

async fn serve(listen: Vec<SocketAddr>) -> Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for addr in listen {
        let udp = bind_udp(addr)?;
        let tcp = listen_tcp(addr).with_context(|| format!("listening on TCP {addr}"))?;
        tasks.spawn(echo_udp(udp));
        tasks.spawn(accept_tcp(tcp));
    }
    eprintln!("gate64 bench sink: serving");
    while let Some(done) = tasks.join_next().await {
        done.context("a sink task panicked")??;
    }
    Ok(())
}

fn bind_udp(addr: SocketAddr) -> Result<UdpSocket> {
    let domain = socket2::Domain::for_address(addr);
    let s = socket2::Socket::new(domain, socket2::Type::DGRAM, None)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    // Bursts of many clients' datagrams: a deep receive queue rather than drops at the sink.
    let _ = s.set_recv_buffer_size(8 << 20);
    let _ = s.set_send_buffer_size(8 << 20);
    s.set_nonblocking(true)?;
    s.bind(&addr.into())
        .with_context(|| format!("binding UDP {addr}"))?;
    Ok(UdpSocket::from_std(s.into())?)
}

/// A TCP listener; IPv6 ones are IPv6-only so that `[::]` and `0.0.0.0` can both be served.
fn listen_tcp(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(4096)?;
    TcpListener::from_std(s.into())
}

async fn echo_udp(sock: UdpSocket) -> Result<()> {
    let mut buf = vec![0_u8; 65_536];
    loop {
        let (n, from) = sock.recv_from(&mut buf).await?;
        if UdpHeader::parse(&buf[..n]).is_some() {
            // A full send queue drops the echo: counted as loss by the sender, as it should.
            let _ = sock.try_send_to(&buf[..n], from);
        }
    }
}

async fn accept_tcp(listener: TcpListener) -> Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(async move {
            // A broken connection is the client's loss to count; the sink serves on.
            let _ = serve_tcp(stream).await;
        });
    }
}

async fn serve_tcp(mut stream: TcpStream) -> Result<()> {
    let _ = stream.set_nodelay(true);
    let mut head = [0_u8; TcpRequest::LEN];
    tokio::time::timeout(Duration::from_secs(30), stream.read_exact(&mut head))
        .await
        .context("no request within 30 s")??;
    let req = TcpRequest::decode(&head)?;
    match req.direction {
        Direction::Upload => {
            let mut buf = vec![0_u8; 64 * 1024];
            let mut total = 0_u64;
            loop {
                let n = stream.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                total += n as u64;
            }
            stream.write_all(&total.to_be_bytes()).await?;
            stream.shutdown().await?;
        }
        Direction::Download => {
            let duration = Duration::from_millis(req.duration_ms);
            paced_write(&mut stream, req.bytes_per_sec, duration).await?;
            stream.shutdown().await?;
        }
    }
    Ok(())
}

/// The sink on a free port of `ip`, for the loopback test of the flows: UDP and TCP on the
/// same port, bound before it returns (the caller needs no wait).
#[cfg(test)]
pub(super) fn serve_for_test(ip: std::net::IpAddr) -> Result<SocketAddr> {
    let (udp, addr, tcp) = gate64_sys::socket::udp_and_tcp_on_one_port(
        SocketAddr::new(ip, 0),
        |a| {
            let s = bind_udp(a).map_err(std::io::Error::other)?;
            let got = s.local_addr()?;
            Ok((s, got))
        },
        listen_tcp,
    )?;
    tokio::spawn(echo_udp(udp));
    tokio::spawn(accept_tcp(tcp));
    Ok(addr)
}
