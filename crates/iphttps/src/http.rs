//! The HTTP/1.1 preamble of an IP-HTTPS connection ([MS-IPHTTPS] §3.1.5.2, §3.2.5.1, §4.1).
//!
//! The client sends one request head and never a body of its own: the "body" is the endless
//! stream of IPv6 packets, announced with `Content-Length: 18446744073709551615` (2^64 − 1,
//! read as "unbounded"). The server answers one `200 OK` head without `Content-Length` or
//! chunked encoding, and its "body" is likewise the packet stream. So these functions only
//! ever look at the head and report how many bytes it took; whatever follows belongs to
//! [`crate::framing`]. Nothing here buffers a body.
//!
//! Limits: at most [`MAX_HEADERS`] headers and [`MAX_HEAD_LEN`] bytes of head, so a peer
//! cannot make us hold or scan more than 8 KiB before it is authenticated by the request.

use std::fmt::Write as _;

/// The Content-Length IP-HTTPS clients send: 2^64 − 1, meaning "unbounded" (§3.1.5.2).
pub const UNBOUNDED_CONTENT_LENGTH: u64 = u64::MAX;
/// Most headers accepted in a request or response head.
pub const MAX_HEADERS: usize = 32;
/// Most bytes of head (request line or status line, headers and the blank line).
pub const MAX_HEAD_LEN: usize = 8 * 1024;
/// The path Windows DirectAccess clients use (`https://<fqdn>:443/IPHTTPS`).
pub const DEFAULT_PATH: &str = "/IPHTTPS";
/// The `Server` header value Windows servers send (§3.2.5.1, example §4.1).
pub const SERVER_HEADER: &str = "Microsoft-HTTPAPI/2.0";

/// A client's request head, accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The `Host` header, when present.
    pub host: Option<String>,
    /// The `Content-Length` header, when present ([`UNBOUNDED_CONTENT_LENGTH`] from real
    /// clients).
    pub content_length: Option<u64>,
}

impl Request {
    /// True when the client announced the unbounded (2^64 − 1) body.
    pub fn is_unbounded(&self) -> bool {
        self.content_length == Some(UNBOUNDED_CONTENT_LENGTH)
    }
}

/// Why a request or response head was refused. Every variant is the peer's fault; on the
/// server, [`HttpError::status`] is what goes back before closing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// Not HTTP/1.x syntax (400).
    #[error("malformed HTTP head")]
    Malformed,
    /// A method other than `POST` (405).
    #[error("method is not POST")]
    MethodNotAllowed,
    /// A path other than the configured one (404).
    #[error("path is not the IP-HTTPS path")]
    NotFound,
    /// Not HTTP/1.1 (505).
    #[error("HTTP version is not 1.1")]
    VersionNotSupported,
    /// More than [`MAX_HEAD_LEN`] bytes or [`MAX_HEADERS`] headers (431).
    #[error("HTTP head too large")]
    HeadTooLarge,
    /// A `Content-Length` that is not a decimal `u64`, or two different ones (400).
    #[error("invalid Content-Length")]
    BadContentLength,
    /// A `Transfer-Encoding` header: the packet stream is never chunked (501).
    #[error("Transfer-Encoding is not supported")]
    TransferEncoding,
}

impl HttpError {
    /// The status code a server answers with.
    pub fn status(self) -> u16 {
        match self {
            HttpError::Malformed | HttpError::BadContentLength => 400,
            HttpError::NotFound => 404,
            HttpError::MethodNotAllowed => 405,
            HttpError::HeadTooLarge => 431,
            HttpError::TransferEncoding => 501,
            HttpError::VersionNotSupported => 505,
        }
    }
}

