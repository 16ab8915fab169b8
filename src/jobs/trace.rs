//! W3C Trace Context: jobwire carries a producer's `traceparent` metadata entry from Enqueue
//! into every Lease unchanged, so a worker can continue the producer's trace; the server
//! also logs the trace id with each job attempt.

/// The trace id of a W3C `traceparent` (`00-<32 hex trace id>-<16 hex parent id>-<2 hex
/// flags>`, https://www.w3.org/TR/trace-context/#traceparent-header), or `None` when the
/// value is malformed or the trace id is all zeros (invalid per the spec).
pub fn trace_id(traceparent: &str) -> Option<&str> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    };
    let valid = hex(version, 2)
        && version != "ff"
        && hex(trace, 32)
        && hex(parent, 16)
        && hex(flags, 2)
        && trace.bytes().any(|b| b != b'0')
        && parent.bytes().any(|b| b != b'0');
    valid.then_some(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_trace_id_of_a_valid_traceparent_only() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(trace_id(tp), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(trace_id(bad), None, "{bad}");
        }
    }
}
