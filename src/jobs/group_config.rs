//! A group's own config (a group: the jobs of one `group_key` in a queue, e.g. a tenant),
//! set at run time through GroupService; unset fields take the queue's group defaults
//! ([`super::QueueConfig::group_max_active`], [`super::QueueConfig::group_rate_limit`]) and
//! weight 1. Stored per group in the queue's `gconf` hash (`store/scripts/groups.lua`).

use super::RateLimit;

/// A group's own config; `None` fields fall back to the queue's defaults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupConfig {
    /// Its share of leases relative to the other groups with waiting jobs, 1..=1000 (unset:
    /// 1).
    pub weight: Option<u32>,
    /// Most of its jobs leased at once across every replica, 1..=1000000.
    pub max_active: Option<u32>,
    /// Rate limit on its job starts.
    pub rate_limit: Option<RateLimit>,
}

/// The parts of a group's config an update may name (AIP-134 update mask paths).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupField {
    /// `weight`
    Weight,
    /// `max_active`
    MaxActive,
    /// `rate_limit`
    RateLimit,
}

impl GroupField {
    /// Every field, for a full replace.
    pub const ALL: [GroupField; 3] = [
        GroupField::Weight,
        GroupField::MaxActive,
        GroupField::RateLimit,
    ];

    /// The update-mask path.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupField::Weight => "weight",
            GroupField::MaxActive => "max_active",
            GroupField::RateLimit => "rate_limit",
        }
    }

    /// Parses an update-mask path.
    pub fn parse(path: &str) -> Option<GroupField> {
        GroupField::ALL.into_iter().find(|f| f.as_str() == path)
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

impl GroupConfig {
    /// The stored values of the named fields: (field code of `groups.lua`'s gconf hash,
    /// value), "" meaning back to the default.
    pub fn stored_fields(&self, fields: &[GroupField]) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for f in fields {
            match f {
                GroupField::Weight => out.push(("wt", opt(self.weight))),
                GroupField::MaxActive => out.push(("ma", opt(self.max_active))),
                GroupField::RateLimit => {
                    out.push(("rm", opt(self.rate_limit.map(|r| r.max))));
                    out.push(("rp", opt(self.rate_limit.map(|r| r.period_ms))));
                }
            }
        }
        out
    }

    /// Reads a config back from its stored values (weight, max_active, rate max, rate
    /// period ms; "" or malformed: unset).
    pub fn from_stored(
        weight: &str,
        max_active: &str,
        rate_max: &str,
        rate_ms: &str,
    ) -> GroupConfig {
        GroupConfig {
            weight: weight.parse().ok(),
            max_active: max_active.parse().ok(),
            rate_limit: match (rate_max.parse(), rate_ms.parse()) {
                (Ok(max), Ok(period_ms)) => Some(RateLimit { max, period_ms }),
                _ => None,
            },
        }
    }

    /// Checks ranges; the error is (field path, reason).
    pub fn validate(&self) -> Result<(), (String, String)> {
        if let Some(w) = self.weight.filter(|w| !(1..=1000).contains(w)) {
            return Err(("weight".into(), format!("is {w}, must be in [1, 1000]")));
        }
        if let Some(m) = self.max_active.filter(|m| !(1..=1_000_000).contains(m)) {
            return Err((
                "max_active".into(),
                format!("is {m}, must be in [1, 1000000]"),
            ));
        }
        if let Some(r) = self.rate_limit {
            r.validate()
                .map_err(|(f, why)| (format!("rate_limit.{f}"), why))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_the_stored_values_and_checks_ranges() {
        let c = GroupConfig {
            weight: Some(3),
            max_active: Some(2),
            rate_limit: Some(RateLimit {
                max: 5,
                period_ms: 1000,
            }),
        };
        let v: Vec<String> = c
            .stored_fields(&GroupField::ALL)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        assert_eq!(GroupConfig::from_stored(&v[0], &v[1], &v[2], &v[3]), c);
        assert_eq!(
            GroupConfig::from_stored("", "", "", ""),
            GroupConfig::default()
        );
        let bad = GroupConfig {
            weight: Some(0),
            ..c
        };
        assert_eq!(bad.validate().expect_err("weight 0").0, "weight");
        assert_eq!(GroupField::parse("rate_limit"), Some(GroupField::RateLimit));
        assert_eq!(GroupField::parse("nope"), None);
    }
}
