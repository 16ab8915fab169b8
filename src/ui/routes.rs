//! The dashboard's axum router: the paths, the visitor of each request (session, principal,
//! gRPC caller), the checks every POST passes (session, same origin, CSRF, read-only, role),
//! the mapping of gRPC errors to pages, and the security headers of every response.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Extension, Router};
use tonic::metadata::MetadataMap;

use super::api::Api;
use super::login_limit::LoginLimit;
use super::pages;
use super::session::Sessions;
use super::visitor::{cookie_id, page_gate, post_gate, same_origin, to_login, Form};
use crate::auth::{Auth, Principal, Rpc};
use crate::config::UiArgs;

/// A response that replaces the page (boxed: a `Response` is large).
pub type Refused = Box<Response>;

/// The session cookie's name.
pub const COOKIE: &str = "jobwire_session";

/// The Content-Security-Policy of every dashboard response: own scripts, styles and images
/// only, no inline script or style, no framing, forms post to the dashboard only.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Shared state of the dashboard; cheap to clone.
#[derive(Clone, Debug)]
pub struct UiState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    api: Api,
    auth: Auth,
    sessions: Sessions,
    login_limit: LoginLimit,
    read_only: bool,
    cookie_secure: bool,
}

impl UiState {
    /// The dashboard over `api` (the server's own routes), deciding logins and what to show
    /// with `auth`, configured by `args`.
    pub fn new(api: Api, auth: Auth, args: &UiArgs) -> UiState {
        UiState {
            inner: Arc::new(Inner {
                api,
                auth,
                sessions: Sessions::new(
                    args.session_idle,
                    args.session_max,
                    args.max_sessions_per_principal as usize,
                ),
                login_limit: LoginLimit::new(args.login_rate),
                read_only: args.read_only,
                cookie_secure: args.cookie_secure,
            }),
        }
    }

    /// Is an auth file in force (visitors log in)?
    pub fn auth_on(&self) -> bool {
        self.inner.auth.enabled()
    }

    /// `--ui-read-only`?
    pub fn read_only(&self) -> bool {
        self.inner.read_only
    }

    pub(super) fn sessions(&self) -> &Sessions {
        &self.inner.sessions
    }

    pub(super) fn auth(&self) -> &Auth {
        &self.inner.auth
    }

    pub(super) fn api(&self) -> &Api {
        &self.inner.api
    }

    pub(super) fn cookie(&self, id: &str) -> String {
        let secure = if self.inner.cookie_secure {
            "; Secure"
        } else {
            ""
        };
        format!("{COOKIE}={id}; Path=/ui; HttpOnly; SameSite=Strict{secure}")
    }

    pub(super) fn clear_cookie(&self) -> String {
        format!("{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0")
    }

    /// Who `token` authenticates as (`None` without an auth file: anonymous).
    pub(super) fn authenticate(&self, token: Option<&str>) -> Result<Principal, String> {
        let mut md = MetadataMap::new();
        if let Some(t) = token {
            let v = format!("Bearer {t}")
                .parse()
                .map_err(|_| "the token is not ASCII".to_owned())?;
            md.insert("authorization", v);
        }
        self.inner
            .auth
            .authenticate(&md, None)
            .map_err(|e| e.to_string())
    }
}

/// The security headers of every dashboard response; pages (anything without its own
/// `Cache-Control`) are `no-store`.
async fn security_headers(req: Request, next: Next) -> Response {
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    r
}

async fn login_form(State(ui): State<UiState>, headers: HeaderMap) -> Response {
    if !ui.auth_on() {
        return Redirect::to("/ui/").into_response();
    }
    // Already logged in: straight to the overview.
    if let Some(id) = cookie_id(&headers) {
        if ui.sessions().touch(&id, true).is_some() {
            return Redirect::to("/ui/").into_response();
        }
    }
    (StatusCode::OK, pages::login(None)).into_response()
}

/// May `p` see anything in the dashboard: does one of its roles allow reading a queue's
/// list (viewer or admin), on any queue? Every page starts from that read.
fn can_view(ui: &UiState, p: &Principal) -> bool {
    let mut probe = tonic::Request::new(());
    probe.extensions_mut().insert(p.clone());
    ui.auth()
        .visible(&probe, Rpc::ListQueues, Vec::new())
        .is_ok()
}

/// 429 with `Retry-After` (whole seconds, at least 1) and the login form saying why.
fn too_many_logins(wait: std::time::Duration) -> Response {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let secs = secs.max(1);
    let mut r = (
        StatusCode::TOO_MANY_REQUESTS,
        pages::login(Some(&format!(
            "Too many login attempts from your address: try again in {secs} s \
             (--ui-login-rate)."
        ))),
    )
        .into_response();
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    r
}

