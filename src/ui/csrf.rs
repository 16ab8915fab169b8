//! CSRF protection: a random token per session, put into every form as `csrf` and checked on
//! every POST by a constant-time comparison. The session cookie is also `SameSite=Strict`,
//! and a POST whose `Origin` names another host is refused (see `routes`).

use subtle::ConstantTimeEq;

/// A fresh random token (32 bytes, URL-safe base64).
pub fn new_token() -> String {
    super::session::random_id()
}

/// Does `given` (the form's `csrf` field, if any) equal the session's `expected`? Constant
/// time in the contents; an absent or empty field never matches.
pub fn verify(expected: &str, given: Option<&str>) -> bool {
    match given {
        Some(g) if !g.is_empty() && !expected.is_empty() => {
            g.as_bytes().ct_eq(expected.as_bytes()).into()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_token_verifies() {
        let t = new_token();
        assert!(verify(&t, Some(&t)));
        assert!(!verify(&t, None));
        assert!(!verify(&t, Some("")));
        assert!(!verify(&t, Some(&new_token())));
        assert!(!verify(&t, Some(&t[..t.len() - 1])));
        assert!(!verify("", Some("")));
    }
}
