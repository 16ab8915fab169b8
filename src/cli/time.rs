//! Times and durations on the command line and in the output: flags take an RFC 3339 time
//! (`2026-12-02T03:00:00Z`) or an age relative to now (`2h`, `30m`, `1day`: that long ago);
//! output prints times as RFC 3339 UTC with milliseconds and durations as seconds. Duration
//! flags (`30s`, `1h`) are parsed by clap with humantime, so a bad one is clap's usage error.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::CliError;

/// Parses `value` of `flag` as an RFC 3339 time or a humantime age before `now`. Errors
/// (exit 2) name the flag and both accepted forms.
pub fn parse_time(flag: &str, value: &str, now: SystemTime) -> Result<SystemTime, CliError> {
    if let Ok(t) = humantime::parse_rfc3339(value) {
        // Z only: an explicit offset other than Z is not supported by humantime, so those
        // fail below with the same message.
        return Ok(t);
    }
    if humantime::parse_rfc3339_weak(value).is_ok() {
        // No zone: local time or UTC? Refused rather than guessed.
        return Err(CliError::usage(format!(
            "{flag} {value:?}: no time zone: end an RFC 3339 time with Z (UTC), e.g. 2026-12-02T03:00:00Z"
        )));
    }
    if let Ok(age) = humantime::parse_duration(value) {
        return now.checked_sub(age).ok_or_else(|| {
            CliError::usage(format!("{flag} {value:?}: the age reaches before 1970"))
        });
    }
    Err(CliError::usage(format!(
        "{flag} {value:?}: not a time: give RFC 3339 UTC (2026-12-02T03:00:00Z) or an age such as 2h or 30m"
    )))
}

/// A protobuf timestamp from a `SystemTime` (times before 1970 become 1970).
pub fn to_pb(t: SystemTime) -> prost_types::Timestamp {
    t.max(UNIX_EPOCH).into()
}

/// A protobuf duration.
pub fn duration_to_pb(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// `t` as RFC 3339 UTC with milliseconds; `None` for an unset timestamp (or one before 1970,
/// which the server never sends).
pub fn rfc3339(t: Option<&prost_types::Timestamp>) -> Option<String> {
    let t = t?;
    if t.seconds < 0 || (t.seconds == 0 && t.nanos == 0) {
        return None;
    }
    let st = UNIX_EPOCH + Duration::new(t.seconds as u64, t.nanos.clamp(0, 999_999_999) as u32);
    Some(humantime::format_rfc3339_millis(st).to_string())
}

/// A protobuf duration in seconds (fractions kept); `None` when unset.
pub fn seconds(d: Option<&prost_types::Duration>) -> Option<f64> {
    d.map(|d| d.seconds as f64 + f64::from(d.nanos) / 1e9)
}

/// An RFC 3339 time (as [`rfc3339`] prints it) relative to `now`, for people: `3m12s ago`,
/// `in 5m`; `-` for none.
pub fn relative(t: Option<&str>, now: SystemTime) -> String {
    let Some(t) = t.and_then(|t| humantime::parse_rfc3339(t).ok()) else {
        return "-".into();
    };
    match now.duration_since(t) {
        Ok(d) => format!("{} ago", human(d.as_secs_f64())),
        Err(e) => format!("in {}", human(e.duration().as_secs_f64())),
    }
}

/// A duration for people: `950ms`, `42s`, `3m12s`, `5h4m`, `2d3h`.
pub fn human(secs: f64) -> String {
    if secs < 1.0 {
        return format!("{}ms", (secs * 1000.0).round() as u64);
    }
    let s = secs.round() as u64;
    let (d, h, m, s) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) if s == 0 => format!("{m}m"),
        (0, 0, _) => format!("{m}m{s}s"),
        (0, _, 0) => format!("{h}h"),
        (0, _, _) => format!("{h}h{m}m"),
        (_, 0, _) => format!("{d}d"),
        _ => format!("{d}d{h}h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_as_rfc3339_or_as_an_age() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let t = parse_time("--dead-after", "2h", now).expect("age");
        assert_eq!(t, now - Duration::from_secs(7200));
        let t = parse_time("--dead-after", "2026-12-02T03:00:00Z", now).expect("rfc3339");
        assert_eq!(
            rfc3339(Some(&to_pb(t))).as_deref(),
            Some("2026-12-02T03:00:00.000Z")
        );
        let e = parse_time("--dead-before", "yesterday-ish", now).expect_err("bad");
        assert_eq!(e.exit_code(), super::super::exit::USAGE);
        assert!(e.to_string().starts_with("--dead-before \"yesterday-ish\""));
    }

    #[test]
    fn relative_times_say_ago_or_in() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let t = |secs: u64| rfc3339(Some(&to_pb(UNIX_EPOCH + Duration::from_secs(secs))));
        assert_eq!(relative(t(1_800_000_000 - 90).as_deref(), now), "1m30s ago");
        assert_eq!(relative(t(1_800_000_000 + 300).as_deref(), now), "in 5m");
        assert_eq!(relative(None, now), "-");
    }

    #[test]
    fn durations_print_for_people() {
        assert_eq!(human(0.25), "250ms");
        assert_eq!(human(42.0), "42s");
        assert_eq!(human(192.0), "3m12s");
        assert_eq!(human(5.0 * 3600.0 + 240.0), "5h4m");
        assert_eq!(human(2.0 * 86_400.0 + 3.0 * 3600.0), "2d3h");
        assert_eq!(human(30.0 * 86_400.0), "30d");
        assert_eq!(human(3600.0), "1h");
        assert_eq!(human(120.0), "2m");
    }
}
