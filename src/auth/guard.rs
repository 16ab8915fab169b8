//! [`Auth`]: the one place that decides who is calling (authentication, in a tonic
//! interceptor in front of the four jobwire services) and whether they may (authorization,
//! called by every handler with the queue(s) of its request). The policy is held in an
//! `ArcSwap`, replaced as a whole when the auth file changes (or on SIGHUP); a file that does
//! not parse leaves the policy in force.
//!
//! Every decision looks the caller's credential up in the policy in force, so a reload that
//! removes a token, a certificate identity or a grant takes effect on the next call, and
//! [`Auth::revoked`] lets long-lived streams end when theirs is revoked.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Status};

use super::identity::{bearer, leaf_identities, Bearer, CnIdentity, Credential, Principal};
use super::policy::{Entry, Policy, Rpc};
use crate::jobs::QueueName;
use crate::Error;

/// Authentication and authorization of the gRPC API; cheap to clone (one shared state).
#[derive(Clone)]
pub struct Auth {
    inner: Arc<Inner>,
}

struct Inner {
    /// The auth file; `None`: no authentication, everyone is [`Principal::anonymous`] and
    /// may call everything.
    path: Option<PathBuf>,
    policy: ArcSwap<Policy>,
    /// Bumped after each reload that changed the policy: wakes [`Auth::revoked`].
    generation: watch::Sender<u64>,
    /// When a client certificate's CN is an identity (`--tls-client-identity-cn`).
    cn: CnIdentity,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl Auth {
    fn new(path: Option<PathBuf>, policy: Policy, cn: CnIdentity) -> Auth {
        Auth {
            inner: Arc::new(Inner {
                path,
                policy: ArcSwap::from_pointee(policy),
                generation: watch::channel(0).0,
                cn,
            }),
        }
    }

    /// No authentication: every caller is `anonymous` and allowed everything (the server
    /// without `--auth-file`).
    pub fn disabled() -> Auth {
        Auth::new(None, Policy::default(), CnIdentity::default())
    }

    /// Loads the auth file at `path`. The error names the file and the line; the server
    /// refuses to start with it.
    pub fn load(path: &Path) -> Result<Auth, String> {
        Auth::load_with(path, CnIdentity::default())
    }

    /// [`Auth::load`], with a client certificate's CN an identity as `cn` says.
    pub fn load_with(path: &Path, cn: CnIdentity) -> Result<Auth, String> {
        let policy = super::file::load(path)?;
        tracing::info!(path = %path.display(), principals = policy.entries.len(), "auth file loaded: callers must authenticate");
        Ok(Auth::new(Some(path.to_owned()), policy, cn))
    }

    /// [`Auth::load`] with `--auth-file`, or [`Auth::disabled`] without it.
    pub fn from_args(args: &crate::config::AuthArgs) -> Result<Auth, String> {
        match &args.auth_file {
            Some(path) => Auth::load_with(path, args.cert_cn()),
            None => Ok(Auth::disabled()),
        }
    }

    /// Is an auth file in force (callers must authenticate)?
    pub fn enabled(&self) -> bool {
        self.inner.path.is_some()
    }

    /// Re-reads the auth file. On error the policy in force stays and the error (naming the
    /// line) is returned.
    pub fn reload(&self) -> Result<(), String> {
        let Some(path) = &self.inner.path else {
            return Ok(());
        };
        let policy = super::file::load(path)?;
        let principals = policy.entries.len();
        self.inner.policy.store(Arc::new(policy));
        self.inner.generation.send_modify(|g| *g += 1);
        tracing::info!(path = %path.display(), principals, "auth file reloaded");
        Ok(())
    }

    /// Reloads the auth file when it changes or on SIGHUP (`crate::reload::watch`) until
    /// `stop`; `None` without an auth file.
    pub fn watch(&self, stop: CancellationToken) -> Option<JoinHandle<()>> {
        let path = self.inner.path.clone()?;
        let auth = self.clone();
        Some(crate::reload::watch(
            "auth",
            vec![path],
            crate::reload::DEFAULT_POLL,
            stop,
            move || auth.reload(),
        ))
    }

    /// Who is calling: the principal of the bearer token in `metadata` or, without one, of
    /// the client certificate chain `certs` (leaf first). UNAUTHENTICATED when neither names
    /// a principal of the auth file.
    pub fn authenticate(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        certs: Option<&[rustls::pki_types::CertificateDer<'static>]>,
    ) -> Result<Principal, Error> {
        if !self.enabled() {
            return Ok(Principal::anonymous());
        }
        let policy = self.inner.policy.load();
        match bearer(metadata) {
            Bearer::Token(t) => {
                let hash = t.secret_hash();
                match policy.by_token(&t.id, &hash) {
                    Some(entry) => Ok(Principal {
                        name: entry.name.clone(),
                        credential: Credential::Token { id: t.id, hash },
                    }),
                    None => {
                        tracing::debug!(token_id = %t.id, "unknown token id or wrong secret");
                        Err(Error::Unauthenticated(
                            "invalid bearer token: unknown token id or wrong secret".into(),
                        ))
                    }
                }
            }
            Bearer::Malformed(why) => Err(Error::Unauthenticated(why)),
            Bearer::Absent => {
                let identities = leaf_identities(certs, self.inner.cn);
                for identity in &identities {
                    if let Some(entry) = policy.by_cert(identity) {
                        return Ok(Principal {
                            name: entry.name.clone(),
                            credential: Credential::Cert {
                                identity: identity.clone(),
                            },
                        });
                    }
                }
                Err(Error::Unauthenticated(match identities.first() {
                    Some(id) => format!(
                        "the client certificate ({id}) names no principal of the auth file \
                         (a certificate with SANs is known by them, not by its CN, unless \
                         --tls-client-identity-cn)"
                    ),
                    None if certs.is_some_and(|c| !c.is_empty()) => {
                        "the client certificate has no URI or DNS SAN (its CN is used only \
                         when it has no SAN at all, unless --tls-client-identity-cn)"
                            .into()
                    }
                    None => "no credentials: send `authorization: Bearer jw_<id>_<secret>` \
                             metadata or a client certificate"
                        .into(),
                }))
            }
        }
    }

    /// The interceptor that authenticates every call of a service and puts its
    /// [`Principal`] into the request's extensions.
    pub fn interceptor(&self) -> AuthInterceptor {
        AuthInterceptor(self.clone())
    }

    /// `svc` behind [`Auth::interceptor`], told which RPC each request calls so that the
    /// interceptor can refuse early (see [`AuthInterceptor`]).
    pub fn guard<S>(&self, svc: S) -> super::Guarded<S> {
        super::Guarded::new(svc, self.interceptor())
    }

    /// May `p` call `rpc` on some queue at all? PERMISSION_DENIED naming the principal and
    /// the RPC (no queue: it is not known yet) when no grant of `p` allows it anywhere, with
    /// a `denied` audit line for an admin action; UNAUTHENTICATED when `p`'s credential was
    /// revoked meanwhile. The interceptor asks this before the request body is read.
    pub fn authorize_somewhere(&self, p: &Principal, rpc: Rpc) -> Result<(), Error> {
        if !self.enabled() {
            return Ok(());
        }
        if self.with_entry(p, |e| e.allows_somewhere(rpc))? {
            return Ok(());
        }
        if super::audit::AdminAction::of(rpc).is_some() {
            super::audit::denied_everywhere(p, rpc);
        }
        Err(Error::PermissionDenied {
            principal: p.name.clone(),
            rpc: rpc.name(),
            queue: None,
            roles: rpc.roles_text(),
        })
    }

    /// The policy's entry for `p`'s credential, if it is still valid under the policy in
    /// force and still names the same principal.
    fn with_entry<R>(&self, p: &Principal, f: impl FnOnce(&Entry) -> R) -> Result<R, Error> {
        let policy = self.inner.policy.load();
        let entry = match &p.credential {
            Credential::Anonymous => None,
            Credential::Token { id, hash } => policy.by_token(id, hash),
            Credential::Cert { identity } => policy.by_cert(identity),
        };
        match entry {
            Some(e) if e.name == p.name => Ok(f(e)),
            _ => Err(Error::Unauthenticated(format!(
                "the credentials of principal {:?} are no longer valid (the auth file changed)",
                p.name
            ))),
        }
    }

    /// May `p` call `rpc` on `queue`? PERMISSION_DENIED names the queue and the roles that
    /// would allow it; UNAUTHENTICATED when `p`'s credential was revoked meanwhile.
    pub fn authorize(&self, p: &Principal, rpc: Rpc, queue: &QueueName) -> Result<(), Error> {
        if !self.enabled() {
            return Ok(());
        }
        let allowed = self.with_entry(p, |e| e.roles_on(queue.as_str()).allows(rpc))?;
        if allowed {
            return Ok(());
        }
        if super::audit::AdminAction::of(rpc).is_some() {
            super::audit::denied(p, rpc, queue.as_str());
        }
        Err(Error::PermissionDenied {
            principal: p.name.clone(),
            rpc: rpc.name(),
            queue: Some(queue.to_string()),
            roles: rpc.roles_text(),
        })
    }

    /// Would `p` be allowed `rpc` on `queue`? The same decision as [`Auth::authorize`],
    /// without its refusal or audit line: for a client (the dashboard) to hide what would be
    /// refused. False when `p`'s credential was revoked meanwhile.
    pub fn permits(&self, p: &Principal, rpc: Rpc, queue: &QueueName) -> bool {
        if !self.enabled() {
            return true;
        }
        self.with_entry(p, |e| e.roles_on(queue.as_str()).allows(rpc))
            .unwrap_or(false)
    }

    /// The principal of `req` (put there by the interceptor), authorized for `rpc` on every
    /// one of `queues`. Handlers call this first; it returns the principal for audit lines.
    pub fn check<T>(
        &self,
        req: &Request<T>,
        rpc: Rpc,
        queues: &[&QueueName],
    ) -> Result<Principal, Error> {
        let p = match super::principal(req) {
            Some(p) => p.clone(),
            None if !self.enabled() => Principal::anonymous(),
            // Only when a service was wired without the interceptor: deny, never allow.
            None => {
                return Err(Error::Unauthenticated(
                    "the request carries no authenticated principal".into(),
                ))
            }
        };
        for q in queues {
            self.authorize(&p, rpc, q)?;
        }
        Ok(p)
    }

    /// Which of `queues` `p` may see with `rpc` (ListQueues: those where it is viewer or
    /// admin). PERMISSION_DENIED when no grant of `p` allows `rpc` on any queue at all.
    pub fn visible<T>(
        &self,
        req: &Request<T>,
        rpc: Rpc,
        queues: Vec<QueueName>,
    ) -> Result<Vec<QueueName>, Error> {
        if !self.enabled() {
            return Ok(queues);
        }
        let p = self.check(req, rpc, &[])?;
        self.with_entry(&p, |e| {
            if !e.allows_somewhere(rpc) {
                return Err(Error::PermissionDenied {
                    principal: p.name.clone(),
                    rpc: rpc.name(),
                    queue: None,
                    roles: rpc.roles_text(),
                });
            }
            Ok(queues
                .into_iter()
                .filter(|q| e.roles_on(q.as_str()).allows(rpc))
                .collect())
        })?
    }

    /// Resolves when `p` may no longer call `rpc` on one of `queues` (checked now and after
    /// every reload), with the refusal to end the stream with; never resolves without an
    /// auth file. A Subscribe stream races its reads against it, so a revoked worker's
    /// stream ends and it gets no more leases.
    pub fn revoked(
        &self,
        p: Principal,
        rpc: Rpc,
        queues: Vec<QueueName>,
    ) -> impl Future<Output = Error> + Send + 'static {
        let auth = self.clone();
        // Subscribed before the first check: a reload between the two is not missed.
        let mut changes = self.inner.generation.subscribe();
        async move {
            if !auth.enabled() {
                return std::future::pending().await;
            }
            loop {
                for q in &queues {
                    if let Err(e) = auth.authorize(&p, rpc, q) {
                        return e;
                    }
                }
                if changes.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        }
    }
}

/// Authenticates each call (see [`Auth::authenticate`]) and puts the [`Principal`] into the
/// request's extensions. Health and reflection are served without it.
///
/// When the request carries its [`Rpc`] (services built with [`Auth::guard`]), a principal
/// no grant of which allows that RPC on any queue is refused here, with PERMISSION_DENIED
/// ([`Auth::authorize_somewhere`]): before the request body is read, so such a caller cannot
/// make the server buffer a message. The handlers still check the exact queues.
#[derive(Clone, Debug)]
pub struct AuthInterceptor(Auth);

impl tonic::service::Interceptor for AuthInterceptor {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let certs = crate::transport::conn_info(&req).and_then(|c| c.peer_certs.clone());
        let principal = self
            .0
            .authenticate(req.metadata(), certs.as_deref().map(Vec::as_slice))?;
        if let Some(rpc) = req.extensions().get::<Rpc>() {
            self.0.authorize_somewhere(&principal, *rpc)?;
        }
        req.extensions_mut().insert(principal);
        Ok(req)
    }
}
