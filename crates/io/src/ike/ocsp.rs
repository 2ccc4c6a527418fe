//! OCSP lookups (RFC 6960) for the IKE verification threads: after a client's chain and AUTH
//! verified, the thread that ran the job asks the certificate's OCSP responder (`[ipsec]
//! ocsp_url`, else the one its Authority Information Access names) whether it is revoked, over
//! HTTP POST (RFC 6960 Appendix A.1), and applies `[ipsec] ocsp`:
//!
//! - `soft`: a `revoked` answer refuses the client; a responder that cannot be reached, an
//!   answer that does not verify, or `unknown`, lets it in (counted, logged);
//! - `require`: only a verified `good` answer lets it in.
//!
//! The lookup runs on the verification thread, beside the IKE state machine, which keeps
//! answering other clients meanwhile; it takes at most [`LOOKUP_TIMEOUT`] from resolving the
//! responder's name (on a thread of its own, the system resolver having no timeout) to
//! the end of the answer, which may be at most [`MAX_RESPONSE`] bytes, so a responder that
//! trickles its answer holds a thread no longer than one that does not answer. Answers are cached until
//! their nextUpdate (or [`CACHE_WITHOUT_NEXT_UPDATE`] when they carry none), at most
//! [`MAX_CACHED`] of them, so a client's second tunnel and its reconnects cost no lookup.
//! A responder URL that could not be reached is not asked again for [`FAILURE_HOLDOFF`]:
//! the jobs queued behind the first do not each wait out the timeout.
//! The encoding, the decoding and the signature checks are [`gate64_ike::auth::ocsp`]'s; this
//! module only moves bytes.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

pub use gate64_dataplane::OcspResult;
use gate64_ike::auth::ocsp::{self, CertId, CertStatus, OcspAnswer};
use gate64_ike::auth::{AuthError, OcspQuery};
use gate64_ike::responder::AuthVerdict;

/// Longest lookup, from the connect to the end of the answer.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest answer read (an OCSP response with a delegated signer is ~1 KB).
pub const MAX_RESPONSE: usize = 64 * 1024;
/// How long an answer without nextUpdate is reused.
pub const CACHE_WITHOUT_NEXT_UPDATE: Duration = Duration::from_secs(300);
/// How long a responder that could not be reached (timeout, refused, unreachable) is not
/// asked again: each job behind the first would otherwise wait its own timeout.
pub const FAILURE_HOLDOFF: Duration = Duration::from_secs(30);
/// Responder URLs remembered as failed at most.
const MAX_FAILED: usize = 64;
/// Answers cached at most (one per client certificate looked up).
pub const MAX_CACHED: usize = 100_000;

/// `[ipsec] ocsp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OcspMode {
    /// No lookups.
    Off,
    /// Revoked refuses; no answer lets the client in.
    Soft,
    /// Only a verified `good` answer lets the client in.
    Require,
}

/// The lookups of one IKE driver: its rule, the responder override, the cache and counters.
#[derive(Debug)]
pub struct OcspChecker {
    /// The rule and the responder override: a reload changes them.
    rule: Mutex<(OcspMode, Option<String>)>,
    cache: Mutex<HashMap<CertId, (OcspAnswer, SystemTime)>>,
    /// Responder URLs that could not be reached, until when they are not asked.
    failed: Mutex<HashMap<String, SystemTime>>,
    counts: [AtomicU64; OcspResult::ALL.len()],
}

impl OcspChecker {
    /// A checker with `mode`, asking `url` (`[ipsec] ocsp_url`) when set, else each
    /// certificate's own responder.
    pub fn new(mode: OcspMode, url: Option<String>) -> Self {
        OcspChecker {
            rule: Mutex::new((mode, url)),
            cache: Mutex::new(HashMap::new()),
            failed: Mutex::new(HashMap::new()),
            counts: Default::default(),
        }
    }

    /// A new rule and responder override (a reload), for verifications from now on; the
    /// cached answers stay.
    pub fn set_rule(&self, mode: OcspMode, url: Option<String>) {
        *self.rule.lock().unwrap_or_else(PoisonError::into_inner) = (mode, url);
    }

