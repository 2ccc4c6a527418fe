//! The RADIUS side of IKEv2 EAP (RFC 3579): each [`EapJob`] the responder queues becomes an
//! Access-Request on a task of its own, and the server's answer an [`EapVerdict`] back to the
//! driver, so a slow or dead server costs the IKE task nothing. A job's request goes to the
//! first server of `[[ipsec.eap_radius]]` not held down, is sent again after
//! [`Timing::retry_after`] (the same octets), and after [`Timing::tries`] sends that server
//! counts as down for [`Timing::hold_down`] and the next one is asked; past the job's
//! deadline, or with every server tried, the verdict is `Unreachable`. How many jobs run at
//! once is bounded by the responder (`EapPolicy`'s exchanges in flight).
//!
//! The same servers, failover and hold-down serve `[ipsec] authorize_certificates =
//! "radius"`: each [`AuthzJob`] becomes a password-less Access-Request (Service-Type
//! Authorize-Only) for the certificate identity on a task of its own, and its answer an
//! [`AuthzVerdict`].

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gate64_accounting::radius::Nas;
use gate64_accounting::radius::access::{
    self, AccessReply, AccessRequest, encode_access_request, encode_authorize_request,
    parse_access_reply,
};
use gate64_ike::responder::{
    Authorization, AuthzJob, AuthzOutcome, AuthzVerdict, EapJob, EapOutcome, EapVerdict,
};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use crate::radius::{Server, Timing};

/// The relay: its servers, which of them are held down, and the channel verdicts come back
/// on.
pub struct EapRelay {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<EapVerdict>,
    rx: mpsc::UnboundedReceiver<EapVerdict>,
    authz_tx: mpsc::UnboundedSender<AuthzVerdict>,
    authz_rx: mpsc::UnboundedReceiver<AuthzVerdict>,
}

struct Shared {
    servers: Vec<Server>,
    /// When each server was last found down.
    down: Mutex<Vec<Option<Instant>>>,
    nas_identifier: String,
    timing: Timing,
}

impl std::fmt::Debug for EapRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EapRelay")
            .field("servers", &self.shared.servers)
            .finish_non_exhaustive()
    }
}

impl EapRelay {
    /// A relay to `servers` (in order of preference), naming gate64 `nas_identifier`.
    pub fn new(servers: Vec<Server>, nas_identifier: String, timing: Timing) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let (authz_tx, authz_rx) = mpsc::unbounded_channel();
        let down = Mutex::new(vec![None; servers.len()]);
        EapRelay {
            shared: Arc::new(Shared {
                servers,
                down,
                nas_identifier,
                timing,
            }),
            tx,
            rx,
            authz_tx,
            authz_rx,
        }
    }

    /// Starts relaying `job` (needs a tokio runtime); its verdict comes from
    /// [`EapRelay::verdict`].
    pub fn submit(&self, job: EapJob) {
        let shared = Arc::clone(&self.shared);
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let query = Query {
                peer: job.peer,
                user: &job.user,
                eap: Some((&job.eap_message, job.state.as_deref())),
                deadline: job.deadline,
            };
            let outcome = relay(&shared, &query)
                .await
                .map_or(EapOutcome::Unreachable, outcome);
            // The driver gone: nobody waits for it.
            let _ = tx.send(job.verdict(outcome));
        });
    }

    /// The next verdict.
    pub async fn verdict(&mut self) -> Option<EapVerdict> {
        self.rx.recv().await
    }

    /// Starts authorizing `job`'s certificate identity (needs a tokio runtime); its verdict
    /// comes from [`EapRelay::authz_verdict`].
    pub fn authorize(&self, job: AuthzJob) {
        let shared = Arc::clone(&self.shared);
        let tx = self.authz_tx.clone();
        tokio::spawn(async move {
            let query = Query {
                peer: job.peer,
                user: &job.user,
                eap: None,
                deadline: job.deadline,
            };
            let outcome = match relay(&shared, &query).await {
                Some(AccessReply::Accept { authorization, .. }) => {
                    AuthzOutcome::Accept(authorization_of(authorization))
                }
                // A challenge asks for credentials an authorization has none of.
                Some(AccessReply::Challenge { .. } | AccessReply::Reject { .. }) => {
                    AuthzOutcome::Reject
                }
                None => AuthzOutcome::Unreachable,
            };
            // The driver gone: nobody waits for it.
            let _ = tx.send(job.verdict(outcome));
        });
    }

    /// The next authorization verdict.
    pub async fn authz_verdict(&mut self) -> Option<AuthzVerdict> {
        self.authz_rx.recv().await
    }

    /// The next verdict of either kind, whichever comes first.
    pub async fn next_verdict(&mut self) -> Option<RelayVerdict> {
        tokio::select! {
            Some(v) = self.rx.recv() => Some(RelayVerdict::Eap(v)),
            Some(v) = self.authz_rx.recv() => Some(RelayVerdict::Authz(v)),
            else => None,
        }
    }
}

/// A verdict of the relay: for an EAP message or for a certificate's authorization.
#[derive(Debug)]
pub enum RelayVerdict {
    /// An [`EapJob`]'s.
    Eap(EapVerdict),
    /// An [`AuthzJob`]'s.
    Authz(AuthzVerdict),
}

