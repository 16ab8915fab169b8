//! The visitor of a request (session, principal, gRPC caller) and the gates every request
//! passes: a page needs a live session (else the login); a state-changing POST also needs
//! the same origin and the session's CSRF token, then, for an action, read-only mode off
//! and the role on the queue. A gRPC error maps to a page here too.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::Markup;
use tonic::{Code, Status};

use super::api::Caller;
use super::pages;
use super::routes::{Refused, UiState, COOKIE};
use super::session::Session;
use crate::auth::{Principal, Rpc};
use crate::jobs::QueueName;

/// The visitor of a request: its session, principal and gRPC caller.
#[derive(Debug, Clone)]
pub struct Visitor {
    pub(super) session_id: String,
    /// The session (its CSRF token goes into every form).
    pub session: Session,
    /// Who the session's token authenticates as.
    pub principal: Principal,
    /// Calls the API with the session's token.
    pub caller: Caller,
    /// `Set-Cookie` to send (a session just created).
    set_cookie: Option<String>,
    ui: UiState,
}

impl Visitor {
    /// May the visitor do `rpc` on `queue` from the dashboard? False for every admin action
    /// in read-only mode, and when the policy would refuse it.
    pub fn can(&self, rpc: Rpc, queue: &str) -> bool {
        if self.ui.read_only() && crate::auth::audit::AdminAction::of(rpc).is_some() {
            return false;
        }
        match QueueName::parse(queue) {
            Ok(q) => self.ui.auth().permits(&self.principal, rpc, &q),
            Err(_) => false,
        }
    }

    /// The session's CSRF token.
    pub fn csrf(&self) -> &str {
        &self.session.csrf
    }

    /// The dashboard state.
    pub fn ui(&self) -> &UiState {
        &self.ui
    }

    /// An HTML page with `status`, setting the session cookie if the session is new.
    pub fn page(&self, status: StatusCode, markup: Markup) -> Response {
        let mut r = (status, markup).into_response();
        if let Some(c) = &self.set_cookie {
            if let Ok(v) = HeaderValue::from_str(c) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
        }
        r
    }

    /// The page for a failed gRPC call: back to the login when the token no longer
    /// authenticates (the session ends), else an error page with the status's message.
    pub fn failed(&self, status: Status) -> Response {
        let code = match status.code() {
            Code::Unauthenticated => {
                self.ui.sessions().end(&self.session_id);
                return to_login(&self.ui);
            }
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
                StatusCode::BAD_REQUEST
            }
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        self.error(code, status.message())
    }

    /// An error page.
    pub fn error(&self, code: StatusCode, message: &str) -> Response {
        self.page(code, pages::error(self, code, message))
    }
}

/// The value of the session cookie, if the request has one.
pub(super) fn cookie_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_owned())
}

