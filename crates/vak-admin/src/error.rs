use axum::Json;
use axum::http::StatusCode;
use axum::http::header::WWW_AUTHENTICATE;
use axum::response::{IntoResponse, Response};
use camino::Utf8PathBuf;
use thiserror::Error;
use vak_core::CoreError;
use vak_core::prompts::Escaped;
use vak_core::prompts::LoaderError;

/// Everything the admin server can fail with: starting up, and each request.
///
/// Request errors become a JSON body `{"error": "<the sentence>"}` with the
/// status [`AdminError::status`] gives; some carry more fields (see
/// `docs/admin-api.md`).
#[derive(Debug, Error)]
pub enum AdminError {
    /// `--listen` was not `IP:PORT`.
    #[error("`{}` is not an address to listen on; give IP:PORT such as 127.0.0.1:7878", Escaped(.0))]
    BadListen(String),
    /// The socket could not be bound.
    #[error("cannot listen on `{}`: {source}", Escaped(.addr))]
    Bind {
        /// The address asked for.
        addr: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The token file could not be read or created.
    #[error("cannot read or create the admin token file `{}`: {source}", Escaped(.path.as_str()))]
    TokenFile {
        /// `$VAK_HOME/.vak/admin.token`.
        path: Utf8PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The token file is readable by other users, so the token is not secret.
    #[error(
        "the admin token file `{}` has mode {mode:o}, open to other users (readable or writable by them); run `chmod 600 {}` or delete it to get a new token",
        Escaped(.path.as_str()), Escaped(.path.as_str())
    )]
    TokenPermissions {
        /// The token file.
        path: Utf8PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The token file is not a regular file (a symlink, FIFO, socket,
    /// device or directory).
    #[error(
        "the admin token file `{}` is not a regular file (a symlink, FIFO, socket, device or directory); delete it so a new token can be generated",
        Escaped(.0.as_str())
    )]
    TokenNotRegular(Utf8PathBuf),
    /// The token file is larger than a token could be.
    #[error(
        "the admin token file `{}` is {bytes} bytes, over the {limit}-byte limit for a token file; delete it so a new token can be generated",
        Escaped(.path.as_str())
    )]
    TokenFileTooLarge {
        /// The token file.
        path: Utf8PathBuf,
        /// Its size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The token file does not hold UTF-8 text.
    #[error(
        "the admin token file `{}` is not UTF-8 text; delete it so a new token can be generated",
        Escaped(.0.as_str())
    )]
    TokenNotText(Utf8PathBuf),
    /// A configured token is too short to be a secret.
    #[error(
        "the admin token from {0} is shorter than 16 characters; use a longer random token (or unset VAK_ADMIN_TOKEN / delete the file to generate one)"
    )]
    TokenWeak(String),
    /// A configured token holds a character a client cannot send in an
    /// `Authorization` header.
    #[error(
        "the admin token from {0} holds a space, a control character or a non-ASCII character, which no client can send in an Authorization header; use letters, digits and punctuation (or unset VAK_ADMIN_TOKEN / delete the file to generate one)"
    )]
    TokenUnsendable(String),
    /// The operating system's random source failed.
    #[error("cannot generate a random admin token: {0}")]
    Random(String),
    /// The async runtime could not start.
    #[error("cannot start the admin server's runtime: {0}")]
    Runtime(std::io::Error),
    /// The server stopped with an I/O error.
    #[error("the admin server stopped: {0}")]
    Serve(std::io::Error),

    /// The request is malformed or names something invalid.
    #[error("{0}")]
    BadRequest(String),
    /// No or the wrong bearer token.
    #[error("{0}")]
    Unauthorized(String),
    /// The `Host` header is not the address the server listens on.
    #[error("{0}")]
    WrongHost(String),
    /// No such route or entry.
    #[error("{0}")]
    NotFound(String),
    /// A write to something vak never writes (the managed layer).
    #[error("{0}")]
    ReadOnly(String),
    /// The text changed on disk since the editor loaded it.
    #[error("{message}")]
    Conflict {
        /// What happened and what to do.
        message: String,
        /// The digest the file or entry has now (`null` when absent).
        current_digest: Option<String>,
    },
    /// A save would put the assembled prefix over the token cap.
    #[error("{message}")]
    OverBudget {
        /// The refusal, naming the layers.
        message: String,
        /// The token figures and the offending layers, for the UI.
        detail: serde_json::Value,
    },
    /// The request body did not arrive in time.
    #[error("{0}")]
    BodyTimeout(String),
    /// The request body, or a text in it, is too large.
    #[error("{0}")]
    TooLarge(String),
    /// The library refused (names, trust store, project).
    #[error(transparent)]
    Core(#[from] CoreError),
    /// A file could not be read or written.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming the file.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A gateway file exists but is not what the gateway expects.
    #[error("{0}")]
    Gateway(String),
    /// Other nodes kept changing the shared home side between the change's
    /// budget check and its write; nothing was written, and the same
    /// request made again is checked afresh.
    #[error("{0}")]
    Busy(String),
    /// Something the server itself got wrong.
    #[error("{0}")]
    Internal(String),
}

impl AdminError {
    /// The HTTP status a request error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            AdminError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AdminError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            AdminError::WrongHost(_) => StatusCode::MISDIRECTED_REQUEST,
            AdminError::NotFound(_) => StatusCode::NOT_FOUND,
            AdminError::ReadOnly(_) => StatusCode::FORBIDDEN,
            // The floor on disk is not what it must be (mode, signature,
            // keys): like a malformed gateway file, a state to fix there.
            AdminError::Core(CoreError::Loader(LoaderError::Managed(_))) => StatusCode::CONFLICT,
            AdminError::Conflict { .. } => StatusCode::CONFLICT,
            AdminError::OverBudget { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            AdminError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            AdminError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            AdminError::Core(
                CoreError::Name(_) | CoreError::ChatWithoutBot | CoreError::NestedRepository { .. },
            ) => StatusCode::BAD_REQUEST,
            AdminError::Core(CoreError::Loader(LoaderError::UnknownRole { .. })) => {
                StatusCode::NOT_FOUND
            }
            // The files on disk, not the request, are at fault: a block
            // file in force imports what cannot be read.
            AdminError::Gateway(_) | AdminError::Core(CoreError::ImportRefused(_)) => {
                StatusCode::CONFLICT
            }
            AdminError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(error = %self, "admin request failed");
        }
        let mut body = serde_json::Map::new();
        body.insert("error".to_owned(), self.to_string().into());
        match &self {
            AdminError::Conflict { current_digest, .. } => {
                body.insert(
                    "current_digest".to_owned(),
                    current_digest
                        .clone()
                        .map_or(serde_json::Value::Null, Into::into),
                );
            }
            AdminError::OverBudget {
                detail: serde_json::Value::Object(detail),
                ..
            } => {
                for (key, value) in detail {
                    body.insert(key.clone(), value.clone());
                }
            }
            _ => {}
        }
        let mut response = (status, Json(serde_json::Value::Object(body))).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}
