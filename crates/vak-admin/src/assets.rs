//! The page: one HTML file, one script, one stylesheet, compiled into the
//! binary. No framework, no build step, no request leaves this server.

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;

/// `ui/index.html`.
pub const INDEX_HTML: &str = include_str!("../ui/index.html");
/// `ui/app.js`.
pub const APP_JS: &str = include_str!("../ui/app.js");
/// `ui/app.css`.
pub const APP_CSS: &str = include_str!("../ui/app.css");

pub(crate) async fn index() -> impl IntoResponse {
    ([(CONTENT_TYPE, "text/html; charset=utf-8")], INDEX_HTML)
}

pub(crate) async fn script() -> impl IntoResponse {
    ([(CONTENT_TYPE, "text/javascript; charset=utf-8")], APP_JS)
}

pub(crate) async fn style() -> impl IntoResponse {
    ([(CONTENT_TYPE, "text/css; charset=utf-8")], APP_CSS)
}
