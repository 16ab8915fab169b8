//! Static files embedded in the binary (rust-embed): the stylesheet and the vendored htmx
//! (`htmx-<version>.min.js` from the npm package `htmx.org`, 0BSD license beside it). Served
//! at `/ui/assets/<hash>/<file>`, where `<hash>` is the first 16 hex digits of the file's
//! SHA-256: the URL changes with the content, so responses may be cached for a year.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use rust_embed::RustEmbed;

#[derive(RustEmbed)]
#[folder = "src/ui/assets/"]
struct Files;

/// The stylesheet's file name.
pub const STYLE: &str = "style.css";
/// The vendored htmx's file name.
pub const HTMX: &str = "htmx-2.0.11.min.js";

fn hash_of(file: &str) -> Option<String> {
    Files::get(file).map(|f| hex::encode(&f.metadata.sha256_hash()[..8]))
}

/// The URL of an embedded file, with its content hash.
pub fn url(file: &str) -> String {
    format!("/ui/assets/{}/{file}", hash_of(file).unwrap_or_default())
}

/// `GET /ui/assets/{hash}/{file}`: the file when the hash is its current one, else 404.
pub async fn serve(Path((hash, file)): Path<(String, String)>) -> Response {
    let Some(f) = Files::get(&file) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if hex::encode(&f.metadata.sha256_hash()[..8]) != hash {
        return StatusCode::NOT_FOUND.into_response();
    }
    let mime = if file.ends_with(".css") {
        "text/css; charset=utf-8"
    } else if file.ends_with(".js") {
        "text/javascript; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    };
    (
        [
            (header::CONTENT_TYPE, mime),
            (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
        ],
        f.data.into_owned(),
    )
        .into_response()
}
