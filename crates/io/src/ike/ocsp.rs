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
//! their nextUpdate, at most [`MAX_CACHED`] of them, so a client's second tunnel and its
//! reconnects cost no lookup. An answer without nextUpdate is refused once its thisUpdate is
//! older than `[ipsec] ocsp_max_age_secs` (a captured `good` answer, replayed over plain
//! HTTP, would otherwise keep a revoked certificate in forever), and is reused for
//! [`CACHE_WITHOUT_NEXT_UPDATE`] at most, never past that age.
//! A responder URL that could not be reached is not asked again for [`FAILURE_HOLDOFF`]:
//! the jobs queued behind the first do not each wait out the timeout.
//! The encoding, the decoding and the signature checks are [`gate64_ike::auth::ocsp`]'s; this
//! module only moves bytes.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

pub use gate64_dataplane::OcspResult;
use gate64_ike::auth::ocsp::{self, CertId, CertStatus, OcspAnswer};
use gate64_ike::auth::{AuthError, OcspQuery};
use gate64_ike::responder::{AuthVerdict, JobWatch};

/// Longest lookup, from the connect to the end of the answer.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest answer read (an OCSP response with a delegated signer is ~1 KB).
pub const MAX_RESPONSE: usize = 64 * 1024;
/// How long an answer without nextUpdate is reused at most (less when it reaches the maximum
/// age sooner).
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

/// What the lookups do: `[ipsec] ocsp`, `ocsp_url` and `ocsp_max_age_secs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OcspRule {
    /// Whether to look up, and what no answer means.
    pub mode: OcspMode,
    /// The responder asked about every certificate; `None` = each certificate's own.
    pub url: Option<String>,
    /// How old (from its thisUpdate) an answer without nextUpdate may be.
    pub max_age: Duration,
}

/// The lookups of one IKE driver: its rule, the cache and counters.
#[derive(Debug)]
pub struct OcspChecker {
    /// The rule: a reload changes it.
    rule: Mutex<OcspRule>,
    /// Answers, each with when it was taken.
    cache: Mutex<HashMap<CertId, (OcspAnswer, SystemTime)>>,
    /// Responder URLs that could not be reached, until when they are not asked.
    failed: Mutex<HashMap<String, SystemTime>>,
    counts: [AtomicU64; OcspResult::ALL.len()],
}

impl OcspChecker {
    /// A checker with `rule`.
    pub fn new(rule: OcspRule) -> Self {
        OcspChecker {
            rule: Mutex::new(rule),
            cache: Mutex::new(HashMap::new()),
            failed: Mutex::new(HashMap::new()),
            counts: Default::default(),
        }
    }

    /// A new rule (a reload), for verifications from now on; the cached answers stay (an
    /// answer without nextUpdate is held to the new maximum age).
    pub fn set_rule(&self, rule: OcspRule) {
        *self.rule.lock().unwrap_or_else(PoisonError::into_inner) = rule;
    }

