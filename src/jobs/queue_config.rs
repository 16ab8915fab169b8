//! A queue's config: defaults for its jobs, retention, and limits. It lives in the queue's
//! Redis meta hash, so every replica reads one truth; [`QueueConfig::meta_fields`] and
//! [`QueueConfig::from_meta`] are the two directions of that mapping (field names as in
//! `store/scripts/common.lua`).

use std::collections::HashMap;

use super::Backoff;

/// Completed jobs kept when the config says nothing.
pub const DEFAULT_KEEP_COMPLETED: u64 = 1000;
/// Dead-letter entries kept when the config says nothing.
pub const DEFAULT_KEEP_DEAD: u64 = 100_000;
/// Dead-letter entries' age limit when the config says nothing: 30 days, in ms.
pub const DEFAULT_DEAD_MAX_AGE_MS: u64 = 30 * 24 * 3600 * 1000;

/// At most `max` job starts in any window of `period_ms` (a sliding window, exact: every
/// start is recorded, so no window ever holds more, and a start is admitted as soon as the
/// oldest recorded one leaves the window).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Starts per window, 1..=100000.
    pub max: u32,
    /// Window length, ms, 1..=86400000.
    pub period_ms: u64,
}

impl RateLimit {
    /// Checks ranges; the error is (field: `max` or `period`, reason).
    pub fn validate(&self) -> Result<(), (String, String)> {
        if !(1..=100_000).contains(&self.max) {
            return Err((
                "max".to_owned(),
                format!("is {}, must be in [1, 100000]", self.max),
            ));
        }
        if !(1..=86_400_000).contains(&self.period_ms) {
            return Err((
                "period".to_owned(),
                format!("is {} ms, must be 1 ms to 1 day", self.period_ms),
            ));
        }
        Ok(())
    }
}

/// How long finished jobs are kept; `None` means the default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Completed jobs kept (default [`DEFAULT_KEEP_COMPLETED`]).
    pub keep_completed: Option<u64>,
    /// Completed jobs' age limit, ms (default: none).
    pub completed_max_age_ms: Option<u64>,
    /// Dead-letter entries kept (default [`DEFAULT_KEEP_DEAD`]).
    pub keep_dead: Option<u64>,
    /// Dead-letter entries' age limit, ms (default [`DEFAULT_DEAD_MAX_AGE_MS`]).
    pub dead_max_age_ms: Option<u64>,
}

/// A queue's config; `None` fields fall back to the server's defaults.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueConfig {
    /// max_attempts of jobs that do not set it.
    pub default_max_attempts: Option<u32>,
    /// Backoff of jobs that do not set one.
    pub default_backoff: Option<Backoff>,
    /// Per-attempt timeout of jobs that do not set one, ms.
    pub default_timeout_ms: Option<u64>,
    /// Retention of finished jobs.
    pub retention: Retention,
    /// Rate limit on job starts.
    pub rate_limit: Option<RateLimit>,
    /// Most jobs leased at once, across every replica.
    pub max_active: Option<u32>,
    /// Most jobs of one named group leased at once, across every replica (a group's own
    /// config overrides it; `store/scripts/groups.lua`).
    pub group_max_active: Option<u32>,
    /// Rate limit on the job starts of each named group (a group's own config overrides it).
    pub group_rate_limit: Option<RateLimit>,
    /// How long the holder of a cancelled active job may take to settle it before its
    /// lease is revoked, ms (0 to 1 h; default [`DEFAULT_CANCEL_GRACE_MS`]).
    pub cancel_grace_ms: Option<u64>,
    /// Expired jobs are dead-lettered (reason EXPIRED) instead of ending EXPIRED.
    pub dead_letter_expired: bool,
}

/// The cancel grace when the config says nothing: 30 s (`scripts/common.lua`
/// CANCEL_GRACE_MS).
pub const DEFAULT_CANCEL_GRACE_MS: u64 = 30_000;
/// Longest cancel grace: 1 h.
pub const MAX_CANCEL_GRACE_MS: u64 = 3_600_000;

/// The parts of a config an update may name (AIP-134 update mask paths).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigField {
    /// `default_max_attempts`
    DefaultMaxAttempts,
    /// `default_backoff`
    DefaultBackoff,
    /// `default_timeout`
    DefaultTimeout,
    /// `retention`
    Retention,
    /// `rate_limit`
    RateLimit,
    /// `max_active`
    MaxActive,
    /// `group_max_active`
    GroupMaxActive,
    /// `group_rate_limit`
    GroupRateLimit,
    /// `cancel_grace`
    CancelGrace,
    /// `dead_letter_expired`
    DeadLetterExpired,
}

