//! The gRPC port's accept loop: TCP connections (TCP_NODELAY) under the port's [`ConnCaps`]
//! (the loop waits for room under the total cap before it accepts; a peer past its per-IP cap
//! is closed at once), TLS handshakes each in their own task under [`HANDSHAKE_TIMEOUT`] (a
//! slow or silent client never holds up the others), and the ready connections handed to
//! tonic as [`Conn`]s, each carrying its [`ConnInfo`], its place under the caps and the
//! deadline of its HTTP/2 preface ([`super::preface`]).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use super::caps::{ConnCaps, Port, Slot};
use super::preface::PrefaceDeadline;
use super::tls::ServerTls;
use super::ConnInfo;

/// Longest a TLS handshake may take, from accept to the last handshake message.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most TLS handshakes under way at once; a connection past it is closed at once.
pub const MAX_HANDSHAKES: usize = 1024;
/// Pause after an accept error (e.g. out of file descriptors) before accepting again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One accepted connection of the gRPC port, plaintext or TLS.
pub struct Conn {
    io: Io,
    info: ConnInfo,
    /// Until the client's preface and first frame arrived.
    preface: Option<PrefaceDeadline>,
    /// Its place under the port's caps, freed when the connection is dropped.
    _slot: Slot,
}

/// What the gRPC accept loop enforces.
#[derive(Clone, Debug)]
pub struct ConnLimits {
    /// The caps on connections (total and per peer IP).
    pub caps: ConnCaps,
    /// `--grpc-preface-timeout`: from accept (after the TLS handshake with TLS) to the end
    /// of the client's first HTTP/2 frame.
    pub preface_timeout: Duration,
}

impl Default for ConnLimits {
    /// The flags' defaults, with the auto connection cap's ceiling
    /// ([`crate::config::conn::AUTO_MAX_CONNECTIONS`]) as the total.
    fn default() -> Self {
        use crate::config::conn;
        Self {
            caps: ConnCaps::new(
                Port::Grpc,
                conn::AUTO_MAX_CONNECTIONS,
                conn::DEFAULT_MAX_CONNECTIONS_PER_IP,
            ),
            preface_timeout: conn::DEFAULT_PREFACE_TIMEOUT,
        }
    }
}

enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Conn {
    /// What the server knows about this connection.
    pub fn info(&self) -> &ConnInfo {
        &self.info
    }
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        let Some(preface) = &mut this.preface else {
            return read;
        };
        match &read {
            Poll::Ready(Ok(())) if preface.saw(&buf.filled()[before..]) => {
                this.preface = None;
            }
            Poll::Pending if preface.poll_expired(cx) => {
                this.preface = None;
                Port::Grpc.refused("preface_timeout");
                tracing::debug!(conn = this.info.id, remote = ?this.info.remote_addr, "no http/2 preface in time; connection closed");
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no HTTP/2 preface within --grpc-preface-timeout",
                )));
            }
            _ => {}
        }
        read
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The connections of `listener` for tonic's `serve_with_incoming_shutdown`: plaintext when
/// `tls` is `None`, else each after a TLS handshake with the configuration in force when it
/// was accepted, all under `limits`. Accepting stops (and the port closes) when the stream is
/// dropped.
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<ServerTls>>,
    limits: ConnLimits,
) -> impl Stream<Item = Result<Conn, io::Error>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(accept_loop(listener, tls, limits, tx));
    ReceiverStream::new(rx)
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<Arc<ServerTls>>,
    limits: ConnLimits,
    tx: mpsc::Sender<Result<Conn, io::Error>>,
) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let room = tokio::select! {
            _ = tx.closed() => return,
            p = limits.caps.room() => p,
        };
        let (tcp, remote) = tokio::select! {
            _ = tx.closed() => return,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "grpc accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        let Some(slot) = limits.caps.admit(room, remote.ip()) else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let info = ConnInfo {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            remote_addr: Some(remote),
            peer_certs: None,
        };
        let Some(tls) = &tls else {
            let conn = Conn {
                io: Io::Plain(tcp),
                info,
                preface: Some(PrefaceDeadline::new(limits.preface_timeout)),
                _slot: slot,
            };
            if tx.send(Ok(conn)).await.is_err() {
                return;
            }
            continue;
        };
        let Ok(permit) = handshakes.clone().try_acquire_owned() else {
            tracing::debug!(remote = %remote, "too many tls handshakes under way; connection closed");
            continue;
        };
        let acceptor = TlsAcceptor::from(tls.current());
        let tx = tx.clone();
        let preface_timeout = limits.preface_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(remote = %remote, error = %e, "tls handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(remote = %remote, "tls handshake timed out");
                    return;
                }
            };
            let peer_certs = stream
                .get_ref()
                .1
                .peer_certificates()
                .map(|c| Arc::new(c.to_vec()));
            let conn = Conn {
                io: Io::Tls(Box::new(stream)),
                info: ConnInfo { peer_certs, ..info },
                preface: Some(PrefaceDeadline::new(preface_timeout)),
                _slot: slot,
            };
            let _ = tx.send(Ok(conn)).await;
        });
    }
}
