//! The bearer token: from `VAK_ADMIN_TOKEN`, else `$VAK_HOME/.vak/admin.token`
//! (generated with mode 0600 on first use, reused afterwards).

use std::fmt;
use std::io::{Read as _, Write as _};

use camino::{Utf8Path, Utf8PathBuf};
use subtle::ConstantTimeEq;
use vak_core::files::FsError;
use vak_core::prompts::{Escaped, sha256_hex};

use crate::AdminError;

/// Tokens shorter than this are refused: they would be guessable.
const MIN_TOKEN_CHARS: usize = 16;

/// Where the token in force came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// The `VAK_ADMIN_TOKEN` environment variable.
    Env,
    /// A file that already held a token.
    File(Utf8PathBuf),
    /// A file this start generated.
    Generated(Utf8PathBuf),
}

impl fmt::Display for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenSource::Env => f.write_str("the VAK_ADMIN_TOKEN environment variable"),
            TokenSource::File(path) | TokenSource::Generated(path) => {
                write!(f, "{}", Escaped(path.as_str()))
            }
        }
    }
}

/// The token the server accepts. Only its digest is kept, so comparison
/// runs over two fixed-length strings whatever the caller sent.
#[derive(Clone)]
pub struct AdminToken {
    digest: String,
    source: TokenSource,
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminToken")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// `$VAK_HOME/.vak/admin.token`.
pub fn token_path(home: &Utf8Path) -> Utf8PathBuf {
    home.join(".vak").join("admin.token")
}

fn io_error(path: &Utf8Path, source: std::io::Error) -> AdminError {
    AdminError::TokenFile {
        path: path.to_owned(),
        source,
    }
}

fn generate() -> Result<String, AdminError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| AdminError::Random(e.to_string()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A refusal of the floor's, as the token file's: a link, FIFO, socket,
/// device or directory is "not a regular file", whatever the step.
fn fs_error(path: &Utf8Path, error: FsError) -> AdminError {
    match error {
        FsError::Symlink { .. } | FsError::NotRegular { .. } => {
            AdminError::TokenNotRegular(path.to_owned())
        }
        FsError::Io { source, .. } => io_error(path, source),
    }
}

fn check_private(path: &Utf8Path, mode: u32) -> Result<(), AdminError> {
    if mode & 0o077 != 0 {
        return Err(AdminError::TokenPermissions {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

/// The most a token file may hold: a token and a newline, with room to spare.
const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// The token in an existing token file, or `None` when there is none.
/// The file is treated like a store's file: the open does not follow a
/// symlink or block on a FIFO, the open handle is checked to be a regular
/// file (a socket, device or directory is refused), private to its owner and
/// small, and the read is bounded.
fn read_existing(path: &Utf8Path) -> Result<Option<String>, AdminError> {
    // The floor's open: no link followed, no FIFO waited on, and the open
    // handle checked to be a regular file.
    let Some(file) = vak_core::files::open_read(path).map_err(|e| fs_error(path, e))? else {
        return Ok(None);
    };
    let mode = vak_core::files::permissions(&file).map_err(|e| io_error(path, e))?;
    check_private(path, mode)?;
    let len = file.metadata().map_err(|e| io_error(path, e))?.len();
    if len > MAX_TOKEN_FILE_BYTES {
        return Err(AdminError::TokenFileTooLarge {
            path: path.to_owned(),
            bytes: len,
            limit: MAX_TOKEN_FILE_BYTES,
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_TOKEN_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, e))?;
    if bytes.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(AdminError::TokenFileTooLarge {
            path: path.to_owned(),
            bytes: bytes.len() as u64,
            limit: MAX_TOKEN_FILE_BYTES,
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| AdminError::TokenNotText(path.to_owned()))?;
    let token = text.trim().to_owned();
    check_token(&token, || format!("`{}`", Escaped(path.as_str())))?;
    Ok(Some(token))
}

/// A token must be long enough to be a secret, and made of characters a
/// client can send in `Authorization: Bearer …` (visible ASCII): a token
/// with a control character or a space would start a server nobody can use.
fn check_token(token: &str, from: impl Fn() -> String) -> Result<(), AdminError> {
    if token.chars().count() < MIN_TOKEN_CHARS {
        return Err(AdminError::TokenWeak(from()));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(AdminError::TokenUnsendable(from()));
    }
    Ok(())
}

impl AdminToken {
    /// The token for `home`: `env` (the value of `VAK_ADMIN_TOKEN`, passed
    /// in so callers and tests decide), else the token file, generated when
    /// missing. Returns the token too, so a caller can hand it to a test.
    pub fn load(home: &Utf8Path, env: Option<&str>) -> Result<(AdminToken, String), AdminError> {
        if let Some(token) = env.map(str::trim).filter(|t| !t.is_empty()) {
            check_token(token, || "VAK_ADMIN_TOKEN".to_owned())?;
            return Ok((AdminToken::new(token, TokenSource::Env), token.to_owned()));
        }
        let path = token_path(home);
        // A file of the home: never read or created outside it.
        vak_core::prompts::home_path(home, &path).map_err(|e| io_error(&path, e.into()))?;
        if let Some(token) = read_existing(&path)? {
            return Ok((
                AdminToken::new(&token, TokenSource::File(path.clone())),
                token,
            ));
        }
        if let Some(dir) = path.parent() {
            vak_core::files::create_dirs(dir).map_err(|e| io_error(&path, e))?;
        }
        let token = generate()?;
        match vak_core::files::create_new(&path, 0o600).map_err(|e| fs_error(&path, e))? {
            Some(mut file) => {
                file.write_all(format!("{token}\n").as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(|e| io_error(&path, e))?;
                tracing::info!(%path, "generated a new admin token");
                Ok((
                    AdminToken::new(&token, TokenSource::Generated(path.clone())),
                    token,
                ))
            }
            // Another server generated one between our read and create.
            None => {
                let token = read_existing(&path)?.ok_or_else(|| {
                    io_error(
                        &path,
                        std::io::Error::new(
                            std::io::ErrorKind::AlreadyExists,
                            "it appeared and vanished while being created",
                        ),
                    )
                })?;
                Ok((
                    AdminToken::new(&token, TokenSource::File(path.clone())),
                    token,
                ))
            }
        }
    }

    fn new(token: &str, source: TokenSource) -> Self {
        AdminToken {
            digest: sha256_hex(token.as_bytes()),
            source,
        }
    }

    /// The token's id in version records: the first 12 hex digits of its
    /// sha256 (never the token; a prefix of a digest of a random token says
    /// nothing usable about it).
    pub fn id(&self) -> String {
        self.digest.get(..12).unwrap_or_default().to_owned()
    }

    /// Where the token came from.
    pub fn source(&self) -> &TokenSource {
        &self.source
    }

    /// Whether `presented` is the token, compared in constant time (over
    /// digests, so not even the length leaks).
    pub fn matches(&self, presented: &str) -> bool {
        let presented = sha256_hex(presented.as_bytes());
        presented.as_bytes().ct_eq(self.digest.as_bytes()).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> (tempfile::TempDir, Utf8PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = Utf8PathBuf::from_path_buf(dir.path().to_owned()).expect("utf8");
        (dir, path)
    }

    #[test]
    fn generates_once_with_mode_0600_then_reuses() {
        let (_dir, home) = home();
        let (first, token) = AdminToken::load(&home, None).expect("generate");
        assert!(matches!(first.source(), TokenSource::Generated(_)));
        assert_eq!(token.len(), 64);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(token_path(&home))
                .expect("meta")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let (second, again) = AdminToken::load(&home, None).expect("reuse");
        assert!(matches!(second.source(), TokenSource::File(_)));
        assert_eq!(token, again);
        assert!(second.matches(&token));
        assert!(!second.matches(&format!("{token}x")));
        assert!(!second.matches(""));
    }

    #[test]
    fn env_wins_and_short_tokens_are_refused() {
        let (_dir, home) = home();
        let (token, _) = AdminToken::load(&home, Some("0123456789abcdef-env")).expect("env");
        assert_eq!(token.source(), &TokenSource::Env);
        assert!(token.matches("0123456789abcdef-env"));
        assert!(!token_path(&home).exists());
        assert!(matches!(
            AdminToken::load(&home, Some("short")),
            Err(AdminError::TokenWeak(_))
        ));
        assert!(matches!(
            AdminToken::load(&home, Some("0123456789abcdef\u{1b}[2J")),
            Err(AdminError::TokenUnsendable(_))
        ));
    }

    #[test]
    fn a_token_file_no_client_could_send_is_refused() {
        let (_dir, home) = home();
        let path = token_path(&home);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        for bad in [
            "aaaaaaaaaaaaaaaaaaaa\u{1b}[2Jbbb\nccc",
            "aaaaaaaa bbbbbbbbbbbb",
            "aaaaaaaaaaaaaaaaé",
        ] {
            std::fs::write(&path, bad).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
            let err = AdminToken::load(&home, None).unwrap_err();
            assert!(
                matches!(err, AdminError::TokenUnsendable(_)),
                "{bad:?}: {err}"
            );
            assert!(!err.to_string().contains('\n'), "{err}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_world_readable_token_file_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let (_dir, home) = home();
        AdminToken::load(&home, None).expect("generate");
        let path = token_path(&home);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let error = AdminToken::load(&home, None).expect_err("refused");
        assert!(error.to_string().contains("chmod 600"), "{error}");
    }

    /// `AdminToken::load` on another thread, failing the test if it blocks
    /// (two minutes: generous, so a loaded machine never trips it).
    #[cfg(unix)]
    fn load_without_blocking(home: &Utf8Path) -> Result<(AdminToken, String), AdminError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let home = home.to_owned();
        std::thread::spawn(move || {
            let _ = tx.send(AdminToken::load(&home, None));
        });
        rx.recv_timeout(std::time::Duration::from_secs(120))
            .expect("loading the token blocked")
    }

    #[cfg(unix)]
    #[test]
    fn a_token_file_that_is_not_a_regular_file_is_refused_without_blocking() {
        let (_dir, home) = home();
        let path = token_path(&home);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        let valid = home.join("elsewhere.token");
        std::fs::write(&valid, "0123456789abcdef0123456789abcdef\n").expect("write");
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&valid, std::fs::Permissions::from_mode(0o600))
                .expect("chmod");
        }
        // A FIFO (opening it for reading would block), a symlink to a valid
        // token, a symlink to a device, a dangling symlink, a directory.
        let status = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .expect("mkfifo");
        assert!(status.success());
        let error = load_without_blocking(&home).expect_err("FIFO refused");
        assert!(matches!(error, AdminError::TokenNotRegular(_)), "{error}");
        assert!(error.to_string().contains("not a regular file"), "{error}");
        for target in [valid.as_str(), "/dev/zero", "/nonexistent/token"] {
            std::fs::remove_file(&path).expect("rm");
            std::os::unix::fs::symlink(target, &path).expect("symlink");
            let error = load_without_blocking(&home).expect_err("symlink refused");
            assert!(
                matches!(error, AdminError::TokenNotRegular(_)),
                "{target}: {error}"
            );
            // Nothing was written through the link.
            assert!(
                std::fs::symlink_metadata(&path)
                    .expect("lstat")
                    .is_symlink()
            );
        }
        std::fs::remove_file(&path).expect("rm");
        std::fs::create_dir(&path).expect("mkdir");
        let error = load_without_blocking(&home).expect_err("directory refused");
        assert!(matches!(error, AdminError::TokenNotRegular(_)), "{error}");
    }

    #[cfg(unix)]
    #[test]
    fn a_huge_or_binary_token_file_is_refused_by_size_and_encoding() {
        use std::os::unix::fs::PermissionsExt as _;
        let (_dir, home) = home();
        let path = token_path(&home);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, vec![b'a'; 1 << 20]).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let error = load_without_blocking(&home).expect_err("too large");
        assert!(error.to_string().contains("4096-byte limit"), "{error}");
        std::fs::write(&path, b"0123456789abcdef\xff\xfe").expect("write");
        let error = load_without_blocking(&home).expect_err("not UTF-8");
        assert!(error.to_string().contains("not UTF-8"), "{error}");
    }

    #[test]
    fn comparison_is_over_fixed_length_digests() {
        let token = AdminToken::new("0123456789abcdef-secret", TokenSource::Env);
        assert_eq!(token.digest.len(), 64);
        assert!(token.matches("0123456789abcdef-secret"));
        for wrong in [
            "",
            "0",
            "0123456789abcdef-secre",
            "0123456789abcdef-secret\0",
        ] {
            assert!(!token.matches(wrong), "{wrong:?}");
        }
    }
}