async fn login(
    State(ui): State<UiState>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !ui.auth_on() {
        return Redirect::to("/ui/").into_response();
    }
    // Every attempt counts, before the token is even read. Without the peer's address (a
    // server built without connect info) only the per-principal cap applies.
    if let Some(Extension(ConnectInfo(addr))) = peer {
        if let Err(wait) = ui.inner.login_limit.check(addr.ip()) {
            tracing::info!(peer = %addr.ip(), "dashboard login refused: rate limit");
            return too_many_logins(wait);
        }
    }
    if !same_origin(&headers) {
        return (
            StatusCode::FORBIDDEN,
            pages::bare_error(
                StatusCode::FORBIDDEN,
                "the request comes from another origin",
            ),
        )
            .into_response();
    }
    let form = Form::parse(&body);
    let token = form.str("token");
    match ui
        .authenticate(Some(token))
        .ok()
        .filter(|_| !token.is_empty())
    {
        Some(p) if !can_view(&ui, &p) => {
            tracing::info!(principal = %p.name, via = %p.via(), "dashboard login refused: no viewer or admin role on any queue");
            (
                StatusCode::FORBIDDEN,
                pages::login(Some(&format!(
                    "The token is valid, but its principal {:?} has no viewer or admin role \
                     on any queue: the dashboard has nothing to show it.",
                    p.name
                ))),
            )
                .into_response()
        }
        Some(p) => {
            // A login replaces the session the browser had, if any.
            if let Some(old) = cookie_id(&headers) {
                ui.sessions().end(&old);
            }
            let (id, _) = ui.sessions().create(Some(token.to_owned()), Some(&p.name));
            tracing::info!(principal = %p.name, via = %p.via(), "dashboard login");
            let mut r = Redirect::to("/ui/").into_response();
            if let Ok(v) = HeaderValue::from_str(&ui.cookie(&id)) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        None => {
            tracing::info!("dashboard login refused: the token does not authenticate");
            (
                StatusCode::UNAUTHORIZED,
                pages::login(Some(
                    "That token is not valid: unknown token id, wrong secret, or revoked.",
                )),
            )
                .into_response()
        }
    }
}

async fn logout(State(ui): State<UiState>, headers: HeaderMap, body: Bytes) -> Response {
    let form = Form::parse(&body);
    let v = match post_gate(&ui, &headers, &form, false) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    ui.sessions().end(&v.session_id);
    to_login(&ui)
}

async fn overview(State(ui): State<UiState>, headers: HeaderMap) -> Response {
    match page_gate(&ui, &headers) {
        Ok(v) => pages::overview::get(&v).await,
        Err(r) => *r,
    }
}

async fn workers(State(ui): State<UiState>, headers: HeaderMap) -> Response {
    match page_gate(&ui, &headers) {
        Ok(v) => pages::workers::get(&v).await,
        Err(r) => *r,
    }
}

async fn queue(
    State(ui): State<UiState>,
    Path(queue): Path<String>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let query = Form::parse(req.uri().query().unwrap_or("").as_bytes());
    match page_gate(&ui, &headers) {
        Ok(v) => pages::queue::get(&v, &queue, &query).await,
        Err(r) => *r,
    }
}

async fn job(
    State(ui): State<UiState>,
    Path((queue, job_id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    match page_gate(&ui, &headers) {
        Ok(v) => pages::job::get(&v, &queue, &job_id).await,
        Err(r) => *r,
    }
}

async fn dead(
    State(ui): State<UiState>,
    Path(queue): Path<String>,
    headers: HeaderMap,
    req: Request,
) -> Response {
    let query = Form::parse(req.uri().query().unwrap_or("").as_bytes());
    match page_gate(&ui, &headers) {
        Ok(v) => pages::dead::get(&v, &queue, &query).await,
        Err(r) => *r,
    }
}

/// A GET of an action's URL (a bookmark, a reload after the result): 303 to the page the
/// action belongs to.
async fn to_queue(Path(queue): Path<String>) -> Redirect {
    Redirect::to(&super::components::queue_url(&queue))
}

async fn to_job(Path((queue, job_id)): Path<(String, String)>) -> Redirect {
    Redirect::to(&super::components::job_url(&queue, &job_id))
}

async fn to_overview() -> Redirect {
    Redirect::to("/ui/")
}

async fn not_found(State(ui): State<UiState>, headers: HeaderMap, method: Method) -> Response {
    if method == Method::GET {
        if let Ok(v) = page_gate(&ui, &headers) {
            return v.error(StatusCode::NOT_FOUND, "no such dashboard page");
        }
    }
    (
        StatusCode::NOT_FOUND,
        pages::bare_error(StatusCode::NOT_FOUND, "no such dashboard page"),
    )
        .into_response()
}

/// Every `/ui` route over `ui`, with the security headers. Merge it into the HTTP port's
/// router (the main port only, never the metrics-only listener).
pub fn router(ui: UiState) -> Router {
    use super::actions;
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(overview))
        .route("/ui/login", get(login_form).post(login))
        .route("/ui/logout", get(to_overview).post(logout))
        .route("/ui/workers", get(workers))
        .route("/ui/assets/{hash}/{file}", get(super::assets::serve))
        .route("/ui/queues/{queue}", get(queue))
        .route(
            "/ui/queues/{queue}/pause",
            get(to_queue).post(actions::pause),
        )
        .route(
            "/ui/queues/{queue}/resume",
            get(to_queue).post(actions::resume),
        )
        .route(
            "/ui/queues/{queue}/purge",
            get(to_queue).post(actions::purge),
        )
        .route(
            "/ui/queues/{queue}/dead",
            get(dead).post(actions::dead_bulk),
        )
        .route("/ui/queues/{queue}/jobs/{job_id}", get(job))
        .route(
            "/ui/queues/{queue}/jobs/{job_id}/replay",
            get(to_job).post(actions::job_replay),
        )
        .route(
            "/ui/queues/{queue}/jobs/{job_id}/delete",
            get(to_job).post(actions::job_delete),
        )
        .route("/ui/{*rest}", get(not_found).post(not_found))
        .with_state(ui)
        .layer(axum::middleware::from_fn(security_headers))
}
