//! The bearer token `/metrics` requires with `--metrics-token-file` (the file holds the token
//! itself, as Prometheus's `authorization.credentials_file` does on the scraper's side). It
//! is read at start, where a missing or empty file stops the server, and reloaded when the
//! file changes or on SIGHUP (`crate::reload::watch`): a reload that fails keeps the old
//! token. Presented tokens are compared in constant time (`subtle`).

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use axum::http::HeaderValue;
use subtle::ConstantTimeEq;

/// The token in force and where it comes from.
#[derive(Debug)]
pub struct MetricsToken {
    path: PathBuf,
    token: RwLock<Vec<u8>>,
}

/// The token in `path`: its content without surrounding whitespace (a trailing newline is
/// usual). Errors name the flag and the file, never the content.
fn read_token(path: &Path) -> Result<Vec<u8>, String> {
    let bytes =
        std::fs::read(path).map_err(|e| format!("--metrics-token-file {}: {e}", path.display()))?;
    let token = bytes.trim_ascii();
    if token.is_empty() {
        return Err(format!("--metrics-token-file {}: is empty", path.display()));
    }
    if !token.iter().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "--metrics-token-file {}: the token must be printable ASCII without spaces",
            path.display()
        ));
    }
    Ok(token.to_vec())
}

impl MetricsToken {
    /// Reads the token in `path` (see [`MetricsToken`]).
    pub fn load(path: &Path) -> Result<MetricsToken, String> {
        Ok(MetricsToken {
            path: path.to_owned(),
            token: RwLock::new(read_token(path)?),
        })
    }

    /// The token file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Re-reads the file; on error the token in force stays.
    pub fn reload(&self) -> Result<(), String> {
        let token = read_token(&self.path)?;
        *self.token.write().unwrap_or_else(|p| p.into_inner()) = token;
        Ok(())
    }

    /// Does `authorization` (the request's header) carry the token as `Bearer <token>`?
    pub fn allows(&self, authorization: Option<&HeaderValue>) -> bool {
        let Some(presented) = authorization
            .map(HeaderValue::as_bytes)
            .and_then(|h| h.strip_prefix(b"Bearer "))
        else {
            return false;
        };
        let token = self.token.read().unwrap_or_else(|p| p.into_inner());
        // Unequal lengths answer at once: the token's length is not the secret.
        bool::from(presented.ct_eq(token.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(content: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().expect("temp");
        std::fs::write(f.path(), content).expect("write");
        f
    }

    fn bearer(t: &str) -> HeaderValue {
        HeaderValue::from_str(&format!("Bearer {t}")).expect("header")
    }

    #[test]
    fn accepts_only_the_token_and_reloads_keeping_the_old_on_error() {
        let f = file("s3cret-token\n");
        let t = MetricsToken::load(f.path()).expect("load");
        assert!(t.allows(Some(&bearer("s3cret-token"))));
        for wrong in ["s3cret-toke", "s3cret-token2", "S3CRET-TOKEN", ""] {
            assert!(!t.allows(Some(&bearer(wrong))), "{wrong:?}");
        }
        assert!(!t.allows(None));
        let basic = HeaderValue::from_static("Basic s3cret-token");
        assert!(!t.allows(Some(&basic)));

        std::fs::write(f.path(), "rotated").expect("write");
        t.reload().expect("reload");
        assert!(t.allows(Some(&bearer("rotated"))));
        assert!(!t.allows(Some(&bearer("s3cret-token"))));

        std::fs::write(f.path(), "  \n").expect("write");
        let e = t.reload().expect_err("empty refused");
        assert!(
            e.starts_with("--metrics-token-file") && e.ends_with("is empty"),
            "{e}"
        );
        assert!(t.allows(Some(&bearer("rotated"))), "the old token stays");
    }

    #[test]
    fn a_missing_or_empty_file_is_refused_naming_the_flag() {
        let e = MetricsToken::load(Path::new("/nonexistent/token")).expect_err("missing");
        assert!(
            e.starts_with("--metrics-token-file /nonexistent/token"),
            "{e}"
        );
        let f = file("");
        assert!(MetricsToken::load(f.path()).is_err());
        let f = file("two words");
        let e = MetricsToken::load(f.path()).expect_err("space");
        assert!(!e.contains("two words"), "the content is never echoed: {e}");
    }
}