pub(super) fn to_login(ui: &UiState) -> Response {
    let mut r = Redirect::to("/ui/login").into_response();
    if let Ok(v) = HeaderValue::from_str(&ui.clear_cookie()) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// A visitor from the session cookie. Without an auth file a visitor without a session gets
/// a new anonymous one (when `create`); with one, no session (or a token that no longer
/// authenticates: the session ends) sends the browser to the login page.
fn visitor(ui: &UiState, headers: &HeaderMap, create: bool) -> Result<Visitor, Refused> {
    let id = cookie_id(headers);
    // htmx's polling (the overview's refresh) does not count as use of the session.
    let used = !headers.contains_key("hx-request");
    let found = id
        .as_deref()
        .and_then(|id| ui.sessions().touch(id, used).map(|s| (id.to_owned(), s)));
    let (session_id, session, set_cookie) = match found {
        Some((id, s)) => (id, s, None),
        None if !ui.auth_on() && create => {
            let (id, s) = ui.sessions().create(None, None);
            let c = ui.cookie(&id);
            (id, s, Some(c))
        }
        None => return Err(Box::new(to_login(ui))),
    };
    let token = session.token.as_deref();
    let principal = match ui.authenticate(token) {
        Ok(p) => p,
        Err(_) => {
            ui.sessions().end(&session_id);
            return Err(Box::new(to_login(ui)));
        }
    };
    let caller = ui.api().caller(token).map_err(|_| Box::new(to_login(ui)))?;
    Ok(Visitor {
        session_id,
        session,
        principal,
        caller,
        set_cookie,
        ui: ui.clone(),
    })
}

/// A form body: its fields in order (a name may repeat, e.g. `job_id`).
#[derive(Debug, Default)]
pub struct Form(Vec<(String, String)>);

impl Form {
    /// Parses an `application/x-www-form-urlencoded` body.
    pub fn parse(body: &[u8]) -> Form {
        Form(
            form_urlencoded::parse(body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first value of `name`, trimmed, or "".
    pub fn str(&self, name: &str) -> &str {
        self.get(name).map(str::trim).unwrap_or("")
    }

    /// Every value of `name`.
    pub fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .collect()
    }
}

/// Does the request come from the dashboard's own origin? Refused: a `Sec-Fetch-Site` other
/// than `same-origin` or `none` (browsers send it on every request), and an `Origin` naming
/// another host than `Host`. An absent `Origin`, or `Origin: null` (what Chromium sends on a
/// form POST from a page with `Referrer-Policy: no-referrer`, as every dashboard page has),
/// passes: the CSRF token decides.
pub(super) fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        if !matches!(site.to_str(), Ok("same-origin") | Ok("none")) {
            return false;
        }
    }
    let origin = match headers.get(header::ORIGIN).map(|o| o.to_str()) {
        None | Some(Ok("null")) => return true,
        Some(Ok(o)) => o,
        Some(Err(_)) => return false,
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin_host = origin.split_once("://").map(|(_, h)| h);
    matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
}

/// The checks of every state-changing POST, in order: a live session (403 without one: a
/// forged request gets nothing), the same origin, the CSRF token; then, for an action
/// (`action`), read-only mode. Each refusal is a 403 and changes nothing. The role is not
/// checked here: the action's RPC decides it (its PERMISSION_DENIED, audited as `denied`
/// like any client's, becomes a 403 page, see [`Visitor::failed`]).
pub fn post_gate(
    ui: &UiState,
    headers: &HeaderMap,
    form: &Form,
    action: bool,
) -> Result<Visitor, Refused> {
    let forbidden = |msg: &str| {
        (
            StatusCode::FORBIDDEN,
            pages::bare_error(StatusCode::FORBIDDEN, msg),
        )
            .into_response()
    };
    let v = match visitor(ui, headers, false) {
        Ok(v) => v,
        Err(_) => {
            return Err(Box::new(forbidden(
                "no live session: log in again (/ui/login) and resubmit",
            )))
        }
    };
    if !same_origin(headers) {
        return Err(Box::new(v.error(
            StatusCode::FORBIDDEN,
            "the request comes from another origin",
        )));
    }
    if !super::csrf::verify(v.csrf(), form.get("csrf")) {
        return Err(Box::new(v.error(
            StatusCode::FORBIDDEN,
            "missing or wrong CSRF token: reload the page and try again",
        )));
    }
    if action && ui.read_only() {
        // The dashboard's own refusal: no RPC is made, so no audit line.
        return Err(Box::new(v.error(
            StatusCode::FORBIDDEN,
            "the dashboard is read-only (--ui-read-only): actions are refused",
        )));
    }
    Ok(v)
}

/// The visitor of a page, or the response that replaces the page (the login).
pub fn page_gate(ui: &UiState, headers: &HeaderMap) -> Result<Visitor, Refused> {
    visitor(ui, headers, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:9090"));
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn same_origin_trusts_the_browsers_headers_and_leaves_null_to_the_csrf_token() {
        assert!(same_origin(&headers(&[])));
        assert!(same_origin(&headers(&[("origin", "null")])));
        assert!(same_origin(&headers(&[(
            "origin",
            "http://127.0.0.1:9090"
        )])));
        assert!(same_origin(&headers(&[
            ("origin", "null"),
            ("sec-fetch-site", "same-origin")
        ])));
        assert!(!same_origin(&headers(&[("origin", "http://evil.example")])));
        assert!(!same_origin(&headers(&[("sec-fetch-site", "cross-site")])));
        assert!(!same_origin(&headers(&[
            ("origin", "null"),
            ("sec-fetch-site", "same-site")
        ])));
    }
}
