//! Small encoders the profiles share: base64, XML escaping, random UUIDs, and the checks
//! that keep names and identities safe to write into XML, PowerShell, JSON and INI.

/// Standard base64 (RFC 4648 §4) with padding.
pub fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ABC[(n >> shift) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `s` with `&`, `<`, `>`, `"` and `'` escaped for XML text and attributes.
pub fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// A random (version 4) UUID in upper case, as Apple and Microsoft write them.
pub fn uuid() -> String {
    let mut b = [0u8; 16];
    random(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02X}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Fills `b` from the kernel's random source; a UUID needs uniqueness, so when it cannot be
/// read the time and process id stand in.
fn random(b: &mut [u8]) {
    use std::io::Read;
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(b))
        .is_ok();
    if !ok {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let seed = nanos ^ u128::from(std::process::id()) << 64;
        for (dst, src) in b.iter_mut().zip(seed.to_le_bytes()) {
            *dst = src;
        }
    }
}

/// A DNS name or an IP address: letters, digits, `.`, `-`, `:`; 1 to 253 characters.
pub fn plain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:".contains(c))
}

/// An IKE identity that can be written into any profile as it is: 1 to 253 printable ASCII
/// characters, no quotes, backslashes or XML specials.
pub fn identity(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.chars().all(|c| c.is_ascii_graphic() || c == ' ')
        && !s.contains(['"', '\'', '\\', '<', '>', '&', '`', '$'])
}