impl ConfigField {
    /// Every field, for a full replace.
    pub const ALL: [ConfigField; 10] = [
        ConfigField::DefaultMaxAttempts,
        ConfigField::DefaultBackoff,
        ConfigField::DefaultTimeout,
        ConfigField::Retention,
        ConfigField::RateLimit,
        ConfigField::MaxActive,
        ConfigField::GroupMaxActive,
        ConfigField::GroupRateLimit,
        ConfigField::CancelGrace,
        ConfigField::DeadLetterExpired,
    ];

    /// The update-mask path.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigField::DefaultMaxAttempts => "default_max_attempts",
            ConfigField::DefaultBackoff => "default_backoff",
            ConfigField::DefaultTimeout => "default_timeout",
            ConfigField::Retention => "retention",
            ConfigField::RateLimit => "rate_limit",
            ConfigField::MaxActive => "max_active",
            ConfigField::GroupMaxActive => "group_max_active",
            ConfigField::GroupRateLimit => "group_rate_limit",
            ConfigField::CancelGrace => "cancel_grace",
            ConfigField::DeadLetterExpired => "dead_letter_expired",
        }
    }

    /// Parses an update-mask path.
    pub fn parse(path: &str) -> Option<ConfigField> {
        Some(match path {
            "default_max_attempts" => ConfigField::DefaultMaxAttempts,
            "default_backoff" => ConfigField::DefaultBackoff,
            "default_timeout" => ConfigField::DefaultTimeout,
            "retention" => ConfigField::Retention,
            "rate_limit" => ConfigField::RateLimit,
            "max_active" => ConfigField::MaxActive,
            "group_max_active" => ConfigField::GroupMaxActive,
            "group_rate_limit" => ConfigField::GroupRateLimit,
            "cancel_grace" => ConfigField::CancelGrace,
            "dead_letter_expired" => ConfigField::DeadLetterExpired,
            _ => return None,
        })
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

impl QueueConfig {
    /// The meta-hash writes for the named fields: (field, value), "" meaning delete.
    pub fn meta_fields(&self, fields: &[ConfigField]) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for f in fields {
            match f {
                ConfigField::DefaultMaxAttempts => {
                    out.push(("d_max", opt(self.default_max_attempts)))
                }
                ConfigField::DefaultBackoff => out.push((
                    "d_bo",
                    self.default_backoff
                        .as_ref()
                        .map(Backoff::encode)
                        .unwrap_or_default(),
                )),
                ConfigField::DefaultTimeout => out.push(("d_to", opt(self.default_timeout_ms))),
                ConfigField::Retention => {
                    let r = &self.retention;
                    out.push(("keep_completed", opt(r.keep_completed)));
                    out.push(("completed_age_ms", opt(r.completed_max_age_ms)));
                    out.push(("keep_dead", opt(r.keep_dead)));
                    out.push(("dead_age_ms", opt(r.dead_max_age_ms)));
                }
                ConfigField::RateLimit => {
                    out.push(("rate_max", opt(self.rate_limit.map(|r| r.max))));
                    out.push(("rate_ms", opt(self.rate_limit.map(|r| r.period_ms))));
                }
                ConfigField::MaxActive => out.push(("max_active", opt(self.max_active))),
                ConfigField::GroupMaxActive => out.push(("gma", opt(self.group_max_active))),
                ConfigField::GroupRateLimit => {
                    out.push(("grm", opt(self.group_rate_limit.map(|r| r.max))));
                    out.push(("grp", opt(self.group_rate_limit.map(|r| r.period_ms))));
                }
                ConfigField::CancelGrace => {
                    out.push(("cancel_grace_ms", opt(self.cancel_grace_ms)))
                }
                ConfigField::DeadLetterExpired => out.push((
                    "dead_letter_expired",
                    if self.dead_letter_expired { "1" } else { "" }.to_owned(),
                )),
            }
        }
        out
    }

    /// Reads a config back from the meta hash (unknown or malformed fields read as unset).
    pub fn from_meta(meta: &HashMap<String, String>) -> QueueConfig {
        fn get<T: std::str::FromStr>(m: &HashMap<String, String>, k: &str) -> Option<T> {
            m.get(k).and_then(|v| v.parse().ok())
        }
        let rate_limit = match (get(meta, "rate_max"), get(meta, "rate_ms")) {
            (Some(max), Some(period_ms)) => Some(RateLimit { max, period_ms }),
            _ => None,
        };
        QueueConfig {
            default_max_attempts: get(meta, "d_max"),
            default_backoff: meta.get("d_bo").and_then(|s| Backoff::decode(s)),
            default_timeout_ms: get(meta, "d_to"),
            retention: Retention {
                keep_completed: get(meta, "keep_completed"),
                completed_max_age_ms: get(meta, "completed_age_ms"),
                keep_dead: get(meta, "keep_dead"),
                dead_max_age_ms: get(meta, "dead_age_ms"),
            },
            rate_limit,
            max_active: get(meta, "max_active"),
            group_max_active: get(meta, "gma"),
            group_rate_limit: match (get(meta, "grm"), get(meta, "grp")) {
                (Some(max), Some(period_ms)) => Some(RateLimit { max, period_ms }),
                _ => None,
            },
            cancel_grace_ms: get(meta, "cancel_grace_ms"),
            dead_letter_expired: meta.get("dead_letter_expired").is_some_and(|v| v == "1"),
        }
    }

    /// Checks ranges; the error is (field path, reason).
    pub fn validate(&self) -> Result<(), (String, String)> {
        let bad = |f: &str, r: String| Err((f.to_owned(), r));
        if let Some(m) = self
            .default_max_attempts
            .filter(|m| !(1..=1000).contains(m))
        {
            return bad(
                "default_max_attempts",
                format!("is {m}, must be in [1, 1000]"),
            );
        }
        for (name, rate) in [
            ("rate_limit", self.rate_limit),
            ("group_rate_limit", self.group_rate_limit),
        ] {
            if let Some(r) = rate {
                r.validate()
                    .map_err(|(f, why)| (format!("{name}.{f}"), why))?;
            }
        }
        for (name, max) in [
            ("max_active", self.max_active),
            ("group_max_active", self.group_max_active),
        ] {
            if let Some(m) = max.filter(|m| !(1..=1_000_000).contains(m)) {
                return bad(name, format!("is {m}, must be in [1, 1000000]"));
            }
        }
        if let Some(g) = self.cancel_grace_ms.filter(|g| *g > MAX_CANCEL_GRACE_MS) {
            return bad(
                "cancel_grace",
                format!("is {g} ms, must be 0 to {MAX_CANCEL_GRACE_MS} ms (1 h)"),
            );
        }
        for (f, v) in [
            ("retention.keep_completed", self.retention.keep_completed),
            ("retention.keep_dead", self.retention.keep_dead),
        ] {
            if let Some(v) = v.filter(|v| *v > 1_000_000) {
                return bad(f, format!("is {v}, must be at most 1000000"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::BackoffKind;

    #[test]
    fn round_trips_through_the_meta_hash() {
        let c = QueueConfig {
            default_max_attempts: Some(5),
            default_backoff: Some(Backoff {
                kind: BackoffKind::Exponential,
                delay_ms: 1000,
                jitter: 0.5,
                max_delay_ms: 60_000,
            }),
            default_timeout_ms: Some(30_000),
            retention: Retention {
                keep_completed: Some(10),
                completed_max_age_ms: None,
                keep_dead: Some(20),
                dead_max_age_ms: Some(1000),
            },
            rate_limit: Some(RateLimit {
                max: 50,
                period_ms: 1000,
            }),
            max_active: Some(7),
            group_max_active: Some(2),
            group_rate_limit: Some(RateLimit {
                max: 5,
                period_ms: 2000,
            }),
            cancel_grace_ms: Some(0),
            dead_letter_expired: true,
        };
        let meta: HashMap<String, String> = c
            .meta_fields(&ConfigField::ALL)
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        assert_eq!(QueueConfig::from_meta(&meta), c);
    }

    #[test]
    fn unset_fields_are_deleted_and_ranges_checked() {
        let c = QueueConfig::default();
        assert!(c
            .meta_fields(&[ConfigField::RateLimit])
            .iter()
            .all(|(_, v)| v.is_empty()));
        let bad = QueueConfig {
            rate_limit: Some(RateLimit {
                max: 0,
                period_ms: 1000,
            }),
            ..Default::default()
        };
        assert_eq!(
            bad.validate().map_err(|e| e.0),
            Err("rate_limit.max".to_owned())
        );
        let bad = QueueConfig {
            max_active: Some(0),
            ..Default::default()
        };
        assert_eq!(
            bad.validate().map_err(|e| e.0),
            Err("max_active".to_owned())
        );
    }
}
