//! The auth file (`--auth-file`, YAML or TOML by extension): principals, each with a name,
//! bearer tokens (id + SHA-256 of the secret) and/or client-certificate identities, and
//! grants (roles per queue pattern). Every error names the file and the line.
//!
//! ```yaml
//! principals:
//!   - name: billing-api
//!     tokens:
//!       - id: billing-api
//!         sha256: 5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8
//!     grants:
//!       - queues: ["billing-*"]
//!         roles: [producer, viewer]
//!   - name: email-worker
//!     certs: ["spiffe://example.org/ns/jobs/sa/email-worker"]
//!     grants:
//!       - queues: [emails]
//!         roles: [worker]
//! ```
//!
//! The same in TOML: `[[principals]]` tables with `name`, `tokens = [{ id = "..", sha256 =
//! ".." }]`, `certs = [".."]` and `grants = [{ queues = [".."], roles = [".."] }]`.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use super::policy::{Entry, Grant, Policy, QueuePattern, Role, Roles};
use super::token::{check_id, SecretHash};

/// Longest principal name and certificate identity, bytes.
const MAX_NAME_BYTES: usize = 256;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    principals: Vec<RawPrincipal>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrincipal {
    name: Name,
    #[serde(default)]
    tokens: Vec<RawToken>,
    #[serde(default)]
    certs: Vec<Name>,
    #[serde(default)]
    grants: Vec<RawGrant>,
}

/// A principal name or certificate identity: 1 to 256 bytes, no control characters.
#[derive(Deserialize)]
#[serde(try_from = "String")]
struct Name(String);

impl TryFrom<String> for Name {
    type Error = String;
    fn try_from(s: String) -> Result<Name, String> {
        if s.is_empty() || s.len() > MAX_NAME_BYTES || s.chars().any(char::is_control) {
            return Err(format!(
                "{s:?} must be 1 to {MAX_NAME_BYTES} bytes without control characters"
            ));
        }
        Ok(Name(s))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToken {
    id: TokenId,
    sha256: Hash,
}

#[derive(Deserialize)]
#[serde(try_from = "String")]
struct TokenId(String);

impl TryFrom<String> for TokenId {
    type Error = String;
    fn try_from(s: String) -> Result<TokenId, String> {
        check_id(&s)?;
        Ok(TokenId(s))
    }
}

#[derive(Deserialize)]
#[serde(try_from = "String")]
struct Hash(SecretHash);

impl TryFrom<String> for Hash {
    type Error = String;
    fn try_from(s: String) -> Result<Hash, String> {
        SecretHash::parse_hex(&s)
            .map(Hash)
            .map_err(|e| format!("sha256 {e}"))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    queues: Vec<Pattern>,
    roles: Vec<Role>,
}

#[derive(Deserialize)]
#[serde(try_from = "String")]
struct Pattern(QueuePattern);

impl TryFrom<String> for Pattern {
    type Error = String;
    fn try_from(s: String) -> Result<Pattern, String> {
        QueuePattern::parse(&s).map(Pattern)
    }
}

/// Reads and parses the auth file at `path`. The error names the file and the line.
pub fn load(path: &Path) -> Result<Policy, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("auth file {}: cannot read it: {e}", path.display()))?;
    parse(path, &text).map_err(|e| format!("auth file {}: {e}", path.display()))
}

/// Is `path` named like an auth file (`.yaml`, `.yml` or `.toml`)?
pub fn check_extension(path: &Path) -> Result<(), String> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("yaml" | "yml" | "toml") => Ok(()),
        _ => Err(format!(
            "--auth-file {}: the name must end in .yaml, .yml or .toml (the format follows it)",
            path.display()
        )),
    }
}

/// Parses the text of an auth file named `path` (its extension says YAML or TOML).
pub fn parse(path: &Path, text: &str) -> Result<Policy, String> {
    check_extension(path)?;
    let raw: RawFile = if path.extension().is_some_and(|e| e == "toml") {
        toml::from_str(text).map_err(|e| toml_error(text, &e))?
    } else {
        serde_norway::from_str(text).map_err(|e| yaml_error(&e))?
    };
    build(raw, text)
}

/// A TOML error as `line N: message`.
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {}", e.message())
        }
        None => e.message().to_owned(),
    }
}

/// A YAML error as `line N: message`.
fn yaml_error(e: &serde_norway::Error) -> String {
    let msg = e.to_string();
    match e.location() {
        Some(loc) => {
            // The message ends with " at line N column M"; say the line first instead.
            let msg = msg.split(" at line ").next().unwrap_or(&msg);
            format!("line {}: {msg}", loc.line())
        }
        None => msg,
    }
}

/// The 1-based line of the `nth` (0-based) line of `text` that contains `value` as a whole
/// word (quoted or bare), and `key` if given; 0 when not found.
fn line_of(text: &str, key: Option<&str>, value: &str, nth: usize) -> usize {
    let bounded = |line: &str| {
        line.match_indices(value).any(|(i, _)| {
            let before = line[..i].chars().next_back();
            let after = line[i + value.len()..].chars().next();
            let edge = |c: Option<char>| {
                c.is_none_or(|c| {
                    c.is_whitespace()
                        || matches!(c, '"' | '\'' | ',' | '[' | ']' | '{' | '}' | ':' | '=')
                })
            };
            edge(before) && edge(after)
        })
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| bounded(l) && key.is_none_or(|k| l.contains(k)))
        .nth(nth)
        .map(|(i, _)| i + 1)
        .unwrap_or(0)
}

/// Checks what spans principals (unique names, token ids, certificate identities) and
/// builds the policy.
fn build(raw: RawFile, text: &str) -> Result<Policy, String> {
    let mut policy = Policy::default();
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut ids: HashMap<String, usize> = HashMap::new();
    let mut certs: HashMap<String, usize> = HashMap::new();
    let dup = |what: &str,
               key: Option<&str>,
               value: &str,
               seen: &mut HashMap<String, usize>|
     -> Result<(), String> {
        let n = seen.entry(value.to_owned()).or_insert(0);
        *n += 1;
        if *n > 1 {
            let line = line_of(text, key, value, *n - 1);
            return Err(format!(
                "line {line}: {what} {value:?} appears more than once"
            ));
        }
        Ok(())
    };
    for p in raw.principals {
        let index = policy.entries.len();
        let name = p.name.0;
        dup("principal name", Some("name"), &name, &mut names)?;
        if p.tokens.is_empty() && p.certs.is_empty() {
            let line = line_of(text, Some("name"), &name, 0);
            return Err(format!(
                "line {line}: principal {name:?} has neither tokens nor certs: nobody could be it"
            ));
        }
        for t in p.tokens {
            dup("token id", Some("id"), &t.id.0, &mut ids)?;
            policy.tokens.insert(t.id.0, (t.sha256.0, index));
        }
        for c in p.certs {
            dup("certificate identity", None, &c.0, &mut certs)?;
            policy.certs.insert(c.0, index);
        }
        let mut grants = Vec::new();
        for g in p.grants {
            if g.queues.is_empty() || g.roles.is_empty() {
                let line = line_of(text, Some("name"), &name, 0);
                return Err(format!(
                    "line {line}: a grant of principal {name:?} needs at least one queue pattern and one role"
                ));
            }
            grants.push(Grant {
                queues: g.queues.into_iter().map(|p| p.0).collect(),
                roles: Roles::of(&g.roles),
            });
        }
        policy.entries.push(Entry { name, grants });
    }
    Ok(policy)
}

#[cfg(test)]
mod tests;
