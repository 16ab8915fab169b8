//! Plain tables in the style of `kubectl get`: a header row in capitals, columns separated by
//! two spaces, no borders, every line at most [`WIDTH`] display columns. When the columns do
//! not fit, the column marked flexible (a free-text one such as an error message) gives up
//! width first, down to [`MIN_FLEX`], then the widest column (never below [`MIN_COL`]); a
//! cell longer than its column ends in "…". Control characters in cells (newlines of an error
//! message) print as spaces, so one row is one line.
//!
//! (comfy-table was the library candidate; its dynamic arrangement wraps cells onto more
//! lines, which breaks `grep` and `wc -l` on the output.)

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// The most display columns a table line takes.
pub const WIDTH: usize = 100;
/// A column is never squeezed below this many display columns.
pub const MIN_COL: usize = 6;
/// The flexible column shrinks alone down to this width.
pub const MIN_FLEX: usize = 20;
const GAP: &str = "  ";

/// A table: a header and rows of cells.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    flex: Option<usize>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
            flex: None,
        }
    }

    /// Marks column `i` as the one that gives up width first.
    pub fn flex(mut self, i: usize) -> Table {
        self.flex = Some(i);
        self
    }

    /// Adds a row (missing cells are empty, extra ones dropped).
    pub fn row(&mut self, cells: Vec<String>) {
        let mut cells: Vec<String> = cells.into_iter().map(|c| clean(&c)).collect();
        cells.resize(self.header.len(), String::new());
        self.rows.push(cells);
    }

    /// The table as text, one line per row (with a final newline), at most [`WIDTH`] wide.
    pub fn render(&self) -> String {
        let n = self.header.len();
        let mut widths: Vec<usize> = (0..n)
            .map(|i| {
                std::iter::once(&self.header[i])
                    .chain(self.rows.iter().map(|r| &r[i]))
                    .map(|c| c.width())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let budget = WIDTH.saturating_sub(GAP.len() * n.saturating_sub(1));
        while widths.iter().sum::<usize>() > budget {
            if let Some(f) = self
                .flex
                .filter(|f| widths.get(*f).is_some_and(|w| *w > MIN_FLEX))
            {
                widths[f] -= 1;
                continue;
            }
            let Some((i, w)) = widths
                .iter()
                .enumerate()
                .max_by_key(|(_, w)| **w)
                .map(|(i, w)| (i, *w))
            else {
                break;
            };
            if w <= MIN_COL {
                break; // every column is as narrow as it may get
            }
            widths[i] = w - 1;
        }
        let mut out = String::new();
        for cells in std::iter::once(&self.header).chain(self.rows.iter()) {
            let mut line = String::new();
            for (i, cell) in cells.iter().enumerate() {
                if i > 0 {
                    line.push_str(GAP);
                }
                let c = fit(cell, widths[i]);
                let pad = widths[i].saturating_sub(c.width());
                line.push_str(&c);
                if i + 1 < n {
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Key-value lines (`jobwire queues stats q`, `jobs get`): a two-column table without a
/// header, the key column as wide as the longest key.
pub fn pairs(rows: &[(&str, String)]) -> String {
    let key_w = rows.iter().map(|(k, _)| k.width()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in rows {
        let v = fit(&clean(v), WIDTH.saturating_sub(key_w + GAP.len() + 1));
        let line = format!("{k}:{}{GAP}{v}", " ".repeat(key_w - k.width()));
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `s` cut to `width` display columns, ending in "…" when cut.
pub fn fit(s: &str, width: usize) -> String {
    if s.width() <= width {
        return s.to_owned();
    }
    let mut out = String::new();
    let mut w = 0;
    for ch in s.chars() {
        let cw = ch.width().unwrap_or(0);
        if w + cw + 1 > width {
            break;
        }
        out.push(ch);
        w += cw;
    }
    out.push('…');
    out
}

/// Control characters (newlines, tabs, escapes) become spaces: one row stays one line, and
/// a job's text cannot move the terminal's cursor.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wide_table_fits_100_columns_with_ellipses() {
        let mut t = Table::new(&["JOB_ID", "NAME", "MESSAGE"]).flex(2);
        t.row(vec![
            "0193a7c4-1d2e-7f00-8000-0123456789ab".into(),
            "send-welcome-email".into(),
            format!("smtp: 4.2.1 {}\nline two", "x".repeat(200)),
        ]);
        t.row(vec!["short".into(), "n".into(), "ok".into()]);
        let out = t.render();
        for line in out.lines() {
            assert!(line.width() <= WIDTH, "{} > {WIDTH}: {line}", line.width());
        }
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "one line per row: {out}");
        assert!(lines[1].ends_with('…'), "{}", lines[1]);
        assert!(lines[1].starts_with("0193a7c4-1d2e-7f00-8000-0123456789ab  send-welcome-email"));
        assert!(lines[0].starts_with("JOB_ID"));
        assert!(
            lines[1].width() == WIDTH,
            "only the flexible column was cut"
        );
        assert!(lines[2].ends_with("ok"));
    }

    #[test]
    fn many_wide_columns_share_the_width() {
        let mut t = Table::new(&["A", "B", "C", "D"]);
        t.row(vec![
            "é".repeat(80),
            "b".repeat(80),
            "c".repeat(10),
            "d".into(),
        ]);
        for line in t.render().lines() {
            assert!(line.width() <= WIDTH, "{line}");
        }
        assert_eq!(fit("日本語テキスト", 7), "日本語…");
        assert_eq!(fit("short", 10), "short");
    }

    #[test]
    fn pairs_align_and_fit() {
        let out = pairs(&[("state", "dead".into()), ("payload", "p".repeat(300))]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "state:    dead");
        assert!(lines[1].width() <= WIDTH && lines[1].ends_with('…'));
    }
}