    fn rule(&self) -> OcspRule {
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
    /// cached answer) and refuses the client when the rule says so. Blocks for the lookup, at
    /// most [`LOOKUP_TIMEOUT`] and never past the IKE SA's deadline (`watch`): with no time
    /// left the verdict is skipped, its IKE SA being gone.
    pub fn apply(&self, verdict: &mut AuthVerdict, now: SystemTime, watch: &JobWatch) {
        let rule = self.rule();
        if rule.mode == OcspMode::Off {
            return;
        }
        let Some(query) = verdict.ocsp_query().cloned() else {
            return;
        };
        let within = watch
            .deadline()
            .saturating_duration_since(Instant::now())
            .min(LOOKUP_TIMEOUT);
        if within.is_zero() {
            verdict.skip();
            return;
        }
        if let Err(why) = self.decide(&query, rule, now, within) {
            verdict.refuse(why);
        }
    }

    /// `Ok` when the client may go on, else why not.
    fn decide(
        &self,
        query: &OcspQuery,
        OcspRule { mode, url, max_age }: OcspRule,
        now: SystemTime,
        within: Duration,
    ) -> Result<(), AuthError> {
        let answer = match self.answer(query, url, max_age, now, within) {
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

    /// The answer for `query`: cached while valid, else asked for within `within` (and
    /// cached).
    fn answer(
        &self,
        query: &OcspQuery,
        url: Option<String>,
        max_age: Duration,
        now: SystemTime,
        within: Duration,
    ) -> Result<OcspAnswer, String> {
        let id = CertId::new(&query.leaf, query.issuer())
            .map_err(|e| format!("the certificate has no usable CertID: {e}"))?;
        if let Some((answer, taken)) = self.lock().get(&id)
            && now < reuse_until(answer, *taken, max_age)
        {
            self.counted(OcspResult::Cached);
            return Ok(answer.clone());
        }
        let url = url.or_else(|| ocsp::responder_url(&query.leaf));
        let Some(url) = url else {
            self.counted(OcspResult::Unavailable);
            return Err("the certificate names no OCSP responder and ocsp_url is not set".into());
        };
        let body = match self.post_unless_failed(&url, &ocsp::request(&id), now, within) {
            Ok(body) => body,
            Err(e) => {
                self.counted(OcspResult::Unavailable);
                return Err(format!("{url}: {e}"));
            }
        };
        let answer = match ocsp::verify_response(&body, &id, query.issuer(), now, max_age) {
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
        let mut cache = self.lock();
        if cache.len() >= MAX_CACHED {
            cache.retain(|_, (answer, taken)| now < reuse_until(answer, *taken, max_age));
        }
        if cache.len() < MAX_CACHED {
            cache.insert(id, (answer.clone(), now));
        }
        Ok(answer)
    }

    /// [`post`] within `within`, unless `url` failed within [`FAILURE_HOLDOFF`]; a failure
    /// with the whole [`LOOKUP_TIMEOUT`] to answer is remembered (one cut short by an IKE SA's
    /// deadline says little of the responder).
    fn post_unless_failed(
        &self,
        url: &str,
        request: &[u8],
        now: SystemTime,
        within: Duration,
    ) -> Result<Vec<u8>, String> {
        let failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        if failed.get(url).is_some_and(|until| now < *until) {
            return Err("unreachable a moment ago; not asked again yet".into());
        }
        drop(failed);
        let result = post(url, request, within);
        let mut failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        match &result {
            Ok(_) => {
                failed.remove(url);
            }
            Err(_) if within < LOOKUP_TIMEOUT => {}
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

/// Until when `answer`, taken at `taken`, is reused: its nextUpdate; without one,
/// [`CACHE_WITHOUT_NEXT_UPDATE`] after it was taken and never past `max_age` after its
/// thisUpdate (when [`ocsp::verify_response`] would refuse it).
fn reuse_until(answer: &OcspAnswer, taken: SystemTime, max_age: Duration) -> SystemTime {
    match answer.next_update {
        Some(next) => next,
        None => {
            let brief = taken + CACHE_WITHOUT_NEXT_UPDATE;
            // An age past what SystemTime holds never comes.
            answer
                .this_update
                .checked_add(max_age)
                .map_or(brief, |aged| aged.min(brief))
        }
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
/// 200 answer, all within `within`.
fn post(url: &str, request: &[u8], within: Duration) -> Result<Vec<u8>, String> {
    let (host, port, path) = parse_url(url).ok_or("not an http:// URL")?;
    if within.is_zero() {
        return Err("no time left to ask".into());
    }
    let deadline = Instant::now() + within;
    let addr = resolve(&host, port, within)?;
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(format!("resolving {host} took {within:?}"));
    }
    let mut tcp = TcpStream::connect_timeout(&addr, left).map_err(|e| e.to_string())?;
    tcp.set_write_timeout(Some(left))
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
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no complete answer within {within:?}"));
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
        let (_held, addr) = refusing_port();
        assert!(post(&format!("http://{addr}/"), b"x", LOOKUP_TIMEOUT).is_err());
    }

    #[test]
    fn names_resolve_within_the_bound() {
        let addr = resolve("localhost", 80, LOOKUP_TIMEOUT).expect("localhost");
        assert_eq!(addr.port(), 80);
        assert!(resolve("127.0.0.1", 1, Duration::from_secs(1)).is_ok());
    }

    /// A loopback port nobody listens on: the socket is bound but never listens, so a
    /// connect to it is refused at once, and no other test can take the port while the
    /// returned socket lives.
    fn refusing_port() -> (socket2::Socket, std::net::SocketAddr) {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        s.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .expect("bind");
        let addr = s
            .local_addr()
            .expect("addr")
            .as_socket()
            .expect("an IP address");
        (s, addr)
    }

    fn rule(mode: OcspMode, url: Option<String>) -> OcspRule {
        OcspRule {
            mode,
            url,
            max_age: Duration::from_secs(3600),
        }
    }

    fn answer(this_update: SystemTime, next_update: Option<SystemTime>) -> OcspAnswer {
        OcspAnswer {
            status: CertStatus::Good,
            this_update,
            next_update,
        }
    }

    #[test]
    fn answers_without_next_update_are_reused_briefly_and_never_past_the_maximum_age() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let hour = Duration::from_secs(3600);
        // Fresh: the short reuse bound.
        assert_eq!(
            reuse_until(&answer(t0, None), t0, hour),
            t0 + CACHE_WITHOUT_NEXT_UPDATE
        );
        // Made 59 minutes before it was taken: a minute left.
        let taken = t0 + Duration::from_secs(59 * 60);
        assert_eq!(reuse_until(&answer(t0, None), taken, hour), t0 + hour);
        // Already past the maximum age: not reused at all.
        assert!(reuse_until(&answer(t0, None), t0 + 2 * hour, hour) <= t0 + 2 * hour);
        // With nextUpdate, that decides.
        let next = t0 + 100 * hour;
        assert_eq!(reuse_until(&answer(t0, Some(next)), t0, hour), next);
        // A maximum age beyond what SystemTime holds does not panic.
        assert_eq!(
            reuse_until(&answer(t0, None), t0, Duration::MAX),
            t0 + CACHE_WITHOUT_NEXT_UPDATE
        );
    }

    /// A query about a certificate rcgen makes, and its CertID.
    fn query() -> (OcspQuery, CertId) {
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let leaf_key = rcgen::KeyPair::generate().expect("key");
        let leaf = rcgen::CertificateParams::new(vec!["client.example".into()])
            .expect("params")
            .self_signed(&leaf_key)
            .expect("leaf");
        let query = OcspQuery {
            leaf: leaf.der().to_vec(),
            issuer_name: vec![0x30, 0x00],
            issuer_spki: rcgen::PublicKeyData::subject_public_key_info(&ca_key),
        };
        let id = CertId::new(&query.leaf, query.issuer()).expect("CertID");
        (query, id)
    }

    // Under `require`, a cached `good` answer without nextUpdate lets a client in only while
    // it is younger than the maximum age; after that the responder is asked (here: it cannot
    // be reached), and the client is refused.
    #[test]
    fn a_cached_answer_without_next_update_stops_counting_at_the_maximum_age() {
        let (_held, addr) = refusing_port();
        let url = format!("http://{addr}/");
        let (query, id) = query();
        let now = SystemTime::now();
        let hour = Duration::from_secs(3600);
        let checker = OcspChecker::new(rule(OcspMode::Require, Some(url.clone())));
        checker
            .lock()
            .insert(id.clone(), (answer(now - hour / 2, None), now));
        assert_eq!(
            checker.decide(&query, checker.rule(), now, LOOKUP_TIMEOUT),
            Ok(())
        );
        assert_eq!(checker.count(OcspResult::Cached), 1);

        // Taken a moment ago, but made two hours before: not reused.
        checker
            .lock()
            .insert(id.clone(), (answer(now - 2 * hour, None), now));
        assert!(matches!(
            checker.decide(&query, checker.rule(), now, LOOKUP_TIMEOUT),
            Err(AuthError::OcspUnavailable(_))
        ));
        assert_eq!(checker.count(OcspResult::Cached), 1);

        // A reload that shortens the maximum age holds cached answers to it.
        let checker = OcspChecker::new(rule(OcspMode::Require, Some(url.clone())));
        checker
            .lock()
            .insert(id, (answer(now - Duration::from_secs(120), None), now));
        checker.set_rule(OcspRule {
            max_age: Duration::from_secs(60),
            ..rule(OcspMode::Require, Some(url))
        });
        assert!(
            checker
                .decide(&query, checker.rule(), now, LOOKUP_TIMEOUT)
                .is_err()
        );
    }

    // A responder that accepts and never answers holds the first lookup its timeout; the
    // next lookups within the holdoff do not ask it, and fail at once.
    #[test]
    fn a_failed_responder_is_not_asked_again_for_a_while() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/", listener.local_addr().expect("addr"));
        let checker = OcspChecker::new(rule(OcspMode::Soft, None));
        let now = SystemTime::now();
        assert!(
            checker
                .post_unless_failed(&url, b"x", now, LOOKUP_TIMEOUT)
                .is_err()
        );
        for _ in 0..20 {
            assert!(
                checker
                    .post_unless_failed(&url, b"x", now, LOOKUP_TIMEOUT)
                    .is_err()
            );
        }
        listener.set_nonblocking(true).expect("nonblocking");
        let asked = std::iter::from_fn(|| listener.accept().ok()).count();
        assert_eq!(asked, 1, "only the first lookup connected");
        assert_eq!(checker.failed.lock().expect("lock").len(), 1);
    }

    // A lookup cut short by its IKE SA's deadline ends by then, and is not held against the
    // responder: the next lookup asks it again.
    #[test]
    fn a_lookup_ends_by_its_deadline_and_a_short_one_is_not_a_failure() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/", listener.local_addr().expect("addr"));
        let checker = OcspChecker::new(rule(OcspMode::Soft, None));
        let now = SystemTime::now();
        let started = Instant::now();
        let within = Duration::from_millis(300);
        assert!(checker.post_unless_failed(&url, b"x", now, within).is_err());
        assert!(
            started.elapsed() < LOOKUP_TIMEOUT,
            "{:?}",
            started.elapsed()
        );
        assert!(checker.failed.lock().expect("lock").is_empty());
        assert!(checker.post_unless_failed(&url, b"x", now, within).is_err());
        listener.set_nonblocking(true).expect("nonblocking");
        let asked = std::iter::from_fn(|| listener.accept().ok()).count();
        assert_eq!(asked, 2, "both lookups asked the responder");
        assert!(post(&url, b"x", Duration::ZERO).is_err());
    }
}