/// The servers in the order a new job asks them: those not held down first.
fn order(shared: &Shared) -> Vec<usize> {
    let now = Instant::now();
    let down = shared.down.lock().map(|d| d.clone()).unwrap_or_default();
    let held = |i: usize| {
        down.get(i)
            .copied()
            .flatten()
            .is_some_and(|t| now.duration_since(t) < shared.timing.hold_down)
    };
    let n = shared.servers.len();
    let mut out: Vec<usize> = (0..n).filter(|&i| !held(i)).collect();
    out.extend((0..n).filter(|&i| held(i)));
    out
}

/// What one Access-Request asks, taken from an [`EapJob`] or an [`AuthzJob`].
struct Query<'a> {
    peer: SocketAddr,
    user: &'a str,
    /// The EAP message and the State to echo; `None`: authorize `user`, no password.
    eap: Option<(&'a [u8], Option<&'a [u8]>)>,
    deadline: Instant,
}

/// The first reply that verifies, from the servers in [`order`]; `None` when none gave one
/// in time.
async fn relay(shared: &Shared, job: &Query<'_>) -> Option<AccessReply> {
    for i in order(shared) {
        if Instant::now() >= job.deadline {
            break;
        }
        let server = &shared.servers[i];
        match ask(shared, server, job).await {
            Ok(Some(reply)) => {
                mark(shared, i, None);
                return Some(reply);
            }
            Ok(None) => {
                tracing::info!(server = %server.addr, "RADIUS server did not answer an EAP request; trying the next");
            }
            Err(e) => {
                tracing::debug!(server = %server.addr, error = %e, "RADIUS EAP request failed");
            }
        }
        mark(shared, i, Some(Instant::now()));
    }
    None
}

/// Records server `i` as down since `since`, or up (`None`).
fn mark(shared: &Shared, i: usize, since: Option<Instant>) {
    if let Ok(mut down) = shared.down.lock()
        && let Some(d) = down.get_mut(i)
    {
        *d = since;
    }
}

fn outcome(reply: AccessReply) -> EapOutcome {
    match reply {
        AccessReply::Challenge { eap_message, state } => {
            EapOutcome::Challenge { eap_message, state }
        }
        AccessReply::Accept {
            eap_message,
            msk,
            authorization,
        } => EapOutcome::Accept {
            eap_message,
            msk,
            authorization: authorization_of(authorization),
        },
        AccessReply::Reject { .. } => EapOutcome::Reject,
    }
}

/// The responder's view of an Access-Accept's authorization; attributes the codec dropped
/// as malformed are logged here.
pub(crate) fn authorization_of(a: access::Authorization) -> Authorization {
    if a.malformed > 0 {
        tracing::info!(
            dropped = a.malformed,
            "RADIUS Access-Accept: malformed authorization attributes dropped"
        );
    }
    Authorization {
        framed_ip: a.framed_ip,
        framed_ipv6: a.framed_ipv6,
        framed_ipv6_prefix: a.framed_ipv6_prefix,
        session_timeout: a.session_timeout,
        filter_id: a.filter_id,
        class: a.class,
    }
}

/// One server: up to `tries` sends, each followed by `retry_after` of listening; `None` when
/// it never gave a reply that verifies.
async fn ask(shared: &Shared, server: &Server, job: &Query<'_>) -> io::Result<Option<AccessReply>> {
    let any: SocketAddr = match server.addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(any).await?;
    socket.connect(server.addr).await?;
    let nas_address: Option<IpAddr> = socket.local_addr().ok().map(|a| a.ip());
    let mut random = [0u8; 17];
    gate64_sys::random::getrandom(&mut random)?;
    let identifier = random[0];
    let mut authenticator = [0u8; 16];
    authenticator.copy_from_slice(&random[1..]);
    let calling = job.peer.ip().to_string();
    let nas = Nas {
        identifier: &shared.nas_identifier,
        address: nas_address,
    };
    let mut packet = Vec::new();
    let encoded = match job.eap {
        Some((eap_message, state)) => {
            let request = AccessRequest {
                user_name: job.user,
                calling_station: &calling,
                eap_message,
                state,
            };
            encode_access_request(
                identifier,
                &authenticator,
                &request,
                &nas,
                &server.secret,
                &mut packet,
            )
        }
        None => encode_authorize_request(
            identifier,
            &authenticator,
            (job.user, &calling),
            &nas,
            &server.secret,
            &mut packet,
        ),
    };
    encoded.map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "EAP message or User-Name too long",
        )
    })?;
    let mut buf = vec![0u8; gate64_accounting::radius::MAX_PACKET];
    for _ in 0..shared.timing.tries.max(1) {
        let now = Instant::now();
        if now >= job.deadline {
            return Ok(None);
        }
        socket.send(&packet).await?;
        let until = (now + shared.timing.retry_after).min(job.deadline);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left == Duration::ZERO {
                break;
            }
            let Ok(received) = tokio::time::timeout(left, socket.recv(&mut buf)).await else {
                break;
            };
            let n = received?;
            match parse_access_reply(&buf[..n], identifier, &authenticator, &server.secret) {
                Ok(reply) => return Ok(Some(reply)),
                Err(e) => {
                    tracing::debug!(server = %server.addr, error = ?e, "RADIUS reply ignored");
                }
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests;
