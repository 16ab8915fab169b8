//! Pieces the pages share: inline SVG sparklines, time and duration formatting, job state
//! and dead-reason names, and URL path segments.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use maud::{html, Markup};

use crate::pb;

/// Sparkline width and height, in SVG user units (= CSS pixels).
const SPARK_W: f64 = 120.0;
const SPARK_H: f64 = 24.0;

/// An inline SVG sparkline of `values` (oldest first), `class` added to `spark` for its
/// colour (the stylesheet's). Its `<title>` says the total and the window.
pub fn sparkline(values: &[u32], class: &str, what: &str) -> Markup {
    let max = values.iter().copied().max().unwrap_or(0).max(1) as f64;
    let n = values.len().max(2) as f64 - 1.0;
    let points: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let x = i as f64 * SPARK_W / n;
            let y = SPARK_H - 1.0 - (v as f64 / max) * (SPARK_H - 2.0);
            format!("{x:.1},{y:.1}")
        })
        .collect();
    let total: u64 = values.iter().map(|&v| v as u64).sum();
    html! {
        svg class={ "spark " (class) } viewBox={ "0 0 " (SPARK_W) " " (SPARK_H) }
            width=(SPARK_W) height=(SPARK_H) role="img"
            aria-label={ (total) " " (what) " in the last 10 minutes" } {
            title { (total) " " (what) " in the last 10 minutes (10 s buckets, this replica)" }
            polyline points=(points.join(" ")) fill="none" stroke="currentColor" stroke-width="1.5" {}
        }
    }
}

/// `None` unless `s` reads as an age (a number first, no `-` or `:`: `30m`, `2h`, `7d`,
/// `1h 30m`); then the time that long before now, or why the age is not one.
pub fn relative_time(s: &str) -> Option<Result<SystemTime, String>> {
    let s = s.trim();
    if !s.starts_with(|c: char| c.is_ascii_digit()) || s.contains(['-', ':']) {
        return None;
    }
    Some(
        humantime::parse_duration(s)
            .map_err(|e| format!("{e} (give an age like 30m, 2h, 7d)"))
            .and_then(|d| {
                SystemTime::now()
                    .checked_sub(d)
                    .filter(|t| *t >= UNIX_EPOCH)
                    .ok_or_else(|| "that age reaches before 1970".to_owned())
            }),
    )
}

/// A timestamp as RFC 3339 UTC to the second, "" when unset.
pub fn ts(t: Option<&prost_types::Timestamp>) -> String {
    match t {
        Some(t) if t.seconds > 0 || t.nanos > 0 => {
            let at = UNIX_EPOCH + Duration::new(t.seconds.max(0) as u64, 0);
            humantime::format_rfc3339_seconds(at).to_string()
        }
        _ => String::new(),
    }
}

/// A timestamp as a `<time>` element (kept on one line by the stylesheet), empty when unset.
pub fn ts_el(t: Option<&prost_types::Timestamp>) -> Markup {
    let s = ts(t);
    html! {
        @if !s.is_empty() { time datetime=(s) { (s) } }
    }
}

/// A table in a box that scrolls sideways when the table is wider than the window, so that
/// the page itself never does.
pub fn scroll(table: Markup) -> Markup {
    html! { div.table-scroll { (table) } }
}

/// A last-error cell: one line cut short with an ellipsis, the whole text in its `title`.
pub fn msg_cell(message: &str) -> Markup {
    html! {
        td.msg title=(message) { span.clip { (message) } }
    }
}

/// A protobuf duration for people ([`human_ms`]), "" when unset or zero.
pub fn dur(d: Option<&prost_types::Duration>) -> String {
    match d {
        Some(d) if d.seconds > 0 || d.nanos > 0 => {
            human_ms(d.seconds.max(0) as u64 * 1000 + d.nanos.max(0) as u64 / 1_000_000)
        }
        _ => String::new(),
    }
}

