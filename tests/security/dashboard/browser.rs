//! A minimal browser for the dashboard tests: plain HTTP/1.1 (reqwest), no redirects
//! followed, the session cookie kept by hand, and the CSRF token read from the last page.

use std::net::SocketAddr;

use reqwest::header::{HeaderMap, COOKIE, LOCATION, SET_COOKIE};
use reqwest::StatusCode;

/// One response: status, headers, body.
#[derive(Debug)]
pub struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Page {
    /// The `Location` header.
    pub fn location(&self) -> &str {
        self.headers
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The `Set-Cookie` header, if any.
    pub fn set_cookie(&self) -> Option<&str> {
        self.headers.get(SET_COOKIE).and_then(|v| v.to_str().ok())
    }

    /// The value of the first `name="csrf" value="..."` input.
    pub fn csrf(&self) -> String {
        let at = self
            .body
            .find(r#"name="csrf" value=""#)
            .unwrap_or_else(|| panic!("no csrf input in {}", self.body));
        let rest = &self.body[at + r#"name="csrf" value=""#.len()..];
        rest[..rest.find('"').expect("closing quote")].to_owned()
    }

    /// Every header and the body, as one text (to search for leaks).
    pub fn all_text(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.headers {
            s.push_str(&format!("{k}: {}\n", v.to_str().unwrap_or("")));
        }
        s.push_str(&self.body);
        s
    }
}

/// A browser with at most one cookie (the session).
pub struct Browser {
    client: reqwest::Client,
    base: String,
    pub cookie: Option<String>,
    /// The `Host` header to send instead of the address (a DNS-rebinding page's name).
    pub host: Option<String>,
}

impl Browser {
    /// A browser for the HTTP port at `addr`.
    pub fn new(addr: SocketAddr) -> Browser {
        Browser {
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            base: format!("http://{addr}"),
            cookie: None,
            host: None,
        }
    }

    async fn send(&mut self, req: reqwest::RequestBuilder) -> Page {
        let req = match &self.host {
            Some(h) => req.header(reqwest::header::HOST, h.clone()),
            None => req,
        };
        let req = match &self.cookie {
            Some(c) => req.header(COOKIE, c.clone()),
            None => req,
        };
        let r = req.send().await.expect("http request");
        let page = Page {
            status: r.status(),
            headers: r.headers().clone(),
            body: r.text().await.expect("body"),
        };
        if let Some(c) = page.set_cookie() {
            let pair = c.split(';').next().unwrap_or("").trim().to_owned();
            self.cookie = if pair.ends_with('=') {
                None
            } else {
                Some(pair)
            };
        }
        page
    }

    /// GET `path`.
    pub async fn get(&mut self, path: &str) -> Page {
        let req = self.client.get(format!("{}{path}", self.base));
        self.send(req).await
    }

    /// POST `fields` form-encoded to `path`.
    pub async fn post(&mut self, path: &str, fields: &[(&str, &str)]) -> Page {
        self.post_from(path, fields, None).await
    }

    /// POST `fields` form-encoded to `path` with an `Origin` header, as a browser sends.
    pub async fn post_from(
        &mut self,
        path: &str,
        fields: &[(&str, &str)],
        origin: Option<&str>,
    ) -> Page {
        self.post_from_site(path, fields, origin, None).await
    }

    /// POST with an `Origin` and a `Sec-Fetch-Site` header, as a browser sends.
    pub async fn post_from_site(
        &mut self,
        path: &str,
        fields: &[(&str, &str)],
        origin: Option<&str>,
        site: Option<&str>,
    ) -> Page {
        let body = {
            let mut s = form_urlencoded::Serializer::new(String::new());
            for (k, v) in fields {
                s.append_pair(k, v);
            }
            s.finish()
        };
        let req = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        let req = match origin {
            Some(o) => req.header("origin", o),
            None => req,
        };
        let req = match site {
            Some(s) => req.header("sec-fetch-site", s),
            None => req,
        };
        self.send(req).await
    }

    /// Logs in with `token`; panics unless it is accepted.
    pub async fn login(&mut self, token: &str) -> Page {
        let p = self.post("/ui/login", &[("token", token)]).await;
        assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
        assert_eq!(p.location(), "/ui/");
        p
    }
}