/// Server side: parses the client's request head at the start of `buf`.
///
/// Returns `Ok(None)` while the head is incomplete (read more and call again with the whole
/// buffer), or the request and the number of head bytes; bytes after them are packets.
///
/// Checks, in order: syntax and size, `POST` (else [`HttpError::MethodNotAllowed`]), the path
/// (else [`HttpError::NotFound`]), HTTP/1.1, `Content-Length` and `Transfer-Encoding`. The path
/// is compared ASCII case-insensitively, as HTTP.sys matches its URL reservations, so a policy
/// saying `/iphttps` still reaches a server configured with `/IPHTTPS`. A missing `Host` is
/// tolerated (recorded as `None`): the probes in the wild differ, and the host carries no
/// meaning for us.
pub fn parse_request(
    buf: &[u8],
    expected_path: &str,
) -> Result<Option<(Request, usize)>, HttpError> {
    let window = &buf[..buf.len().min(MAX_HEAD_LEN)];
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let consumed = match req.parse(window) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if window.len() == MAX_HEAD_LEN => {
            return Err(HttpError::HeadTooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(map_parse_error(e)),
    };
    // httparse fills method, path and version before it reports Complete.
    if req.method != Some("POST") {
        return Err(HttpError::MethodNotAllowed);
    }
    if !req
        .path
        .is_some_and(|p| p.eq_ignore_ascii_case(expected_path))
    {
        return Err(HttpError::NotFound);
    }
    if req.version != Some(1) {
        return Err(HttpError::VersionNotSupported);
    }
    let mut host = None;
    let mut content_length = None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = parse_content_length(h.value)?;
            if content_length.is_some_and(|c| c != v) {
                return Err(HttpError::BadContentLength);
            }
            content_length = Some(v);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(HttpError::TransferEncoding);
        } else if h.name.eq_ignore_ascii_case("host") {
            let v = std::str::from_utf8(h.value).map_err(|_| HttpError::Malformed)?;
            host = Some(v.to_owned());
        }
    }
    Ok(Some((
        Request {
            host,
            content_length,
        },
        consumed,
    )))
}

/// Server side: the complete answer for an error `status` (400, 404, 405, 431, 501, 505;
/// anything else gives 500), with `Content-Length: 0` and `Connection: close`. Send it, then
/// close the connection.
pub fn error_response(status: u16) -> &'static [u8] {
    match status {
        400 => b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        404 => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        405 => {
            b"HTTP/1.1 405 Method Not Allowed\r\nAllow: POST\r\nContent-Length: 0\r\n\
              Connection: close\r\n\r\n"
        }
        431 => {
            b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n\
              Connection: close\r\n\r\n"
        }
        501 => b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        505 => {
            b"HTTP/1.1 505 HTTP Version Not Supported\r\nContent-Length: 0\r\n\
              Connection: close\r\n\r\n"
        }
        _ => {
            b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        }
    }
}

/// Server side: appends the `200 OK` head of §3.2.5.1 to `out`: `Server` and `Date` only, no
/// `Content-Length` and no chunking, since the response body is the endless packet stream.
/// `date` is an RFC 1123 date such as [`http_date`] makes (the crate reads no clock).
pub fn ok_response(date: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\nServer: ");
    out.extend_from_slice(SERVER_HEADER.as_bytes());
    out.extend_from_slice(b"\r\nDate: ");
    out.extend_from_slice(date.as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
}

/// Formats seconds since the Unix epoch as an RFC 1123 / RFC 9110 §5.6.7 IMF-fixdate, e.g.
/// `Sun, 06 Nov 1994 08:49:37 GMT`. Dates past year 9999 still format, with more digits.
pub fn http_date(unix_secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = unix_secs / 86_400;
    let secs = unix_secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let mut s = String::with_capacity(29);
    // Writing into a String cannot fail.
    let _ = write!(
        s,
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize], // 1970-01-01 was a Thursday
        d,
        MONTHS[(m - 1) as usize],
        y,
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    );
    s
}

/// Client side: the request head of §3.1.5.2 for `path` on `host`.
pub fn request(path: &str, host: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(96 + path.len() + host.len());
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(b"\r\nContent-Length: 18446744073709551615\r\n\r\n");
    out
}

/// Client side: parses the server's response head at the start of `buf`. Returns `Ok(None)`
/// while incomplete, else the status code and the number of head bytes (the packet stream
/// follows). Any HTTP/1.x status line is accepted here; the caller decides what a non-200
/// means.
pub fn parse_response(buf: &[u8]) -> Result<Option<(u16, usize)>, HttpError> {
    let window = &buf[..buf.len().min(MAX_HEAD_LEN)];
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(window) {
        Ok(httparse::Status::Complete(n)) => {
            let code = resp.code.ok_or(HttpError::Malformed)?;
            Ok(Some((code, n)))
        }
        Ok(httparse::Status::Partial) if window.len() == MAX_HEAD_LEN => {
            Err(HttpError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HttpError::HeadTooLarge),
        Err(_) => Err(HttpError::Malformed),
    }
}

fn map_parse_error(e: httparse::Error) -> HttpError {
    match e {
        httparse::Error::TooManyHeaders => HttpError::HeadTooLarge,
        httparse::Error::Version => HttpError::VersionNotSupported,
        _ => HttpError::Malformed,
    }
}

fn parse_content_length(v: &[u8]) -> Result<u64, HttpError> {
    // RFC 9110 §8.6: 1*DIGIT; `u64::from_str` would also take a leading '+'.
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return Err(HttpError::BadContentLength);
    }
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(HttpError::BadContentLength)
}