/// Milliseconds in at most two units, the largest first and cut down, never rounded up:
/// "850ms", "1.5s", "12s", "3m 12s", "2h 5m", "3d 4h" (a zero second unit is left out:
/// "5m", "30d").
pub fn human_ms(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")];
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    if s < 60 && ms % 1000 >= 100 {
        return format!("{s}.{}s", ms % 1000 / 100);
    }
    for (i, (size, name)) in UNITS.iter().enumerate() {
        if s >= *size {
            let (big, rest) = (s / size, s % size);
            return match UNITS.get(i + 1) {
                Some((small, small_name)) if rest / small > 0 => {
                    format!("{big}{name} {}{small_name}", rest / small)
                }
                _ => format!("{big}{name}"),
            };
        }
    }
    format!("{s}s")
}

/// How long ago `t` was, for people ([`human_ms`]); "" when unset, "0s" when not past.
pub fn since(t: Option<&prost_types::Timestamp>) -> String {
    let Some(t) = t.filter(|t| t.seconds > 0 || t.nanos > 0) else {
        return String::new();
    };
    let at = UNIX_EPOCH + Duration::new(t.seconds.max(0) as u64, t.nanos.max(0) as u32);
    match std::time::SystemTime::now().duration_since(at) {
        Ok(d) if d.as_millis() > 0 => human_ms(d.as_millis() as u64),
        _ => "0s".into(),
    }
}

/// `s`, or "none" when it is empty (an unset duration or limit).
pub fn or_none(s: String) -> String {
    if s.is_empty() {
        "none".into()
    } else {
        s
    }
}

/// The oldest waiting job's age: "—" when nothing waits (`waiting` is 0), "0s" when one
/// has just arrived.
pub fn oldest_waiting(waiting: u64, age: Option<&prost_types::Duration>) -> String {
    match (waiting, dur(age)) {
        (0, _) => "—".into(),
        (_, a) if a.is_empty() => "0s".into(),
        (_, a) => a,
    }
}

/// A job state's short name: waiting, delayed, active, completed, dead, cancelled, expired.
pub fn state_name(state: i32) -> &'static str {
    match pb::JobState::try_from(state) {
        Ok(pb::JobState::Waiting) => "waiting",
        Ok(pb::JobState::Delayed) => "delayed",
        Ok(pb::JobState::Active) => "active",
        Ok(pb::JobState::Completed) => "completed",
        Ok(pb::JobState::Dead) => "dead",
        Ok(pb::JobState::Cancelled) => "cancelled",
        Ok(pb::JobState::Expired) => "expired",
        _ => "unknown",
    }
}

/// A dead reason's short name (the filter's values): no_retry, attempts_exhausted,
/// lease_expired, timed_out; "" when not dead.
pub fn reason_name(reason: i32) -> &'static str {
    match pb::DeadReason::try_from(reason) {
        Ok(pb::DeadReason::NoRetry) => "no_retry",
        Ok(pb::DeadReason::AttemptsExhausted) => "attempts_exhausted",
        Ok(pb::DeadReason::LeaseExpired) => "lease_expired",
        Ok(pb::DeadReason::TimedOut) => "timed_out",
        _ => "",
    }
}

/// Every dead reason, by short name.
pub const REASONS: [(&str, pb::DeadReason); 4] = [
    ("no_retry", pb::DeadReason::NoRetry),
    ("attempts_exhausted", pb::DeadReason::AttemptsExhausted),
    ("lease_expired", pb::DeadReason::LeaseExpired),
    ("timed_out", pb::DeadReason::TimedOut),
];

/// `s` as one URL path segment: every byte but the unreserved ones percent-encoded (a job
/// id may hold `/`, `?`, `#` or spaces).
pub fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A query string from `pairs`, empty values left out.
pub fn query(pairs: &[(&str, &str)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        if !v.is_empty() {
            q.append_pair(k, v);
        }
    }
    q.finish()
}

/// The path of a job's page.
pub fn job_url(queue: &str, id: &str) -> String {
    format!("/ui/queues/{}/jobs/{}", seg(queue), seg(id))
}

