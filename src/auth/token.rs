//! Bearer tokens: `jw_<id>_<secret>`. The id names the token in the auth file and in logs (it
//! is not secret); the secret is 43 characters of base62 from the operating system's CSPRNG
//! (about 256 bits). The auth file stores only the SHA-256 of the secret (hex), so a leaked
//! file does not leak tokens, and a presented secret is compared with it in constant time
//! (`subtle`), so response timing says nothing about how much of a guess was right.
//!
//! A fast hash, not a password hash (argon2, bcrypt), is right here: the secret is random and
//! long, not a human password, so it cannot be brute-forced from its hash, and every RPC
//! verifies a token.

use rand::distr::{Alphanumeric, SampleString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The prefix of every token (makes leaked tokens easy to find with secret scanners).
pub const PREFIX: &str = "jw_";
/// Longest token id, bytes.
pub const MAX_ID_BYTES: usize = 64;
/// Length of a secret made by [`Token::generate`].
pub const SECRET_CHARS: usize = 43;
/// Shortest secret accepted (128 bits of base62 need 22 characters).
pub const MIN_SECRET_CHARS: usize = 22;
/// Longest secret accepted.
pub const MAX_SECRET_CHARS: usize = 256;

/// The SHA-256 of a token's secret.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SecretHash(pub [u8; 32]);

impl std::fmt::Debug for SecretHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A hash of a secret is not the secret, but keep it out of logs all the same.
        f.write_str("SecretHash(..)")
    }
}

impl SecretHash {
    /// The SHA-256 of `secret`.
    pub fn of(secret: &str) -> SecretHash {
        SecretHash(Sha256::digest(secret.as_bytes()).into())
    }

    /// Parses 64 hex digits (either case), as the auth file stores them.
    pub fn parse_hex(hex: &str) -> Result<SecretHash, String> {
        let hex = hex.trim();
        if hex.len() != 64 {
            return Err(format!(
                "must be 64 hex digits (the SHA-256 of the secret), got {} characters",
                hex.len()
            ));
        }
        let mut out = [0u8; 32];
        for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
            let digit = |c: u8| (c as char).to_digit(16);
            match (digit(pair[0]), digit(pair[1])) {
                (Some(hi), Some(lo)) => out[i] = (hi * 16 + lo) as u8,
                _ => return Err("must be 64 hex digits (0-9, a-f)".into()),
            }
        }
        Ok(SecretHash(out))
    }

    /// Lowercase hex, as `jobwire token new` prints it.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Constant-time equality: the time taken does not depend on where the hashes differ.
    pub fn matches(&self, other: &SecretHash) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

/// A parsed bearer token. `Debug` hides the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    /// The token id (`[A-Za-z0-9.-]`, 1 to 64 bytes).
    pub id: String,
    secret: String,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("id", &self.id)
            .field("secret", &"***")
            .finish()
    }
}

/// Checks a token id: 1 to 64 bytes of `[A-Za-z0-9.-]` (no `_`, which separates the parts).
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        return Err(format!(
            "token id must be 1 to {MAX_ID_BYTES} bytes, got {}",
            id.len()
        ));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-')))
    {
        return Err(format!(
            "token id contains {c:?}; allowed are A-Z a-z 0-9 . -"
        ));
    }
    Ok(())
}

impl Token {
    /// Parses `jw_<id>_<secret>`. The error says what is wrong without echoing the secret.
    pub fn parse(s: &str) -> Result<Token, String> {
        let rest = s
            .strip_prefix(PREFIX)
            .ok_or("a jobwire token starts with jw_")?;
        let (id, secret) = rest
            .split_once('_')
            .ok_or("a jobwire token has the form jw_<id>_<secret>")?;
        check_id(id)?;
        if !(MIN_SECRET_CHARS..=MAX_SECRET_CHARS).contains(&secret.len())
            || !secret.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return Err(format!(
                "the secret of token {id:?} must be {MIN_SECRET_CHARS} to {MAX_SECRET_CHARS} characters of A-Z a-z 0-9"
            ));
        }
        Ok(Token {
            id: id.to_owned(),
            secret: secret.to_owned(),
        })
    }

    /// A fresh token with id `id` (checked) and a secret of [`SECRET_CHARS`] base62
    /// characters from the operating system's random source.
    pub fn generate(id: &str) -> Result<Token, String> {
        check_id(id)?;
        // The operating system's CSPRNG directly (getrandom), not a user-space generator.
        let mut rng = rand::TryRngCore::unwrap_err(rand::rngs::OsRng);
        let secret = Alphanumeric.sample_string(&mut rng, SECRET_CHARS);
        Ok(Token {
            id: id.to_owned(),
            secret,
        })
    }

    /// The SHA-256 of the secret (what the auth file stores).
    pub fn secret_hash(&self) -> SecretHash {
        SecretHash::of(&self.secret)
    }

    /// The whole token, `jw_<id>_<secret>`: what the client sends. Never log it.
    pub fn reveal(&self) -> String {
        format!("{PREFIX}{}_{}", self.id, self.secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_parse_back_and_differ() {
        let a = Token::generate("ci").expect("valid in the test");
        let b = Token::generate("ci").expect("valid in the test");
        assert_ne!(a.reveal(), b.reveal());
        let parsed = Token::parse(&a.reveal()).expect("valid in the test");
        assert_eq!(parsed, a);
        assert_eq!(parsed.id, "ci");
        assert!(a.reveal().starts_with("jw_ci_"));
        assert_eq!(a.reveal().len(), "jw_ci_".len() + SECRET_CHARS);
        assert!(!format!("{a:?}").contains(&a.secret));
    }

    #[test]
    fn malformed_tokens_are_refused_without_echoing_the_secret() {
        let secret = "A".repeat(30);
        for bad in [
            String::new(),
            "jw_".into(),
            format!("xx_ci_{secret}"),
            format!("jw_ci{secret}"),
            format!("jw__{secret}"),
            format!("jw_c!_{secret}"),
            "jw_ci_short".into(),
            format!("jw_ci_{secret}_"),
            format!("jw_ci_{secret}+"),
        ] {
            let e = Token::parse(&bad).expect_err(&bad);
            assert!(!e.contains(&secret), "{e}");
        }
        assert!(Token::generate("bad_id").is_err());
        assert!(Token::generate(&"a".repeat(65)).is_err());
    }

    #[test]
    fn hashes_round_trip_through_hex_and_compare() {
        let t = Token::generate("x").expect("valid in the test");
        let h = t.secret_hash();
        let back = SecretHash::parse_hex(&h.to_hex().to_uppercase()).expect("valid in the test");
        assert!(h.matches(&back));
        assert!(!h.matches(
            &Token::generate("x")
                .expect("valid in the test")
                .secret_hash()
        ));
        // The SHA-256 of "abc" (FIPS 180-2 test vector).
        assert_eq!(
            SecretHash::of("abc").to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(SecretHash::parse_hex("zz").is_err());
        assert!(SecretHash::parse_hex(&"g".repeat(64)).is_err());
    }
}
