//! A raw HTTP/2 client that writes frames by hand (RFC 9113), for the abuse tests: unlike a
//! real client it ignores the server's limits, so it can open streams past
//! SETTINGS_MAX_CONCURRENT_STREAMS, reset streams in a tight loop (rapid reset) or provoke
//! stream errors (MadeYouReset), and it reports every frame the server sends.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;
/// SETTINGS_MAX_CONCURRENT_STREAMS.
const MAX_CONCURRENT_STREAMS: u16 = 0x3;

/// HTTP/2 error codes used here.
pub const NO_ERROR: u32 = 0x0;
pub const CANCEL: u32 = 0x8;
pub const REFUSED_STREAM: u32 = 0x7;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// A frame from the server, decoded as far as the tests need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Settings {
        max_concurrent_streams: Option<u32>,
    },
    Headers {
        stream: u32,
    },
    Data {
        stream: u32,
    },
    RstStream {
        stream: u32,
        code: u32,
    },
    GoAway {
        last_stream: u32,
        code: u32,
        debug: String,
    },
    Other {
        kind: u8,
    },
}

/// One raw connection.
pub struct RawH2 {
    sock: TcpStream,
    buf: Vec<u8>,
    next_stream: u32,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS, from its first SETTINGS frame.
    pub max_concurrent_streams: Option<u32>,
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK string literal (no Huffman; the tests' strings are shorter than 127 bytes).
fn hpack_str(out: &mut Vec<u8>, s: &str) {
    assert!(s.len() < 127);
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

/// The header block of a gRPC request to `path` (RFC 7541 static table indexes).
fn grpc_request_headers(path: &str) -> Vec<u8> {
    let mut h = vec![0x83, 0x86]; // :method POST, :scheme http
    h.push(0x04); // :path, literal without indexing
    hpack_str(&mut h, path);
    h.push(0x01); // :authority
    hpack_str(&mut h, "localhost");
    h.extend_from_slice(&[0x0f, 0x10]); // content-type (index 31)
    hpack_str(&mut h, "application/grpc");
    h.push(0x00); // a new name
    hpack_str(&mut h, "te");
    hpack_str(&mut h, "trailers");
    h
}

impl RawH2 {
    /// Connects, sends the preface and empty SETTINGS, and reads the server's SETTINGS.
    pub async fn connect(addr: SocketAddr) -> RawH2 {
        let mut sock = TcpStream::connect(addr).await.expect("connect");
        sock.set_nodelay(true).expect("nodelay");
        let mut hello = PREFACE.to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &[]));
        sock.write_all(&hello).await.expect("preface");
        let mut c = RawH2 {
            sock,
            buf: Vec::new(),
            next_stream: 1,
            max_concurrent_streams: None,
        };
        loop {
            match c.next_frame(Duration::from_secs(5)).await {
                Some(Frame::Settings {
                    max_concurrent_streams,
                }) => {
                    c.max_concurrent_streams = max_concurrent_streams;
                    return c;
                }
                Some(_) => {}
                None => panic!("no SETTINGS from the server"),
            }
        }
    }

    /// Writes raw bytes; false when the server has closed the connection.
    pub async fn write(&mut self, bytes: &[u8]) -> bool {
        self.sock.write_all(bytes).await.is_ok()
    }

    /// The bytes of a HEADERS frame opening the next stream to `path` (the request body
    /// still to come unless `end_stream`), and that stream's id.
    pub fn open_frame(&mut self, path: &str, end_stream: bool) -> (u32, Vec<u8>) {
        let id = self.next_stream;
        self.next_stream += 2;
        let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
        (id, frame(HEADERS, flags, id, &grpc_request_headers(path)))
    }

    /// Opens the next stream to `path` with its request body still to come.
    pub async fn open(&mut self, path: &str) -> u32 {
        let (id, f) = self.open_frame(path, false);
        assert!(self.write(&f).await, "connection closed");
        id
    }

    /// Sends a whole unary gRPC request with an empty message on the next stream.
    pub async fn unary_empty(&mut self, path: &str) -> u32 {
        let (id, mut f) = self.open_frame(path, false);
        f.extend(frame(DATA, END_STREAM, id, &[0, 0, 0, 0, 0]));
        assert!(self.write(&f).await, "connection closed");
        id
    }

    /// RST_STREAM bytes for `stream`.
    pub fn reset_frame(stream: u32, code: u32) -> Vec<u8> {
        frame(RST_STREAM, 0, stream, &code.to_be_bytes())
    }

    /// WINDOW_UPDATE bytes for `stream`.
    pub fn window_update_frame(stream: u32, increment: u32) -> Vec<u8> {
        frame(WINDOW_UPDATE, 0, stream, &increment.to_be_bytes())
    }

    /// The next frame within `patience`, answering SETTINGS and PING as a peer must;
    /// `None` on timeout or when the server closed the connection.
    pub async fn next_frame(&mut self, patience: Duration) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            if self.buf.len() >= 9 {
                let len = (usize::from(self.buf[0]) << 16)
                    | (usize::from(self.buf[1]) << 8)
                    | usize::from(self.buf[2]);
                if self.buf.len() >= 9 + len {
                    let head: Vec<u8> = self.buf.drain(..9).collect();
                    let payload: Vec<u8> = self.buf.drain(..len).collect();
                    let (kind, flags) = (head[3], head[4]);
                    let stream =
                        u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
                    if let Some(f) = self.decode(kind, flags, stream, &payload).await {
                        return Some(f);
                    }
                    continue;
                }
            }
            let mut chunk = [0u8; 16384];
            let n = tokio::time::timeout_at(deadline, self.sock.read(&mut chunk)).await;
            match n {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    async fn decode(&mut self, kind: u8, flags: u8, stream: u32, p: &[u8]) -> Option<Frame> {
        let be = |i: usize| u32::from_be_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
        Some(match kind {
            SETTINGS if flags & ACK != 0 => return None,
            SETTINGS => {
                let _ = self.write(&frame(SETTINGS, ACK, 0, &[])).await;
                let max = p
                    .chunks(6)
                    .find(|s| u16::from_be_bytes([s[0], s[1]]) == MAX_CONCURRENT_STREAMS)
                    .map(|s| u32::from_be_bytes([s[2], s[3], s[4], s[5]]));
                Frame::Settings {
                    max_concurrent_streams: max,
                }
            }
            PING if flags & ACK == 0 => {
                let _ = self.write(&frame(PING, ACK, 0, p)).await;
                return None;
            }
            HEADERS => Frame::Headers { stream },
            DATA => Frame::Data { stream },
            RST_STREAM => Frame::RstStream {
                stream,
                code: be(0),
            },
            GOAWAY => Frame::GoAway {
                last_stream: be(0) & 0x7fff_ffff,
                code: be(4),
                debug: String::from_utf8_lossy(&p[8..]).into_owned(),
            },
            kind => Frame::Other { kind },
        })
    }

    /// Reads frames until a GOAWAY (returned with the frames before it) or `patience`.
    pub async fn until_goaway(&mut self, patience: Duration) -> (Option<Frame>, Vec<Frame>) {
        let deadline = tokio::time::Instant::now() + patience;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_frame(left).await {
                Some(f @ Frame::GoAway { .. }) => return (Some(f), seen),
                Some(f) => seen.push(f),
                None => return (None, seen),
            }
        }
    }

    /// True when the server closed the connection within `patience` (frames are skipped).
    pub async fn closed_within(&mut self, patience: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            if self.next_frame(left).await.is_none() {
                return tokio::time::Instant::now() < deadline;
            }
        }
    }
}