/// The path of a queue's page.
pub fn queue_url(queue: &str) -> String {
    format!("/ui/queues/{}", seg(queue))
}

/// The path of a queue's dead-letter page.
pub fn dead_url(queue: &str) -> String {
    format!("/ui/queues/{}/dead", seg(queue))
}

/// Parses a time from a form: RFC 3339 (`2026-12-02T03:50:00Z`), the browser's
/// `datetime-local` value (`2026-12-02T03:50`, taken as UTC), or an age, that long before now
/// ([`relative_time`]). `Err` names `field`.
pub fn parse_time(field: &str, s: &str) -> Result<Option<prost_types::Timestamp>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let t = match relative_time(s) {
        Some(Ok(t)) => t,
        Some(Err(e)) => return Err(format!("{field}: {e}, got {s:?}")),
        None => {
            let full = if s.len() == 16 {
                format!("{s}:00")
            } else {
                s.to_owned()
            };
            humantime::parse_rfc3339_weak(&full).map_err(|e| {
                format!(
                    "{field}: {e} (give a UTC time like 2026-12-02T03:50:00Z or an age like \
                     30m, 2h, 7d), got {s:?}"
                )
            })?
        }
    };
    Ok(Some(t.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_encode_everything_but_unreserved() {
        assert_eq!(seg("a-b_c.d~9"), "a-b_c.d~9");
        assert_eq!(seg("a/b c?#"), "a%2Fb%20c%3F%23");
        assert_eq!(seg("é"), "%C3%A9");
    }

    #[test]
    fn times_parse_and_name_the_field() {
        let t = parse_time("dead_after", "2026-12-02T03:50")
            .expect("ok")
            .expect("set");
        assert_eq!(t.seconds, 1_796_183_400);
        assert!(parse_time("dead_after", "").expect("ok").is_none());
        let e = parse_time("dead_after", "yesterday").expect_err("bad");
        assert!(e.starts_with("dead_after"), "{e}");
    }

    #[test]
    fn durations_read_in_two_units_at_most() {
        for (ms, want) in [
            (850, "850ms"),
            (1_500, "1.5s"),
            (12_000, "12s"),
            (12_040, "12s"),
            (192_000, "3m 12s"),
            (300_999, "5m"),
            (7_503_000, "2h 5m"),
            (2_592_000_000, "30d"),
            (273_600_000, "3d 4h"),
        ] {
            assert_eq!(human_ms(ms), want, "{ms}");
        }
        assert_eq!(dur(None), "");
        let d = prost_types::Duration {
            seconds: 61,
            nanos: 0,
        };
        assert_eq!(oldest_waiting(0, Some(&d)), "—");
        assert_eq!(oldest_waiting(2, Some(&d)), "1m 1s");
        assert_eq!(oldest_waiting(1, None), "0s");
    }

    #[test]
    fn ages_are_times_before_now() {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs() as i64;
        for (age, secs) in [
            ("30m", 1800),
            ("2h", 7200),
            ("7d", 604_800),
            ("1h 30m", 5400),
        ] {
            let t = parse_time("dead_after", age).expect(age).expect("set");
            assert!(
                (t.seconds - (now - secs)).abs() <= 2,
                "{age}: {}",
                t.seconds
            );
        }
        assert!(relative_time("2026-12-02T03:50:00Z").is_none());
        let e = parse_time("dead_before", "2 fortnights").expect_err("bad unit");
        assert!(e.starts_with("dead_before") && e.contains("2h"), "{e}");
        assert!(parse_time("dead_after", "99999999999d").is_err());
    }

    #[test]
    fn sparkline_is_svg_with_a_point_per_value() {
        let s = sparkline(&[0, 1, 2, 1], "ok", "completed").into_string();
        assert!(s.starts_with("<svg class=\"spark ok\""), "{s}");
        assert!(
            s.contains(r#"points="0.0,23.0 40.0,12.0 80.0,1.0 120.0,12.0""#),
            "{s}"
        );
        assert!(s.contains("4 completed"), "{s}");
    }
}