    fn rule(&self) -> (OcspMode, Option<String>) {
        self.rule
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Lookups that ended in `result` so far.
    pub fn count(&self, result: OcspResult) -> u64 {
        self.counts[result as usize].load(Ordering::Relaxed)
    }

    fn counted(&self, result: OcspResult) {
        self.counts[result as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Applies the rule to a verdict whose certificate verified: looks it up (or takes the
    /// cached answer) and refuses the client when the rule says so. Blocks for the lookup.
    pub fn apply(&self, verdict: &mut AuthVerdict, now: SystemTime) {
        let (mode, url) = self.rule();
        if mode == OcspMode::Off {
            return;
        }
        let Some(query) = verdict.ocsp_query().cloned() else {
            return;
        };
        if let Err(why) = self.decide(&query, (mode, url), now) {
            verdict.refuse(why);
        }
    }

    /// `Ok` when the client may go on, else why not.
    fn decide(
        &self,
        query: &OcspQuery,
        (mode, url): (OcspMode, Option<String>),
        now: SystemTime,
    ) -> Result<(), AuthError> {
        let answer = match self.answer(query, url, now) {
            Ok(answer) => answer.status,
            Err(why) => {
                tracing::info!(error = %why, "OCSP: no answer for a client certificate");
                return match mode {
                    OcspMode::Require => Err(AuthError::OcspUnavailable(why)),
                    _ => Ok(()),
                };
            }
        };
        match (answer, mode) {
            (CertStatus::Good, _) => Ok(()),
            (CertStatus::Revoked, _) => Err(AuthError::Revoked),
            (CertStatus::Unknown, OcspMode::Require) => Err(AuthError::OcspUnavailable(
                "the responder does not know the certificate".into(),
            )),
            (CertStatus::Unknown, _) => Ok(()),
        }
    }

    /// The answer for `query`: cached while valid, else asked for (and cached).
    fn answer(
        &self,
        query: &OcspQuery,
        url: Option<String>,
        now: SystemTime,
    ) -> Result<OcspAnswer, String> {
        let id = CertId::new(&query.leaf, query.issuer())
            .map_err(|e| format!("the certificate has no usable CertID: {e}"))?;
        if let Some((answer, until)) = self.lock().get(&id)
            && now < *until
        {
            self.counted(OcspResult::Cached);
            return Ok(answer.clone());
        }
        let url = url.or_else(|| ocsp::responder_url(&query.leaf));
        let Some(url) = url else {
            self.counted(OcspResult::Unavailable);
            return Err("the certificate names no OCSP responder and ocsp_url is not set".into());
        };
        let body = match self.post_unless_failed(&url, &ocsp::request(&id), now) {
            Ok(body) => body,
            Err(e) => {
                self.counted(OcspResult::Unavailable);
                return Err(format!("{url}: {e}"));
            }
        };
        let answer = match ocsp::verify_response(&body, &id, query.issuer(), now) {
            Ok(answer) => answer,
            Err(e) => {
                self.counted(OcspResult::Unavailable);
                return Err(format!("{url}: answer refused: {e}"));
            }
        };
        self.counted(match answer.status {
            CertStatus::Good => OcspResult::Good,
            CertStatus::Revoked => OcspResult::Revoked,
            CertStatus::Unknown => OcspResult::Unknown,
        });
        let until = answer
            .next_update
            .unwrap_or(now + CACHE_WITHOUT_NEXT_UPDATE);
        let mut cache = self.lock();
        if cache.len() >= MAX_CACHED {
            cache.retain(|_, (_, until)| now < *until);
        }
        if cache.len() < MAX_CACHED {
            cache.insert(id, (answer.clone(), until));
        }
        Ok(answer)
    }

    /// [`post`], unless `url` failed within [`FAILURE_HOLDOFF`]; a failure is remembered.
    fn post_unless_failed(
        &self,
        url: &str,
        request: &[u8],
        now: SystemTime,
    ) -> Result<Vec<u8>, String> {
        let failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        if failed.get(url).is_some_and(|until| now < *until) {
            return Err("unreachable a moment ago; not asked again yet".into());
        }
        drop(failed);
        let result = post(url, request);
        let mut failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        match &result {
            Ok(_) => {
                failed.remove(url);
            }
            Err(_) => {
                if failed.len() >= MAX_FAILED {
                    failed.retain(|_, until| now < *until);
                }
                if failed.len() < MAX_FAILED {
                    failed.insert(url.to_owned(), now + FAILURE_HOLDOFF);
                }
            }
        }
        result
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CertId, (OcspAnswer, SystemTime)>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `http://HOST[:PORT][/PATH]` split into (host, port, path); `None` for anything else (OCSP
/// is asked over plain HTTP: the answer is signed).
fn parse_url(url: &str) -> Option<(String, u16, String)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => 80,
            None => return None,
        };
        (host.to_owned(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), port.parse().ok()?),
            None => (authority.to_owned(), 80),
        }
    };
    if host.is_empty() || path.contains(['\r', '\n', ' ']) {
        return None;
    }
    Some((host, port, path.to_owned()))
}

/// The first address of `host`, or an error once `within` passed. An address literal needs
/// no lookup; a name goes to the system resolver, which has no timeout of its own, so it runs
/// on a thread of its own that is left to finish alone.
fn resolve(host: &str, port: u16, within: Duration) -> Result<SocketAddr, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let name = host.to_owned();
    std::thread::Builder::new()
        .name("gate64-ocsp-dns".into())
        .spawn(move || {
            let first = (name.as_str(), port)
                .to_socket_addrs()
                .map(|mut a| a.next());
            let _ = tx.send(first);
        })
        .map_err(|e| format!("resolving {host}: {e}"))?;
    match rx.recv_timeout(within) {
        Ok(Ok(Some(addr))) => Ok(addr),
        Ok(Ok(None)) => Err(format!("{host} has no address")),
        Ok(Err(e)) => Err(format!("resolving {host}: {e}")),
        Err(_) => Err(format!("resolving {host}: no answer within {within:?}")),
    }
}

/// POSTs `request` to `url` (HTTP/1.0, one request per connection) and returns the body of a
/// 200 answer.
fn post(url: &str, request: &[u8]) -> Result<Vec<u8>, String> {
    let (host, port, path) = parse_url(url).ok_or("not an http:// URL")?;
    let deadline = std::time::Instant::now() + LOOKUP_TIMEOUT;
    let addr = resolve(&host, port, LOOKUP_TIMEOUT)?;
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    if left.is_zero() {
        return Err(format!("resolving {host} took {LOOKUP_TIMEOUT:?}"));
    }
    let mut tcp = TcpStream::connect_timeout(&addr, left).map_err(|e| e.to_string())?;
    tcp.set_write_timeout(Some(LOOKUP_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let host_header = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let head = format!(
        "POST {path} HTTP/1.0\r\nHost: {host_header}\r\nContent-Type: application/ocsp-request\r\n\
         Content-Length: {}\r\n\r\n",
        request.len()
    );
    tcp.write_all(head.as_bytes())
        .and_then(|()| tcp.write_all(request))
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(format!("no complete answer within {LOOKUP_TIMEOUT:?}"));
        }
        tcp.set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        match tcp.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) if answer.len() + n <= MAX_RESPONSE + 8192 => {
                answer.extend_from_slice(&chunk[..n]);
            }
            Ok(_) => return Err(format!("answer longer than {MAX_RESPONSE} bytes")),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    body_of(&answer)
}

/// The body of an HTTP/1.x 200 answer (up to [`MAX_RESPONSE`] bytes), else why not.
fn body_of(answer: &[u8]) -> Result<Vec<u8>, String> {
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no complete HTTP answer")?;
    let head = String::from_utf8_lossy(&answer[..end]);
    let status = head.lines().next().unwrap_or_default();
    let code = status.split_whitespace().nth(1).unwrap_or_default();
    if !status.starts_with("HTTP/1.") || code != "200" {
        return Err(format!(
            "HTTP answer {:?}",
            status.chars().take(64).collect::<String>()
        ));
    }
    let body = &answer[end + 4..];
    if body.len() > MAX_RESPONSE {
        return Err(format!("answer longer than {MAX_RESPONSE} bytes"));
    }
    Ok(body.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_of_responders() {
        assert_eq!(
            parse_url("http://[2001:db8::99]:8888"),
            Some(("2001:db8::99".into(), 8888, "/".into()))
        );
        assert_eq!(
            parse_url("http://ocsp.example.com/ca1"),
            Some(("ocsp.example.com".into(), 80, "/ca1".into()))
        );
        assert_eq!(
            parse_url("http://10.0.0.1:8080/a/b"),
            Some(("10.0.0.1".into(), 8080, "/a/b".into()))
        );
        for bad in [
            "https://ocsp.example.com/",
            "ldap://x",
            "http://",
            "http://[2001:db8::1",
            "http://[::1]x",
            "http://h:notaport/",
            "http://h/a b",
            "http://h/a\r\nX: y",
        ] {
            assert_eq!(parse_url(bad), None, "{bad}");
        }
    }

    #[test]
    fn bodies_of_http_answers() {
        assert_eq!(
            body_of(b"HTTP/1.0 200 OK\r\nContent-Type: application/ocsp-response\r\n\r\nabc"),
            Ok(b"abc".to_vec())
        );
        assert!(body_of(b"HTTP/1.0 404 Not Found\r\n\r\n").is_err());
        assert!(body_of(b"HTTP/1.0 200 OK\r\nno end").is_err());
        assert!(body_of(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(body_of(b"").is_err());
        let mut long = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        long.resize(long.len() + MAX_RESPONSE + 1, 0);
        assert!(body_of(&long).is_err());
    }

    #[test]
    fn an_unreachable_responder_is_an_error() {
        // A port on loopback nobody listens on: refused at once.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        assert!(post(&format!("http://127.0.0.1:{port}/"), b"x").is_err());
    }

    #[test]
    fn names_resolve_within_the_bound() {
        let addr = resolve("localhost", 80, LOOKUP_TIMEOUT).expect("localhost");
        assert_eq!(addr.port(), 80);
        assert!(resolve("127.0.0.1", 1, Duration::from_secs(1)).is_ok());
    }

    // A responder that accepts and never answers holds the first lookup its timeout; the
    // next lookups within the holdoff do not ask it, and fail at once.
    #[test]
    fn a_failed_responder_is_not_asked_again_for_a_while() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/", listener.local_addr().expect("addr"));
        let checker = OcspChecker::new(OcspMode::Soft, None);
        let now = SystemTime::now();
        assert!(checker.post_unless_failed(&url, b"x", now).is_err());
        for _ in 0..20 {
            assert!(checker.post_unless_failed(&url, b"x", now).is_err());
        }
        listener.set_nonblocking(true).expect("nonblocking");
        let asked = std::iter::from_fn(|| listener.accept().ok()).count();
        assert_eq!(asked, 1, "only the first lookup connected");
        assert_eq!(checker.failed.lock().expect("lock").len(), 1);
    }
}
