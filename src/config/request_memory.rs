//! `serve` flags of the request memory budget: how many bytes of unfinished request messages
//! the gRPC port may hold for one connection and for the whole process (see
//! `crate::api::request_budget` for what is charged and when).

use clap::Args;

use crate::api::max_message_bytes;

/// Default of `--max-buffered-request-bytes-per-connection`: 80 MiB, one full-size message
/// (65 MiB with the default `--max-payload-bytes`) plus room for the small calls beside it.
pub const DEFAULT_PER_CONNECTION: u64 = 80 << 20;
/// Default of `--max-buffered-request-bytes`: 160 MiB, two full-size messages in flight at
/// once and room beside them. The allocator keeps freed pages of messages under 8 MiB for up
/// to its 10 s decay, so an attack whose messages are refused and freed can lift RSS past the
/// budget (measured: up to 1.6 times): with the server's own ~40 MiB that stays inside a
/// 512 MiB pod with room for the honest traffic.
pub const DEFAULT_PROCESS: u64 = 160 << 20;
/// The largest value either flag takes: 1 TiB.
const MAX_BYTES: u64 = 1 << 40;

/// The budget of request bytes the gRPC port buffers before a message is whole.
#[derive(Clone, Debug, Args)]
pub struct RequestMemoryArgs {
    /// Bytes of unfinished request messages one gRPC connection may have buffered at once
    /// (at least the largest message, sized from --max-payload-bytes; at most
    /// --max-buffered-request-bytes). A message whose next bytes would pass it fails with
    /// RESOURCE_EXHAUSTED naming this flag; messages of 64 KiB or less are never refused.
    #[arg(long, env = "JOBWIRE_MAX_BUFFERED_REQUEST_BYTES_PER_CONNECTION", default_value_t = DEFAULT_PER_CONNECTION)]
    pub max_buffered_request_bytes_per_connection: u64,

    /// Bytes of unfinished request messages all gRPC connections together may have buffered
    /// at once (at least --max-buffered-request-bytes-per-connection, at most 1 TiB). Past it
    /// a big message fails with RESOURCE_EXHAUSTED naming this flag.
    #[arg(long, env = "JOBWIRE_MAX_BUFFERED_REQUEST_BYTES", default_value_t = DEFAULT_PROCESS)]
    pub max_buffered_request_bytes: u64,
}

impl Default for RequestMemoryArgs {
    /// The same values as the flags' defaults.
    fn default() -> Self {
        Self {
            max_buffered_request_bytes_per_connection: DEFAULT_PER_CONNECTION,
            max_buffered_request_bytes: DEFAULT_PROCESS,
        }
    }
}

impl RequestMemoryArgs {
    /// Checks the ranges against each other and against the largest message that
    /// `max_payload_bytes` allows (a connection must be able to carry one); the error names
    /// the flag.
    pub fn validate(&self, max_payload_bytes: usize) -> Result<(), String> {
        let message = max_message_bytes(max_payload_bytes) as u64;
        let per_conn = self.max_buffered_request_bytes_per_connection;
        if !(message..=MAX_BYTES).contains(&per_conn) {
            return Err(format!(
                "--max-buffered-request-bytes-per-connection must be between {message} (the \
                 largest message, sized from --max-payload-bytes) and {MAX_BYTES}, got {per_conn}"
            ));
        }
        let process = self.max_buffered_request_bytes;
        if !(per_conn..=MAX_BYTES).contains(&process) {
            return Err(format!(
                "--max-buffered-request-bytes must be between {per_conn} \
                 (--max-buffered-request-bytes-per-connection) and {MAX_BYTES}, got {process}"
            ));
        }
        Ok(())
    }

    /// `JOBWIRE_*=value` lines for `--print-config`.
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "JOBWIRE_MAX_BUFFERED_REQUEST_BYTES_PER_CONNECTION",
                self.max_buffered_request_bytes_per_connection.to_string(),
            ),
            (
                "JOBWIRE_MAX_BUFFERED_REQUEST_BYTES",
                self.max_buffered_request_bytes.to_string(),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAYLOAD: usize = 1 << 20;

    fn serve(args: &[&str]) -> RequestMemoryArgs {
        crate::config::tests::serve(args)
            .expect("parse")
            .request_memory
    }

    #[test]
    fn the_flag_defaults_equal_default_and_are_valid() {
        let a = serve(&[]);
        assert_eq!(a.effective(), RequestMemoryArgs::default().effective());
        a.validate(PAYLOAD).expect("defaults valid");
        assert!(
            a.max_buffered_request_bytes_per_connection >= max_message_bytes(PAYLOAD) as u64,
            "a full-size message fits on a connection"
        );
    }

    #[test]
    fn each_flag_parses_and_shows_in_print_config() {
        let a = serve(&[
            "--max-buffered-request-bytes-per-connection",
            "100000000",
            "--max-buffered-request-bytes",
            "300000000",
        ]);
        a.validate(PAYLOAD).expect("valid");
        let lines: Vec<String> = a
            .effective()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        assert_eq!(
            lines,
            [
                "JOBWIRE_MAX_BUFFERED_REQUEST_BYTES_PER_CONNECTION=100000000",
                "JOBWIRE_MAX_BUFFERED_REQUEST_BYTES=300000000",
            ]
        );
    }

    #[test]
    fn out_of_range_values_name_their_flag() {
        let cases: [(&[&str], &str); 4] = [
            // Smaller than one full-size message (65 MiB).
            (
                &["--max-buffered-request-bytes-per-connection", "1048576"],
                "--max-buffered-request-bytes-per-connection",
            ),
            (
                &[
                    "--max-buffered-request-bytes-per-connection",
                    "2000000000000",
                ],
                "--max-buffered-request-bytes-per-connection",
            ),
            // Below the per-connection budget.
            (
                &["--max-buffered-request-bytes", "70000000"],
                "--max-buffered-request-bytes",
            ),
            (
                &["--max-buffered-request-bytes", "2000000000000"],
                "--max-buffered-request-bytes",
            ),
        ];
        for (args, flag) in cases {
            let e = serve(args).validate(PAYLOAD).expect_err(flag);
            assert!(e.starts_with(flag), "{e}");
        }
        // A smaller payload limit makes a smaller per-connection budget valid.
        let a = serve(&[
            "--max-buffered-request-bytes-per-connection",
            "8388608",
            "--max-buffered-request-bytes",
            "8388608",
        ]);
        a.validate(4096)
            .expect("4 KiB payloads: 1 MiB + 256 KiB messages fit in 8 MiB");
    }
}
