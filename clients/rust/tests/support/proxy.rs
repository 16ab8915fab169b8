//! A TCP proxy on a free port that forwards to a target and can cut every connection it
//! carries (both sockets closed), as a network failure would, and refuse new ones.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct Proxy {
    pub port: u16,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    blocked: Arc<AtomicBool>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port, forwarding to `127.0.0.1:target_port`.
    pub async fn start(target_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let blocked = Arc::new(AtomicBool::new(false));
        let accept = tokio::spawn({
            let (conns, blocked) = (conns.clone(), blocked.clone());
            async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if blocked.load(Ordering::SeqCst) {
                        continue; // dropped: the client sees the connection closed
                    }
                    let task = tokio::spawn(async move {
                        let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", target_port)).await
                        else {
                            return;
                        };
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    });
                    conns.lock().expect("lock").push(task);
                }
            }
        });
        Proxy {
            port,
            conns,
            blocked,
            accept,
        }
    }

    /// Closes every connection carried so far (aborting a task drops both sockets).
    pub fn cut(&self) -> usize {
        let mut conns = self.conns.lock().expect("lock");
        let n = conns.len();
        for c in conns.drain(..) {
            c.abort();
        }
        n
    }

    /// Connections carried and not cut so far.
    pub fn connections(&self) -> usize {
        self.conns.lock().expect("lock").len()
    }

    /// Refuses (closes at once) new connections while `on`.
    pub fn block(&self, on: bool) {
        self.blocked.store(on, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
