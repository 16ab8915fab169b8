//! Input limits of the API, in one place (the proto comments quote them), and the characters
//! a name may hold ([`printable`]).

use crate::Error;

/// Longest job id, bytes.
pub const MAX_JOB_ID_BYTES: usize = 256;
/// Longest job name, bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// Longest content type, bytes.
pub const MAX_CONTENT_TYPE_BYTES: usize = 128;
/// Most metadata entries.
pub const MAX_METADATA_ENTRIES: usize = 64;
/// Longest metadata key, bytes.
pub const MAX_METADATA_KEY_BYTES: usize = 128;
/// Longest metadata value, bytes.
pub const MAX_METADATA_VALUE_BYTES: usize = 4096;
/// Priority range.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -1000..=1000;
/// max_attempts range.
pub const MAX_ATTEMPTS_RANGE: std::ops::RangeInclusive<u32> = 1..=1000;
/// Longest enqueue delay, ms (365 days).
pub const MAX_DELAY_MS: u64 = 365 * 24 * 3600 * 1000;
/// Longest backoff delay, max_delay, retry_after or timeout, ms (7 days).
pub const MAX_BACKOFF_MS: u64 = 7 * 24 * 3600 * 1000;
/// Most jobs in one EnqueueBatch, ids in one replay or delete.
pub const MAX_BATCH: usize = 1000;
/// Most queues on one stream.
pub const MAX_STREAM_QUEUES: usize = 32;
/// Credits range on a stream.
pub const CREDITS_RANGE: std::ops::RangeInclusive<u32> = 1..=10_000;
/// Longest worker id, bytes.
pub const MAX_WORKER_ID_BYTES: usize = 128;
/// Longest error message, bytes.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 8 * 1024;
/// Longest error type, bytes.
pub const MAX_ERROR_TYPE_BYTES: usize = 128;
/// Longest error details, bytes.
pub const MAX_ERROR_DETAILS_BYTES: usize = 64 * 1024;
/// Longest lease token, bytes.
pub const MAX_TOKEN_BYTES: usize = 128;
/// ExtendLease duration range, ms.
pub const EXTEND_RANGE_MS: std::ops::RangeInclusive<u64> = 1000..=3_600_000;
/// Largest page, and the default one.
pub const MAX_PAGE_SIZE: i32 = 1000;
/// Page size when 0 is asked for.
pub const DEFAULT_PAGE_SIZE: i32 = 100;
/// Longest progress message (ReportProgress.message), bytes.
pub const MAX_PROGRESS_MESSAGE_BYTES: usize = 256;
/// Highest progress percent.
pub const MAX_PROGRESS: u32 = 100;
/// Default of `--max-checkpoint-bytes` and `--max-result-bytes` (64 KiB).
pub const DEFAULT_MAX_DATA_BYTES: usize = 64 * 1024;

/// Refuses a name (job name, worker id, error type) holding a control character or another
/// character a log line escapes (`telemetry::needs_escape`: line and paragraph separators,
/// bidi controls): a name is matched, shown and logged, and such a character is never part of
/// an honest one.
pub(crate) fn printable(field: &str, s: &str) -> Result<(), Error> {
    match s.chars().find(|c| crate::telemetry::needs_escape(*c)) {
        None => Ok(()),
        Some(c) => Err(Error::invalid(
            field,
            format!(
                "holds the character {:?}; control, line-breaking and bidi-format characters \
                 are not allowed",
                c
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::printable;
    use crate::api::convert::job_error;
    use crate::api::pb;

    #[test]
    fn names_refuse_control_line_breaking_and_bidi_characters_and_free_text_keeps_them() {
        for bad in [
            "a\nb",
            "a\rb",
            "\u{1b}[2K",
            "a\u{2028}b",
            "\u{202e}x",
            "tab\t",
        ] {
            let e = printable("open.worker_id", bad).expect_err(bad);
            assert!(e.to_string().contains("open.worker_id"), "{e}");
        }
        printable("open.worker_id", "wörker-1 (eu/west)").expect("printable");
        let e = job_error(
            "error",
            Some(&pb::JobError {
                message: "kept\nas sent".into(),
                error_type: "Bad\nType".into(),
                details: String::new(),
            }),
        )
        .expect_err("an error type with a newline");
        assert!(e.to_string().contains("error.error_type"), "{e}");
        let (message, ..) = job_error(
            "error",
            Some(&pb::JobError {
                message: "kept\nas sent".into(),
                error_type: "Boom".into(),
                details: String::new(),
            }),
        )
        .expect("a message may hold anything");
        assert_eq!(message, "kept\nas sent");
    }
}
