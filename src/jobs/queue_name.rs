//! A validated queue name: 1-128 bytes of `[A-Za-z0-9._-]`. The charset keeps names safe
//! inside Redis hash tags (`{queue}`: no braces), metric labels and URLs.

use std::fmt;

/// Longest queue name, in bytes.
pub const MAX_QUEUE_NAME_BYTES: usize = 128;

/// A queue name that passed [`QueueName::parse`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueName(String);

impl QueueName {
    /// Checks the charset and length; the error says what is wrong, for a field violation.
    pub fn parse(name: &str) -> Result<QueueName, String> {
        if name.is_empty() {
            return Err("must not be empty".into());
        }
        if name.len() > MAX_QUEUE_NAME_BYTES {
            return Err(format!(
                "is {} bytes, the limit is {MAX_QUEUE_NAME_BYTES}",
                name.len()
            ));
        }
        if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(format!("contains {c:?}; allowed are A-Z a-z 0-9 . _ -"));
        }
        Ok(QueueName(name.to_owned()))
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_charset() {
        assert!(QueueName::parse("emails.v2_high-prio").is_ok());
        assert!(QueueName::parse(&"a".repeat(128)).is_ok());
    }

    #[test]
    fn refuses_empty_long_and_foreign_characters() {
        assert!(QueueName::parse("").is_err());
        assert!(QueueName::parse(&"a".repeat(129)).is_err());
        for bad in ["a{b", "a}b", "a:b", "é", "a b", "a\0b"] {
            assert!(QueueName::parse(bad).is_err(), "{bad:?}");
        }
    }
}
