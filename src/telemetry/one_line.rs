//! [`OneLine`]: the text formatter's writer, which keeps every event on one line.
//!
//! The formatter renders an event into a buffer and writes it with one `write_all`, ending
//! in `\n`. A line break anywhere before that end came from a field or message (a client
//! string that missed [`super::Untrusted`], an error's multi-line text): it is written
//! escaped (`\n`, `\r`, `\u{2028}`, ...), so no event can start a line that looks like
//! another, such as an audit line. Escape sequences (colours) are left alone: a terminal
//! gets them from the formatter itself; [`super::Untrusted`] escapes a client's.

use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;

/// Makes [`OneLineWriter`]s over stderr.
#[derive(Clone, Copy, Debug, Default)]
pub struct OneLine;

impl<'a> MakeWriter<'a> for OneLine {
    type Writer = OneLineWriter<io::Stderr>;

    fn make_writer(&'a self) -> Self::Writer {
        OneLineWriter(io::stderr())
    }
}

/// Writes each buffer (one formatted event) with its line breaks escaped, but a final `\n`.
#[derive(Debug)]
pub struct OneLineWriter<W>(pub W);

fn line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r' | '\u{0b}' | '\u{0c}' | '\u{85}' | '\u{2028}' | '\u{2029}'
    )
}

/// `event` with every line break but a final `\n` escaped.
pub fn one_line(event: &str) -> std::borrow::Cow<'_, str> {
    let body = event.strip_suffix('\n').unwrap_or(event);
    if !body.contains(line_break) {
        return event.into();
    }
    let mut out = String::with_capacity(event.len() + 16);
    for c in body.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if line_break(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    if body.len() != event.len() {
        out.push('\n');
    }
    out.into()
}

impl<W: Write> Write for OneLineWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match std::str::from_utf8(buf) {
            Ok(s) => self.0.write_all(one_line(s).as_bytes())?,
            Err(_) => self.0.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inner_line_breaks_are_escaped_and_the_last_newline_kept() {
        assert_eq!(one_line("a b\n"), "a b\n");
        assert_eq!(
            one_line("INFO fail error=x\nINFO jobwire::audit: forged\r\u{2028}\n"),
            "INFO fail error=x\\nINFO jobwire::audit: forged\\r\\u{2028}\n"
        );
        assert_eq!(one_line("no newline\nat end"), "no newline\\nat end");
        let mut w = OneLineWriter(Vec::new());
        w.write_all(b"one\ntwo\n").expect("write");
        assert_eq!(w.0, b"one\\ntwo\n");
    }
}
