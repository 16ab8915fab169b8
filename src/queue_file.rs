//! The optional queue config file (`--config`, TOML), applied to Redis at start-up so that
//! every replica sees one truth. Each `[queues.<name>]` table replaces that queue's whole
//! config (fields it leaves out are reset to the defaults); queues not in the file keep
//! what UpdateQueueConfig set. Durations are humantime strings ("500ms", "30s", "30d").
//!
//! ```toml
//! [queues.emails]
//! default_max_attempts = 5
//! default_backoff = { kind = "exponential", delay = "1s", jitter = 0.5, max_delay = "5m" }
//! default_timeout = "30s"
//! rate_limit = { max = 50, period = "1s" }
//! max_active = 10
//! group_max_active = 2
//! group_rate_limit = { max = 5, period = "1s" }
//! retention = { keep_completed = 1000, keep_dead = 100000, dead_max_age = "30d" }
//! cancel_grace = "30s"
//! dead_letter_expired = false
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::jobs::{Backoff, BackoffKind, QueueConfig, QueueName, RateLimit, Retention};

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueFile {
    /// Queue name -> its config.
    #[serde(default)]
    pub queues: BTreeMap<String, QueueEntry>,
}

/// One `[queues.<name>]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueEntry {
    default_max_attempts: Option<u32>,
    default_backoff: Option<BackoffEntry>,
    #[serde(default, with = "humantime_serde")]
    default_timeout: Option<Duration>,
    rate_limit: Option<RateLimitEntry>,
    max_active: Option<u32>,
    group_max_active: Option<u32>,
    group_rate_limit: Option<RateLimitEntry>,
    retention: Option<RetentionEntry>,
    #[serde(default, with = "humantime_serde")]
    cancel_grace: Option<Duration>,
    #[serde(default)]
    dead_letter_expired: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BackoffEntry {
    kind: String,
    #[serde(with = "humantime_serde")]
    delay: Duration,
    #[serde(default)]
    jitter: f64,
    #[serde(default, with = "humantime_serde")]
    max_delay: Option<Duration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitEntry {
    max: u32,
    #[serde(with = "humantime_serde")]
    period: Duration,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RetentionEntry {
    keep_completed: Option<u64>,
    #[serde(default, with = "humantime_serde")]
    completed_max_age: Option<Duration>,
    keep_dead: Option<u64>,
    #[serde(default, with = "humantime_serde")]
    dead_max_age: Option<Duration>,
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl QueueFile {
    /// Reads and validates the file; the error names the file, the queue and the field.
    pub fn load(path: &Path) -> Result<Vec<(QueueName, QueueConfig)>, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses and validates TOML text.
    pub fn parse(text: &str) -> Result<Vec<(QueueName, QueueConfig)>, String> {
        let file: QueueFile = toml::from_str(text).map_err(|e| e.to_string())?;
        file.queues
            .into_iter()
            .map(|(name, e)| {
                let at = |field: &str| format!("queues.{name}.{field}");
                let queue = QueueName::parse(&name)
                    .map_err(|r| format!("queues.{name}: queue name {r}"))?;
                let default_backoff = match e.default_backoff {
                    None => None,
                    Some(b) => {
                        let kind = match b.kind.as_str() {
                            "fixed" => BackoffKind::Fixed,
                            "exponential" => BackoffKind::Exponential,
                            other => {
                                return Err(format!(
                                    "{}: is {other:?}, must be \"fixed\" or \"exponential\"",
                                    at("default_backoff.kind")
                                ))
                            }
                        };
                        if !(0.0..=1.0).contains(&b.jitter) {
                            return Err(format!(
                                "{}: is {}, must be in [0, 1]",
                                at("default_backoff.jitter"),
                                b.jitter
                            ));
                        }
                        Some(Backoff {
                            kind,
                            delay_ms: ms(b.delay),
                            jitter: b.jitter,
                            max_delay_ms: b.max_delay.map_or(0, ms),
                        })
                    }
                };
                let r = e.retention.unwrap_or_default();
                let config = QueueConfig {
                    default_max_attempts: e.default_max_attempts,
                    default_backoff,
                    default_timeout_ms: e.default_timeout.map(ms),
                    retention: Retention {
                        keep_completed: r.keep_completed,
                        completed_max_age_ms: r.completed_max_age.map(ms),
                        keep_dead: r.keep_dead,
                        dead_max_age_ms: r.dead_max_age.map(ms),
                    },
                    rate_limit: e.rate_limit.map(|rl| RateLimit {
                        max: rl.max,
                        period_ms: ms(rl.period),
                    }),
                    max_active: e.max_active,
                    group_max_active: e.group_max_active,
                    group_rate_limit: e.group_rate_limit.map(|rl| RateLimit {
                        max: rl.max,
                        period_ms: ms(rl.period),
                    }),
                    cancel_grace_ms: e.cancel_grace.map(ms),
                    dead_letter_expired: e.dead_letter_expired,
                };
                if config.default_timeout_ms == Some(0) {
                    return Err(format!("{}: must be at least 1 ms", at("default_timeout")));
                }
                config
                    .validate()
                    .map_err(|(field, reason)| format!("{}: {reason}", at(&field)))?;
                Ok((queue, config))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example() {
        let text = r#"
            [queues.emails]
            default_max_attempts = 5
            default_backoff = { kind = "exponential", delay = "1s", jitter = 0.5, max_delay = "5m" }
            default_timeout = "30s"
            rate_limit = { max = 50, period = "1s" }
            max_active = 10
            retention = { keep_completed = 1000, keep_dead = 100000, dead_max_age = "30d" }
        "#;
        let queues = QueueFile::parse(text).expect("valid");
        let (name, c) = &queues[0];
        assert_eq!(name.as_str(), "emails");
        assert_eq!(
            c.rate_limit,
            Some(RateLimit {
                max: 50,
                period_ms: 1000
            })
        );
        assert_eq!(
            c.default_backoff.as_ref().map(|b| b.max_delay_ms),
            Some(300_000)
        );
        assert_eq!(c.retention.dead_max_age_ms, Some(30 * 24 * 3600 * 1000));
    }

    #[test]
    fn errors_name_the_queue_and_field() {
        let cases = [
            (
                "[queues.q]\nrate_limit = { max = 0, period = \"1s\" }",
                "queues.q.rate_limit.max",
            ),
            ("[queues.q]\nmax_active = 0", "queues.q.max_active"),
            (
                "[queues.q]\ndefault_backoff = { kind = \"linear\", delay = \"1s\" }",
                "queues.q.default_backoff.kind",
            ),
            ("[queues.\"a b\"]\nmax_active = 1", "queues.a b"),
            ("[queues.q]\nbogus = 1", "bogus"),
            ("[queues.q]\ndefault_timeout = \"soon\"", "default_timeout"),
        ];
        for (text, want) in cases {
            let err = QueueFile::parse(text).expect_err(text);
            assert!(err.contains(want), "{err:?} should name {want}");
        }
    }
}
