//! Text from a log or the daemon made safe to print on a terminal.
//!
//! A refused client's claimed identity is whatever it sent, unverified: printed raw, an
//! escape sequence in it would drive the admin's terminal and a line break would forge
//! a row. Control characters are shown as `\` and two hex digits per UTF-8 byte, as the
//! certificate subject escapes them (RFC 4514 §2.4, `gate64_ike::auth::dn`), and so are the
//! characters that reorder or break text without being control characters (bidirectional
//! overrides and isolates, the line and paragraph separators). Everything else, a subject's
//! own backslash escapes included, is shown as it is.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every character a terminal would act on shown as `\xx` per byte.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if acts(c) {
            let mut buf = [0; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                let _ = write!(out, "\\{b:02x}");
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// C0, DEL and C1 controls (ESC and CSI among them), and the format characters that change
/// how the text around them is laid out.
fn acts(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_reordering_characters_are_shown_as_hex() {
        assert_eq!(printable("CN=alice"), "CN=alice");
        assert!(matches!(printable("CN=a\\, b"), Cow::Borrowed(_)));
        assert_eq!(printable("a\x1b[2Jb"), "a\\1b[2Jb");
        assert_eq!(printable("a\nb\r\tc\0"), "a\\0ab\\0d\\09c\\00");
        assert_eq!(printable("\u{9b}31m"), "\\c2\\9b31m");
        assert_eq!(
            printable("x\u{202e}y\u{2066}"),
            "x\\e2\\80\\aey\\e2\\81\\a6"
        );
        assert_eq!(printable("a\u{2028}b\x7f"), "a\\e2\\80\\a8b\\7f");
        assert_eq!(printable("Zürich"), "Zürich");
    }
}
