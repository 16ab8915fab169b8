//! A jobwire server over TLS with an auth file, and clients that present a bearer token (or
//! a client certificate, with mTLS): the auth file is written by the test (tokens made with
//! `jobwire::auth::token::Token`, as `jobwire token new` makes them), rewritten to test
//! reloads.

use std::path::PathBuf;
use std::time::Duration;

use jobwire::auth::token::Token;
use jobwire::pb;
use jobwire::pb::dead_letter_service_client::DeadLetterServiceClient;
use jobwire::pb::group_service_client::GroupServiceClient;
use jobwire::pb::job_service_client::JobServiceClient;
use jobwire::pb::queue_service_client::QueueServiceClient;
use jobwire::pb::worker_service_client::WorkerServiceClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::Streaming;

use crate::certs::{CertFiles, ClientId, TestPki, Validity};
use crate::harness::*;
use crate::tls_harness::{start_server_with, tls_config};

/// A principal of the test's auth file: its name, its token, and grants (queue patterns,
/// roles).
#[derive(Clone)]
pub struct Who {
    pub name: String,
    pub token: Token,
    /// Client-certificate identities that also name this principal.
    pub certs: Vec<String>,
    pub grants: Vec<(Vec<String>, Vec<String>)>,
}

impl Who {
    /// A principal `name` with a fresh token (id = name) and these grants.
    pub fn new(name: &str, grants: &[(&[&str], &[&str])]) -> Who {
        Who {
            name: name.into(),
            token: Token::generate(name).expect("token id"),
            certs: Vec::new(),
            grants: grants
                .iter()
                .map(|(q, r)| {
                    (
                        q.iter().map(|s| s.to_string()).collect(),
                        r.iter().map(|s| s.to_string()).collect(),
                    )
                })
                .collect(),
        }
    }

    /// The same principal, also named by the certificate identity `identity`.
    pub fn with_cert(mut self, identity: &str) -> Who {
        self.certs.push(identity.into());
        self
    }

    /// `authorization: Bearer jw_...` for this principal.
    pub fn bearer(&self) -> Bearer {
        Bearer::token(&self.token.reveal())
    }

    /// This principal's YAML entry.
    pub fn yaml(&self) -> String {
        let mut s = format!(
            "  - name: {:?}\n    tokens:\n      - id: {:?}\n        sha256: {:?}\n    grants:\n",
            self.name,
            self.token.id,
            self.token.secret_hash().to_hex()
        );
        if !self.certs.is_empty() {
            s = s.replace(
                "    grants:\n",
                &format!("    certs: {:?}\n    grants:\n", self.certs),
            );
        }
        if self.grants.is_empty() {
            s = s.replace("    grants:\n", "    grants: []\n");
        }
        for (queues, roles) in &self.grants {
            s.push_str(&format!(
                "      - queues: {queues:?}\n        roles: [{}]\n",
                roles.join(", ")
            ));
        }
        s
    }
}

/// The YAML auth file of `who`.
pub fn auth_yaml(who: &[&Who]) -> String {
    let mut s = String::from("# written by the security tests\nprincipals:\n");
    if who.is_empty() {
        s = s.replace("principals:\n", "principals: []\n");
    }
    for w in who {
        s.push_str(&w.yaml());
    }
    s
}

/// Adds `authorization` metadata (or nothing) to every call.
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Bearer {
    /// No credentials.
    pub fn none() -> Bearer {
        Bearer(None)
    }
    /// `Bearer <token>`.
    pub fn token(token: &str) -> Bearer {
        Bearer::raw(&format!("Bearer {token}"))
    }
    /// Any `authorization` value.
    pub fn raw(value: &str) -> Bearer {
        Bearer(Some(value.parse().expect("ascii metadata")))
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            r.metadata_mut().insert("authorization", v.clone());
        }
        Ok(r)
    }
}

type With = InterceptedService<Channel, Bearer>;

/// The four jobwire clients, each call carrying `bearer`.
pub struct Clients {
    pub jobs: JobServiceClient<With>,
    pub workers: WorkerServiceClient<With>,
    pub dead: DeadLetterServiceClient<With>,
    pub queues: QueueServiceClient<With>,
    pub groups: GroupServiceClient<With>,
}

impl Clients {
    pub fn new(channel: &Channel, bearer: Bearer) -> Clients {
        Clients {
            jobs: JobServiceClient::with_interceptor(channel.clone(), bearer.clone()),
            workers: WorkerServiceClient::with_interceptor(channel.clone(), bearer.clone()),
            dead: DeadLetterServiceClient::with_interceptor(channel.clone(), bearer.clone()),
            queues: QueueServiceClient::with_interceptor(channel.clone(), bearer.clone()),
            groups: GroupServiceClient::with_interceptor(channel.clone(), bearer),
        }
    }

