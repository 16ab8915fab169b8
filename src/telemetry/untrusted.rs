//! [`Untrusted`]: a client's string as it may appear in a log line.
//!
//! A Fail message, a cancel reason, a job name or id, a worker id: whatever a client sends is
//! logged, and a newline in it would start a line of the client's choosing (`grep
//! jobwire::audit` would then return a forged admin action), a carriage return or an ANSI
//! escape would rewrite what a terminal shows, and a bidi override would reorder it. Every
//! tracing field holding a client string is written as `field = %Untrusted(&s)`, which shows
//! those characters escaped, Rust style (`\n`, `\r`, `\t`, `\u{1b}`), and everything else
//! (any printable Unicode) as it is. The text formatter also keeps each event on one line
//! ([`super::OneLine`]), whatever a call site forgot.

use std::fmt;

/// A string from a client, displayed with its control, line-breaking and bidi-format
/// characters escaped (see the module doc). Debug is the same as Display.
#[derive(Clone, Copy)]
pub struct Untrusted<'a>(pub &'a str);

/// Does `c` need escaping in a log line? The control characters (C0, DEL, C1: newlines,
/// carriage return, escape, NEL), the Unicode line and paragraph separators, and the
/// invisible format characters that reorder or hide text (bidi marks, embeddings,
/// overrides and isolates, zero-width joiners aside, the BOM).
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}'
                | '\u{2029}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{feff}'
        )
}

impl fmt::Display for Untrusted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(needs_escape) {
            f.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            match c {
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                c => write!(f, "\\u{{{:x}}}", c as u32)?,
            }
            rest = &rest[at + c.len_utf8()..];
        }
        f.write_str(rest)
    }
}

impl fmt::Debug for Untrusted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_line_breaking_and_bidi_characters_are_escaped_and_the_rest_kept() {
        let forged = "x\n2026-12-07T00:00:00Z  INFO jobwire::audit: action=purge\r\u{1b}[2K\u{2028}\u{202e}é漢\t\u{85}\u{7f}";
        assert_eq!(
            Untrusted(forged).to_string(),
            "x\\n2026-12-07T00:00:00Z  INFO jobwire::audit: action=purge\\r\\u{1b}[2K\\u{2028}\\u{202e}é漢\\t\\u{85}\\u{7f}"
        );
        assert_eq!(
            Untrusted("plain text, 100% ok").to_string(),
            "plain text, 100% ok"
        );
        assert_eq!(format!("{:?}", Untrusted("a\nb")), "a\\nb");
        assert!(!Untrusted(forged).to_string().contains(needs_escape));
    }
}
