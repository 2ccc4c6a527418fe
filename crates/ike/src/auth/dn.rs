//! Names as gate64 shows them, and the key that tells two clients apart.
//!
//! A rendered name is for people: two different names can render alike (a CN whose value is
//! `a, O=b` against the two attributes `CN=a` and `O=b`, or one subject from two CAs). So
//! nothing is looked up by the text: [`IdentityKey`] is built from the DER of the issuer and
//! the subject, and the text is escaped as RFC 4514 §2.4 says, so that what `gate64 status`
//! prints reads back as the name it came from and no client can put control characters into
//! a log line or a terminal.

use aws_lc_rs::digest;
use std::fmt::Write;
use x509_parser::der_parser::asn1_rs::Tag;
use x509_parser::objects::{oid_registry, oid2abbrev};
use x509_parser::x509::{AttributeTypeAndValue, X509Name};

/// What identifies an authenticated client: the SHA-256 of its certificate's issuer and
/// subject, both as DER. Leases, INITIAL_CONTACT, uniqueness and the IKE SA count per identity
/// key on it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdentityKey([u8; 32]);

impl IdentityKey {
    /// The key of the certificate issued by `issuer_der` to `subject_der` (each a DER Name).
    pub fn new(issuer_der: &[u8], subject_der: &[u8]) -> Self {
        let mut ctx = digest::Context::new(&digest::SHA256);
        // The issuer's length first: no split of one byte string into issuer and subject can
        // give the same input as another.
        ctx.update(&(issuer_der.len() as u64).to_be_bytes());
        ctx.update(issuer_der);
        ctx.update(subject_der);
        let mut key = [0; 32];
        key.copy_from_slice(ctx.finish().as_ref());
        IdentityKey(key)
    }

    /// The key as bytes, to carry it to the standby node of a pair.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0
    }

    /// The key [`IdentityKey::to_bytes`] gave.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        IdentityKey(bytes)
    }
}

impl std::fmt::Debug for IdentityKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IdentityKey(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "…)")
    }
}

/// `name` as text: its RDNs in certificate order separated by `, ` (as strongSwan and
/// OpenSSL's `-nameopt oneline` print them), the attributes of a multi-valued RDN joined by
/// `+`, each value escaped as RFC 4514 §2.4 says. A value that is not a string is `#` and the
/// hex of its DER (RFC 4514 §2.4); a type without a short name is its dotted OID (§2.3).
pub fn name_to_text(name: &X509Name<'_>) -> String {
    let mut out = String::new();
    for (i, rdn) in name.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        for (j, attr) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            push_attribute(&mut out, attr);
        }
    }
    out
}

fn push_attribute(out: &mut String, attr: &AttributeTypeAndValue<'_>) {
    match oid2abbrev(attr.attr_type(), oid_registry()) {
        Ok(short) => out.push_str(short),
        Err(_) => out.push_str(&attr.attr_type().to_id_string()),
    }
    out.push('=');
    let value = attr.attr_value();
    let text = match value.tag() {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String | Tag::NumericString => {
            std::str::from_utf8(value.data).ok()
        }
        _ => None,
    };
    match text {
        Some(text) => escape_value(out, text),
        None => {
            out.push('#');
            for b in der_header(value).iter().chain(value.data) {
                let _ = write!(out, "{b:02x}");
            }
        }
    }
}

/// The identifier and length octets of `value` as DER writes them (RFC 4514 §2.4 shows a
/// non-string value as its whole encoding); tag numbers above 30 never occur in names and
/// are written as 31, which still shows that the value is not a string.
fn der_header(value: &x509_parser::der_parser::asn1_rs::Any<'_>) -> Vec<u8> {
    let class = (value.header.class() as u8) << 6;
    let constructed = if value.header.is_constructed() {
        0x20
    } else {
        0
    };
    let number = u8::try_from(value.tag().0).unwrap_or(31).min(31);
    let mut header = vec![class | constructed | number];
    let len = value.data.len();
    if len < 0x80 {
        header.push(len as u8);
    } else {
        let bytes = (len as u64).to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        header.push(0x80 | (8 - skip) as u8);
        header.extend_from_slice(&bytes[skip..]);
    }
    header
}

/// Appends `value` escaped as RFC 4514 §2.4 says: `"`, `+`, `,`, `;`, `<`, `>` and `\` with a
/// backslash, a leading `#` or space and a trailing space likewise, and NUL and every other
/// control character as `\` and two hex digits (printable, and unambiguous).
pub fn escape_value(out: &mut String, value: &str) {
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '#' if i == 0 => out.push_str("\\#"),
            ' ' if i == 0 || i == last => out.push_str("\\ "),
            c if c.is_control() => {
                let mut buf = [0; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    let _ = write!(out, "\\{b:02x}");
                }
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(v: &str) -> String {
        let mut s = String::new();
        escape_value(&mut s, v);
        s
    }

    #[test]
    fn rfc_4514_specials_are_escaped() {
        assert_eq!(escaped("a, O=b"), "a\\, O=b");
        assert_eq!(escaped("x+y;z<w>\"q\"\\"), "x\\+y\\;z\\<w\\>\\\"q\\\"\\\\");
        assert_eq!(escaped("#lead"), "\\#lead");
        assert_eq!(escaped("mid#dle"), "mid#dle");
        assert_eq!(escaped(" both "), "\\ both\\ ");
        assert_eq!(escaped("a b"), "a b");
        assert_eq!(escaped("nul\0bell\x07\n"), "nul\\00bell\\07\\0a");
        assert_eq!(escaped("Zürich"), "Zürich");
        assert_eq!(escaped(""), "");
    }

    #[test]
    fn the_key_depends_on_issuer_and_subject_and_where_they_split() {
        let a = IdentityKey::new(b"issuer", b"subject");
        assert_eq!(a, IdentityKey::new(b"issuer", b"subject"));
        assert_ne!(a, IdentityKey::new(b"issuer2", b"subject"));
        assert_ne!(a, IdentityKey::new(b"issuer", b"subject2"));
        assert_ne!(a, IdentityKey::new(b"issuers", b"ubject"));
    }
}