    /// Opens a Subscribe stream on `queues`: the stream, and the sender of further
    /// messages; the refusal if the server refused it.
    pub async fn subscribe(
        &mut self,
        queues: &[&str],
        credits: u32,
    ) -> Result<Stream, tonic::Status> {
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(pb::SubscribeRequest {
            message: Some(pb::subscribe_request::Message::Open(pb::OpenStream {
                queues: queues.iter().map(|q| q.to_string()).collect(),
                credits,
                worker_id: "security-test".into(),
            })),
        })
        .expect("send");
        let rx = self
            .workers
            .subscribe(UnboundedReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok(Stream { tx, rx })
    }
}

/// An open Subscribe stream.
pub struct Stream {
    pub tx: mpsc::UnboundedSender<pb::SubscribeRequest>,
    pub rx: Streaming<pb::SubscribeResponse>,
}

impl Stream {
    /// The next message (None: the stream ended), the error that ended it, or a panic after
    /// `patience`.
    pub async fn next(
        &mut self,
        patience: Duration,
    ) -> Result<Option<pb::subscribe_response::Message>, tonic::Status> {
        tokio::time::timeout(patience, self.rx.message())
            .await
            .expect("a message within the patience")
            .map(|m| m.and_then(|m| m.message))
    }

    /// The next lease (panics on anything else).
    pub async fn lease(&mut self) -> pb::Lease {
        match self.next(Duration::from_secs(10)).await {
            Ok(Some(pb::subscribe_response::Message::Lease(l))) => l,
            other => panic!("expected a lease, got {other:?}"),
        }
    }

    pub fn send(&self, m: pb::subscribe_request::Message) {
        self.tx
            .send(pb::SubscribeRequest { message: Some(m) })
            .expect("stream open");
    }
}

/// A Redis, an auth file and a jobwire server over TLS that reads it.
pub struct Secured {
    pub redis: TestRedis,
    pub app: TestApp,
    pub auth_file: PathBuf,
    /// The CA of the server's certificate (and, with mTLS, of the client certificates).
    pub pki: TestPki,
    _dir: tempfile::TempDir,
}

impl Secured {
    /// Starts a server over TLS whose auth file grants `who`; clients authenticate with
    /// bearer tokens.
    pub async fn start(who: &[&Who]) -> Secured {
        Secured::start_tls(who, false, None).await
    }

    /// [`Secured::start`] with mTLS on (every client presents a certificate of the test
    /// CA); the harness channel presents `identity`.
    pub async fn start_tls(who: &[&Who], mtls: bool, identity: Option<ClientId>) -> Secured {
        Secured::start_with(who, mtls, identity, |_| {}).await
    }

    /// [`Secured::start_tls`] with the server's settings changed by `tweak` first (e.g. the
    /// dashboard turned on).
    pub async fn start_with(
        who: &[&Who],
        mtls: bool,
        identity: Option<ClientId>,
        tweak: impl FnOnce(&mut jobwire::config::ServeArgs),
    ) -> Secured {
        let dir = tempfile::tempdir().expect("tempdir");
        let auth_file = dir.path().join("auth.yaml");
        std::fs::write(&auth_file, auth_yaml(who)).expect("write auth file");
        let redis = TestRedis::start().await;
        let pki = TestPki::new("jobwire auth test CA");
        let server = pki.server("server", 1);
        let ca = pki.ca_path();
        let mut cfg = tls_config(&redis.url, &server, mtls.then_some(ca.as_path()));
        cfg.auth.auth_file = Some(auth_file.clone());
        tweak(&mut cfg);
        let client = identity.map(|id| pki.client("harness", id, Validity::Current));
        let app = start_server_with(cfg, &ca, client.as_ref()).await;
        Secured {
            redis,
            app,
            auth_file,
            pki,
            _dir: dir,
        }
    }

    /// A new TLS channel to the server presenting the client certificate `cert`.
    pub async fn channel_as(&self, cert: &CertFiles) -> Channel {
        crate::tls_harness::tls_channel(self.app.grpc, &self.pki.ca_path(), Some(cert))
            .await
            .expect("mTLS connect")
    }

    /// Clients that present `who`'s token.
    pub fn as_(&self, who: &Who) -> Clients {
        Clients::new(&self.app.channel, who.bearer())
    }

    /// Clients with this `authorization` metadata (or none).
    pub fn with(&self, bearer: Bearer) -> Clients {
        Clients::new(&self.app.channel, bearer)
    }

    /// Rewrites the auth file (atomically, as a Secret mount does: write aside, rename).
    pub fn rewrite(&self, text: &str) {
        let aside = self.auth_file.with_extension("yaml.new");
        std::fs::write(&aside, text).expect("write");
        std::fs::rename(&aside, &self.auth_file).expect("rename");
    }
}

/// A job spec with the usual defaults (re-exported for the suites).
pub fn job(queue: &str, id: &str) -> pb::JobSpec {
    spec(queue, id)
}
