//! `serve` flags naming this replica and its worker-stream reports (ListWorkers).

use std::time::Duration;

use clap::Args;

/// Longest replica id, bytes.
pub const MAX_REPLICA_ID_BYTES: usize = 128;

/// Who this replica is, and how often it reports its worker streams to Redis.
#[derive(Clone, Debug, Args)]
pub struct ReplicaArgs {
    /// This replica's id in ListWorkers and its start-up log line: 1-128 bytes of
    /// [A-Za-z0-9._-] (e.g. the pod name). Unset: the hostname and a random suffix, new at
    /// every start.
    #[arg(long, env = "JOBWIRE_REPLICA_ID")]
    pub replica_id: Option<String>,

    /// How often this replica writes its worker streams to Redis for the other replicas'
    /// ListWorkers (100ms..=1m); a report expires after three intervals, so a replica that
    /// stops without a clean shutdown drops out of ListWorkers then.
    #[arg(long, env = "JOBWIRE_WORKERS_REPORT_INTERVAL", default_value = "5s", value_parser = humantime::parse_duration)]
    pub workers_report_interval: Duration,
}

impl Default for ReplicaArgs {
    fn default() -> Self {
        ReplicaArgs {
            replica_id: None,
            workers_report_interval: Duration::from_secs(5),
        }
    }
}

impl ReplicaArgs {
    /// Checks what clap cannot; the error names the flag.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(id) = &self.replica_id {
            check_id(id).map_err(|e| format!("--replica-id {e}"))?;
        }
        let i = self.workers_report_interval;
        if i < Duration::from_millis(100) || i > Duration::from_secs(60) {
            return Err(format!(
                "--workers-report-interval must be between 100ms and 1m, got {}",
                humantime::format_duration(i)
            ));
        }
        Ok(())
    }

    /// The replica id: `--replica-id`, else `<hostname>-<6 random hex digits>` (characters
    /// outside [A-Za-z0-9._-] in the hostname become `-`).
    pub fn resolve_id(&self) -> String {
        if let Some(id) = &self.replica_id {
            return id.clone();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_default();
        let mut host: String = host
            .trim()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '-'
                }
            })
            .take(MAX_REPLICA_ID_BYTES - 7)
            .collect();
        if host.is_empty() {
            host.push_str("jobwire");
        }
        format!("{host}-{:06x}", rand::random::<u32>() & 0xff_ffff)
    }

    /// `JOBWIRE_*=value` lines for `--print-config`.
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "JOBWIRE_REPLICA_ID",
                self.replica_id.clone().unwrap_or_default(),
            ),
            (
                "JOBWIRE_WORKERS_REPORT_INTERVAL",
                humantime::format_duration(self.workers_report_interval).to_string(),
            ),
        ]
    }
}

/// Is `id` a valid replica id (1-128 bytes of [A-Za-z0-9._-])? The error says why not.
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_REPLICA_ID_BYTES {
        return Err(format!(
            "must be 1 to {MAX_REPLICA_ID_BYTES} bytes, got {}",
            id.len()
        ));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!("{id:?} has {c:?}: only [A-Za-z0-9._-] may be used"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_and_made_up_from_the_hostname() {
        assert!(check_id("jobwire-7d9f-abc.0_x").is_ok());
        assert!(check_id("").is_err() && check_id("a/b").is_err());
        assert!(check_id(&"x".repeat(129)).is_err());
        let made = ReplicaArgs::default().resolve_id();
        assert!(check_id(&made).is_ok(), "{made}");
        assert_ne!(made, ReplicaArgs::default().resolve_id(), "a random suffix");
        let bad = ReplicaArgs {
            workers_report_interval: Duration::from_millis(10),
            ..ReplicaArgs::default()
        };
        assert!(bad
            .validate()
            .expect_err("refused")
            .contains("--workers-report-interval"));
    }
}