/// Howard Hinnant's `civil_from_days` for days since 1970-01-01 (non-negative only).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097; // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March-based
    let d = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// [MS-IPHTTPS] §4.1, with the path Windows DirectAccess uses.
    const WINDOWS_REQUEST: &[u8] = b"POST /IPHTTPS HTTP/1.1\r\n\
        Content-Length: 18446744073709551615\r\n\
        Host: da.example.com\r\n\r\n";

    #[test]
    fn ms_iphttps_4_1_request_accepted() {
        let mut buf = WINDOWS_REQUEST.to_vec();
        buf.extend_from_slice(&[0x60, 0, 0, 0]); // the first packet may follow at once
        let (req, n) = parse_request(&buf, "/IPHTTPS").unwrap().unwrap();
        assert_eq!(n, WINDOWS_REQUEST.len());
        assert_eq!(req.host.as_deref(), Some("da.example.com"));
        assert_eq!(req.content_length, Some(u64::MAX));
        assert!(req.is_unbounded());
    }

    #[test]
    fn iptls_path_of_the_spec_example() {
        let r = b"POST /IPTLS HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\
                  Host: 192.0.2.1\r\n\r\n";
        assert!(parse_request(r, "/IPTLS").unwrap().is_some());
        assert_eq!(parse_request(r, "/IPHTTPS"), Err(HttpError::NotFound));
    }

    #[test]
    fn wrong_path_is_404() {
        let r = b"POST /other HTTP/1.1\r\nHost: a\r\n\r\n";
        let e = parse_request(r, "/IPHTTPS").unwrap_err();
        assert_eq!(e, HttpError::NotFound);
        assert_eq!(e.status(), 404);
        assert!(error_response(404).starts_with(b"HTTP/1.1 404 Not Found\r\n"));
    }

    #[test]
    fn path_is_case_insensitive_like_http_sys() {
        let r = b"POST /iphttps HTTP/1.1\r\nHost: a\r\n\r\n";
        assert!(parse_request(r, "/IPHTTPS").unwrap().is_some());
    }

    #[test]
    fn get_is_405() {
        let r = b"GET /IPHTTPS HTTP/1.1\r\nHost: a\r\n\r\n";
        let e = parse_request(r, "/IPHTTPS").unwrap_err();
        assert_eq!(e, HttpError::MethodNotAllowed);
        assert_eq!(e.status(), 405);
        let resp = error_response(405);
        assert!(resp.starts_with(b"HTTP/1.1 405 Method Not Allowed\r\n"));
        assert!(resp.windows(7).any(|w| w == b"Allow: "));
    }

    #[test]
    fn garbage_is_400() {
        for g in [
            &b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"[..], // a TLS ClientHello
            b"POST\x00/ HTTP/1.1\r\n\r\n",
            b"POST /IPHTTPS HTTP/1.1\r\nBad Header\r\n\r\n",
        ] {
            let e = parse_request(g, "/IPHTTPS").unwrap_err();
            assert_eq!(e.status(), 400, "{g:?}: {e}");
        }
        assert!(error_response(400).ends_with(b"Connection: close\r\n\r\n"));
    }

    #[test]
    fn http_1_0_is_505() {
        let r = b"POST /IPHTTPS HTTP/1.0\r\n\r\n";
        assert_eq!(
            parse_request(r, "/IPHTTPS"),
            Err(HttpError::VersionNotSupported)
        );
        assert_eq!(HttpError::VersionNotSupported.status(), 505);
    }

    #[test]
    fn head_too_large_is_431() {
        let mut r = b"POST /IPHTTPS HTTP/1.1\r\nX-Pad: ".to_vec();
        r.resize(MAX_HEAD_LEN + 100, b'a');
        let e = parse_request(&r, "/IPHTTPS").unwrap_err();
        assert_eq!(e, HttpError::HeadTooLarge);
        assert_eq!(e.status(), 431);
        // Exactly at the limit without the end of the head: also too large.
        r.truncate(MAX_HEAD_LEN);
        assert_eq!(parse_request(&r, "/IPHTTPS"), Err(HttpError::HeadTooLarge));
        // One byte less: still waiting.
        r.truncate(MAX_HEAD_LEN - 1);
        assert_eq!(parse_request(&r, "/IPHTTPS"), Ok(None));
    }

    #[test]
    fn too_many_headers_is_431() {
        let mut r = b"POST /IPHTTPS HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            r.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        r.extend_from_slice(b"\r\n");
        assert_eq!(parse_request(&r, "/IPHTTPS"), Err(HttpError::HeadTooLarge));
    }

    #[test]
    fn partial_head_is_none() {
        for cut in 0..WINDOWS_REQUEST.len() {
            assert_eq!(
                parse_request(&WINDOWS_REQUEST[..cut], "/IPHTTPS"),
                Ok(None),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn header_names_are_case_insensitive() {
        let r = b"POST /IPHTTPS HTTP/1.1\r\ncOnTeNt-LeNgTh: 18446744073709551615\r\n\
                  HOST: h\r\ncontent-type: application/octet-stream\r\n\r\n";
        let (req, _) = parse_request(r, "/IPHTTPS").unwrap().unwrap();
        assert_eq!(req.host.as_deref(), Some("h"));
        assert!(req.is_unbounded());
    }

    #[test]
    fn content_length_rules() {
        let bad = [
            &b"POST /IPHTTPS HTTP/1.1\r\nContent-Length: +5\r\n\r\n"[..],
            b"POST /IPHTTPS HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n",
            b"POST /IPHTTPS HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        ];
        for r in bad {
            assert_eq!(
                parse_request(r, "/IPHTTPS"),
                Err(HttpError::BadContentLength)
            );
        }
        let r = b"POST /IPHTTPS HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(
            parse_request(r, "/IPHTTPS"),
            Err(HttpError::TransferEncoding)
        );
        // No Host and no Content-Length: tolerated.
        let (req, _) = parse_request(b"POST /IPHTTPS HTTP/1.1\r\n\r\n", "/IPHTTPS")
            .unwrap()
            .unwrap();
        assert_eq!(req.host, None);
        assert_eq!(req.content_length, None);
    }

    #[test]
    fn ok_response_layout() {
        let mut out = Vec::new();
        ok_response("Sun, 06 Nov 1994 08:49:37 GMT", &mut out);
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nServer: Microsoft-HTTPAPI/2.0\r\n\
              Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n"
        );
        assert_eq!(parse_response(&out), Ok(Some((200, out.len()))));
    }

    #[test]
    fn every_error_response_parses_back() {
        for s in [400, 404, 405, 431, 501, 505, 500, 999] {
            let r = error_response(s);
            let (code, n) = parse_response(r).unwrap().unwrap();
            assert_eq!(n, r.len());
            assert_eq!(code, if s == 999 { 500 } else { s });
        }
    }

    /// RFC 9110 §5.6.7 example, plus the epoch, a leap day and the u32 rollover.
    #[test]
    fn http_date_vectors() {
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(http_date(4_294_967_296), "Sun, 07 Feb 2106 06:28:16 GMT");
    }

    #[test]
    fn client_request_round_trips() {
        let r = request("/IPHTTPS", "gw.example.net");
        assert_eq!(
            r,
            b"POST /IPHTTPS HTTP/1.1\r\nHost: gw.example.net\r\n\
              Content-Length: 18446744073709551615\r\n\r\n"
        );
        let (req, n) = parse_request(&r, "/IPHTTPS").unwrap().unwrap();
        assert_eq!(n, r.len());
        assert!(req.is_unbounded());
    }

    #[test]
    fn response_partial_and_garbage() {
        let r = b"HTTP/1.1 200 OK\r\nServer: x\r\n";
        assert_eq!(parse_response(r), Ok(None));
        assert_eq!(
            parse_response(b"\x00\x01garbage\r\n\r\n"),
            Err(HttpError::Malformed)
        );
        let mut big = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        big.resize(MAX_HEAD_LEN, b'a');
        assert_eq!(parse_response(&big), Err(HttpError::HeadTooLarge));
    }

    proptest! {
        #[test]
        fn parse_request_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = parse_request(&buf, "/IPHTTPS");
            let _ = parse_response(&buf);
        }

        #[test]
        fn parse_request_never_panics_on_near_valid(
            tail in proptest::collection::vec(any::<u8>(), 0..512),
            cut in 0usize..120,
        ) {
            let mut buf = WINDOWS_REQUEST[..cut.min(WINDOWS_REQUEST.len())].to_vec();
            buf.extend_from_slice(&tail);
            let _ = parse_request(&buf, "/IPHTTPS");
        }

        #[test]
        fn http_date_is_29_chars_until_9999(secs in 0u64..253_402_300_800) {
            prop_assert_eq!(http_date(secs).len(), 29);
        }
    }
}
