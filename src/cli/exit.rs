//! Errors of the CLI and the exit codes scripts can test: 0 ok, 1 error, 2 usage (clap's own
//! usage errors exit 2 too), 3 not found.
//!
//! A server error prints as one line: the gRPC code in UPPER_SNAKE, the message, and the
//! field violations of a `google.rpc.BadRequest` detail when the server attached one, e.g.
//! `jobwire: INVALID_ARGUMENT: bad page_size (page_size: 1 to 1000)`.

use std::fmt;

use tonic_types::StatusExt;

/// Success.
pub const OK: i32 = 0;
/// Any failure that is not one of the others (server errors, connection failures).
pub const ERROR: i32 = 1;
/// Bad usage: a flag clap refused, or local input that cannot be used (an unparsable time,
/// an unreadable file, a prompt that cannot be asked).
pub const USAGE: i32 = 2;
/// Not found: the server answered NOT_FOUND (an unknown job), or the queue is not one
/// ListQueues lists (the CLI checks it first).
pub const NOT_FOUND: i32 = 3;

/// Why a command failed.
#[derive(Debug)]
pub enum CliError {
    /// Bad local input or usage (exit 2); the message names the flag or argument.
    Usage(String),
    /// The server refused the call (exit 3 for NOT_FOUND, else 1).
    Status(tonic::Status),
    /// Something named does not exist, found by the CLI itself (exit 3), e.g. an unknown
    /// queue (`queue "x" not found`).
    NotFound(String),
    /// Anything else: cannot connect, cannot write the output (exit 1).
    Other(String),
}

impl CliError {
    /// A usage error.
    pub fn usage(msg: impl Into<String>) -> CliError {
        CliError::Usage(msg.into())
    }

    /// The exit code of this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => USAGE,
            CliError::Status(s) if s.code() == tonic::Code::NotFound => NOT_FOUND,
            CliError::NotFound(_) => NOT_FOUND,
            CliError::Status(_) | CliError::Other(_) => ERROR,
        }
    }
}

impl From<jobwire_client::Error> for CliError {
    fn from(e: jobwire_client::Error) -> CliError {
        match e {
            jobwire_client::Error::Status(s) => CliError::Status(s),
            jobwire_client::Error::InvalidArgument(m) => CliError::Usage(m),
            other => CliError::Other(other.to_string()),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Usage(m) | CliError::Other(m) | CliError::NotFound(m) => {
                f.write_str(&one_line(m))
            }
            CliError::Status(s) => {
                let msg = one_line(s.message());
                write!(f, "{}: {msg}", code_name(s.code()))?;
                let details = s.get_error_details();
                if let Some(br) = details.bad_request() {
                    // The server's message often is the violation already: print it once.
                    let v: Vec<String> = br
                        .field_violations
                        .iter()
                        .map(|v| format!("{}: {}", v.field, one_line(&v.description)))
                        .filter(|v| !msg.contains(v.as_str()))
                        .collect();
                    if !v.is_empty() {
                        write!(f, " ({})", v.join("; "))?;
                    }
                }
                Ok(())
            }
        }
    }
}

/// A hint for errors that name a symptom rather than the likely cause: a gRPC call to the
/// HTTP port (an answer without grpc-status), TLS to a plaintext server (rustls reads a
/// plaintext HTTP/2 frame as a record of an invalid content type), a server with an auth file
/// that got no token or a wrong one (UNAUTHENTICATED speaks of gRPC metadata, not of the CLI).
pub fn hint(error: &str) -> Option<&'static str> {
    if error.starts_with("UNAUTHENTICATED") {
        Some("set JOBWIRE_TOKEN or pass --token jw_<id>_<secret> (an admin makes one with `jobwire token new`)")
    } else if error.contains("grpc-status header missing") {
        Some(GRPC_PORT_HINT)
    } else if error.contains("InvalidContentType") || error.contains("InvalidMessage") {
        Some("the server may not use TLS: try an http:// --server")
    } else {
        None
    }
}

/// The hint for a gRPC call that reached an HTTP/1.1 port.
const GRPC_PORT_HINT: &str =
    "is --server the gRPC port? (default 50051; the HTTP port serves metrics and health)";

/// How long [`http_port_hint`] waits for the connection and for the answer, each.
const PROBE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// For a call that failed in transport (`err` is UNKNOWN, CANCELLED, UNAVAILABLE or
/// INTERNAL): the gRPC-port hint when plaintext `server` answers an HTTP/1.1 request, i.e. is
/// an HTTP port. jobwire's HTTP port speaks HTTP/1.1 only and closes a gRPC client's HTTP/2
/// connection without a word, so the call's own error ("operation was canceled", "transport
/// error") does not say what is wrong. A gRPC port never answers `HTTP/1.x`.
pub async fn http_port_hint(err: &CliError, server: &str) -> Option<&'static str> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let CliError::Status(s) = err else {
        return None;
    };
    use tonic::Code::*;
    if !matches!(s.code(), Unknown | Cancelled | Unavailable | Internal) {
        return None;
    }
    let authority = match server.split_once("://") {
        Some(("http", rest)) => rest,
        Some(_) => return None,
        None => server,
    }
    .trim_end_matches('/');
    let mut tcp = tokio::time::timeout(PROBE_PATIENCE, tokio::net::TcpStream::connect(authority))
        .await
        .ok()?
        .ok()?;
    let request =
        format!("GET /healthz HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.ok()?;
    let mut head = [0u8; 8];
    tokio::time::timeout(PROBE_PATIENCE, tcp.read_exact(&mut head))
        .await
        .ok()?
        .ok()?;
    head.starts_with(b"HTTP/1.").then_some(GRPC_PORT_HINT)
}

/// `s` with line breaks replaced by spaces, so an error is one line.
fn one_line(s: &str) -> String {
    s.split(['\n', '\r'])
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The canonical name of a gRPC code (`NOT_FOUND`), as grpcurl and the gRPC docs print it.
pub fn code_name(c: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match c {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::{ErrorDetails, StatusExt};

    #[test]
    fn a_status_is_one_line_with_code_message_and_violations() {
        let mut d = ErrorDetails::new();
        d.add_bad_request_violation("filter.dead_after", "must be before dead_before");
        let s = tonic::Status::with_error_details(
            tonic::Code::InvalidArgument,
            "bad filter\nsecond line",
            d,
        );
        let e = CliError::Status(s);
        assert_eq!(
            e.to_string(),
            "INVALID_ARGUMENT: bad filter second line (filter.dead_after: must be before dead_before)"
        );
        assert_eq!(e.exit_code(), ERROR);
        let mut d = ErrorDetails::new();
        d.add_bad_request_violation("job.priority", "is 5000, must be in [-1000, 1000]");
        let s = tonic::Status::with_error_details(
            tonic::Code::InvalidArgument,
            "invalid job.priority: is 5000, must be in [-1000, 1000]",
            d,
        );
        assert_eq!(
            CliError::Status(s).to_string(),
            "INVALID_ARGUMENT: invalid job.priority: is 5000, must be in [-1000, 1000]",
            "a violation the message already says is not repeated"
        );
        assert_eq!(
            CliError::Status(tonic::Status::not_found("no job")).exit_code(),
            NOT_FOUND
        );
        assert_eq!(CliError::usage("--dead-after: bad").exit_code(), USAGE);
    }
}
