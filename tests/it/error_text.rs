//! Oversized error text: a Fail whose message or details pass their limits (8 KiB / 64 KiB)
//! is applied, with the text cut on a UTF-8 boundary and marked `…[truncated N bytes]`
//! (N = bytes removed), on the unary call and on the stream alike.

use jobwire::pb;
use pb::subscribe_request::Message as In;

use crate::harness::*;

const MESSAGE_LIMIT: usize = 8 * 1024;
const DETAILS_LIMIT: usize = 64 * 1024;

/// Checks that `got` is `sent` cut to `limit` bytes with the marker, and N is right.
fn assert_truncated(got: &str, sent: &str, limit: usize) {
    assert!(
        got.len() <= limit,
        "{} bytes kept, limit {limit}",
        got.len()
    );
    let (kept, marker) = got.rsplit_once('…').expect("a truncation marker");
    assert!(
        sent.starts_with(kept),
        "the kept text is a prefix of the sent text"
    );
    let n: usize = marker
        .strip_prefix("[truncated ")
        .and_then(|m| m.strip_suffix(" bytes]"))
        .expect("marker shape")
        .parse()
        .expect("a byte count");
    assert_eq!(kept.len() + n, sent.len(), "N counts the bytes removed");
    assert!(
        limit - got.len() < 4,
        "cut at most a char short of the limit"
    );
}

fn long_error() -> pb::JobError {
    // Multi-byte characters, so a cut at the byte limit would split one.
    pb::JobError {
        message: "é".repeat(MESSAGE_LIMIT),
        error_type: "too_long".into(),
        details: "ü€".repeat(DETAILS_LIMIT / 2),
    }
}

#[tokio::test]
async fn oversized_error_text_is_truncated_not_refused() {
    let (_redis, app) = TestApp::with_redis().await;
    enqueue(&app, spec("trunc", "unary")).await;
    enqueue(&app, spec("trunc", "stream")).await;
    let mut w = TestWorker::open(&app, &["trunc"], 2, "w").await;
    let (a, b) = (w.lease().await, w.lease().await);
    let sent = long_error();
    for (l, on_stream) in [(&a, false), (&b, true)] {
        let job = l.job.as_ref().expect("job");
        let req = pb::FailRequest {
            pause_group: false,
            queue: "trunc".into(),
            job_id: job.job_id.clone(),
            lease_token: l.lease_token.clone(),
            disposition: pb::FailDisposition::NoRetry as i32,
            error: Some(sent.clone()),
            retry_after: None,
            pause_queue: false,
        };
        if on_stream {
            w.send(In::Fail(req));
            let s = w.settled().await;
            assert_eq!(s.code, 0, "stream Fail applied: {}", s.message);
        } else {
            app.workers()
                .fail(req)
                .await
                .expect("unary Fail with oversized text is applied");
        }
        let got = get_job(&app, "trunc", &job.job_id).await;
        assert_eq!(got.state, pb::JobState::Dead as i32);
        let e = got.errors.last().expect("the error is recorded");
        assert_truncated(&e.message, &sent.message, MESSAGE_LIMIT);
        assert_truncated(&e.details, &sent.details, DETAILS_LIMIT);
        assert_eq!(e.error_type, "too_long");
    }
}
