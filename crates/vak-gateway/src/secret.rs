//! Per-bot signing secrets (`$VAK_HOME/.vak/gateway/secrets/<bot>`, mode
//! 0600) and the request signature (docs/gateway.md): `X-Vak-Signature:
//! v2=<hex>`, the HMAC-SHA256 of `v2:`, the timestamp, the bot, the chat
//! and the body (joined with `:`), which names where the message goes. The
//! older `v1=<hex>`, of `v1:`, the timestamp and the body, does not (a
//! `v1` request seen before it is delivered can be sent to another chat of
//! the bot instead): accepted only when the shared config says `[gateway]
//! accept_v1 = true` ([`Formats`]).

use std::io::Write as _;
use std::num::IntErrorKind;

use camino::{Utf8Path, Utf8PathBuf};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use vak_core::prompts::{Escaped, Name, SaveError, Store, read_safely};

use crate::LifecycleError;

/// How far a request's timestamp may be from now, either way.
pub const REPLAY_WINDOW_SECS: i64 = 300;

/// The secret file of `bot`.
pub fn secret_path(home: &Utf8Path, bot: &Name) -> Utf8PathBuf {
    home.join(".vak")
        .join("gateway")
        .join("secrets")
        .join(bot.as_str())
}

/// The secret of `bot`, or `None` when it has none. The file is read like a
/// prompt file: confined to the home, never through a symlink, FIFO or
/// device, bounded.
pub fn read_secret(home: &Utf8Path, bot: &Name) -> Result<Option<String>, LifecycleError> {
    let path = secret_path(home, bot);
    match read_safely(&path, home) {
        Ok(Some(text)) => {
            let secret = text.trim().to_owned();
            if secret.len() < 32 {
                return Err(LifecycleError::Secret {
                    path,
                    reason: "is shorter than 32 characters; delete it and run `vak gateway secret` again".to_owned(),
                });
            }
            Ok(Some(secret))
        }
        Ok(None) => Ok(None),
        Err(refusal) => Err(LifecycleError::Secret {
            path,
            reason: refusal.to_string(),
        }),
    }
}

/// The secret of `bot` from `store` when it holds the home side (so a node
/// with an empty `$VAK_HOME` verifies), else — the file store, or a bot
/// whose secret is not in the store yet — from the home's file.
pub fn bot_secret(
    store: &dyn Store,
    home: &Utf8Path,
    bot: &Name,
) -> Result<Option<String>, LifecycleError> {
    let Some(shared) = store.home() else {
        return read_secret(home, bot);
    };
    match shared.bot_secret(bot.as_str())? {
        Some(secret) if secret.trim().len() < 32 => Err(LifecycleError::Secret {
            path: Utf8PathBuf::from(format!("{}: vak_bot_secrets/{bot}", store.describe())),
            reason: "is shorter than 32 characters; delete the row and run `vak gateway secret --store URL` again".to_owned(),
        }),
        Some(secret) => Ok(Some(secret.trim().to_owned())),
        // Not in the store yet (never imported): the node's own file, as
        // before the store held secrets.
        None => read_secret(home, bot),
    }
}

/// `vak gateway secret BOT [--store URL]`: [`ensure_secret`], or in `store`
/// when it holds the home side (one secret per bot for every node; the
/// first node to create it wins a race). Returns the secret and whether it
/// was created now.
pub fn ensure_bot_secret(
    store: &dyn Store,
    home: &Utf8Path,
    bot: &Name,
) -> Result<(String, bool), LifecycleError> {
    let Some(shared) = store.home() else {
        return ensure_secret(home, bot);
    };
    if shared.bot_secret(bot.as_str())?.is_some() {
        // Checked (length) the way every verification reads it.
        if let Some(secret) = bot_secret(store, home, bot)? {
            return Ok((secret, false));
        }
    }
    // A secret this home already has is the one its clients sign with:
    // keep it for every node rather than minting another.
    let secret = match read_secret(home, bot)? {
        Some(local) => local,
        None => fresh_secret().map_err(|reason| LifecycleError::Secret {
            path: Utf8PathBuf::from(format!("{}: vak_bot_secrets/{bot}", store.describe())),
            reason,
        })?,
    };
    let kept = shared.bot_secret_create(bot.as_str(), &secret)?;
    let created = kept == secret;
    Ok((kept, created))
}

fn fresh_secret() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no random bytes: {e}"))?;
    Ok(hex(&bytes))
}

/// `vak gateway secret BOT`: the bot's secret, created (64 hex characters
/// from the OS's random source, a new file of mode 0600 that is never
/// opened through an existing name) if absent. Returns it and whether it
/// was created now.
///
/// # Errors
///
/// [`LifecycleError::Secret`] naming the secret's path when it cannot be
/// read or made, including when a directory on the way to it is a symlink
/// leading out of the home (nothing is created there).
pub fn ensure_secret(home: &Utf8Path, bot: &Name) -> Result<(String, bool), LifecycleError> {
    if let Some(secret) = read_secret(home, bot)? {
        return Ok((secret, false));
    }
    let path = secret_path(home, bot);
    let fail = |reason: String| LifecycleError::Secret {
        path: path.clone(),
        reason,
    };
    // Checked before anything is created, and then opened as a handle the
    // file is created through: a `.vak`, `gateway` or `secrets` that is a
    // symlink leading out of the home gets nothing made where it leads.
    let dir = vak_core::files::create_parent_confined(&path, home).map_err(|error| match error {
        SaveError::OutsideRoot { leads_to, .. } => fail(format!(
            "was not created: its directory leads outside the home `{}`{} through a symlinked directory, and vak never creates a secret through one; nothing was created (replace the symlink with a real directory)",
            Escaped(home.as_str()),
            leads_to
                .map(|to| format!(" (to `{}`)", Escaped(to.as_str())))
                .unwrap_or_default()
        )),
        other => fail(format!("could not create its directory: {other}")),
    })?;
    // Through the handle (fchmod), never by path, which follows links.
    let _ = dir
        .as_file()
        .and_then(|handle| vak_core::files::set_permissions(&handle, 0o700));
    // The directories exist now: check them through the confined reader
    // before writing, as every verification reads the secret.
    if let Some(secret) = read_secret(home, bot)? {
        return Ok((secret, false));
    }
    let secret = fresh_secret().map_err(fail)?;
    // O_CREAT|O_EXCL|O_NOFOLLOW relative to the checked directory: never
    // follows or reuses a name.
    match dir.create_new(bot.as_str(), 0o600) {
        Ok(mut file) => {
            file.write_all(format!("{secret}\n").as_bytes())
                .and_then(|()| file.sync_all())
                .and_then(|()| dir.as_file()?.sync_all())
                .map_err(|e| fail(format!("could not write it: {e}")))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Another process created it in between, or something that is
            // not a regular file is in the way: read it the safe way.
            return read_secret(home, bot)?
                .map(|s| (s, false))
                .ok_or_else(|| fail("appeared and vanished while being created".to_owned()));
        }
        Err(e) => return Err(fail(format!("could not create it: {e}"))),
    }
    // Read back through the confined reader: a secrets directory that
    // leads outside the home is refused here.
    let back =
        read_secret(home, bot)?.ok_or_else(|| fail("vanished after it was created".to_owned()))?;
    Ok((back, true))
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The `v1=<hex>` signature of `body` at `timestamp` with `secret`.
pub fn sign(secret: &str, timestamp: &str, body: &[u8]) -> String {
    format!(
        "v1={}",
        hex(&mac(secret, timestamp, None, body).finalize().into_bytes())
    )
}

/// The `v2=<hex>` signature of `body` for `bot` and `chat` at `timestamp`
/// with `secret`: the one that names where the message goes.
pub fn sign_v2(secret: &str, timestamp: &str, bot: &str, chat: &str, body: &[u8]) -> String {
    format!(
        "v2={}",
        hex(&mac(secret, timestamp, Some((bot, chat)), body)
            .finalize()
            .into_bytes())
    )
}

/// The MAC of a `v1` request (`to` is `None`) or of a `v2` one, which
/// also covers the bot and the chat it is addressed to.
fn mac(secret: &str, timestamp: &str, to: Option<(&str, &str)>, body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes a key of any length, so the fallback is never taken.
    let mut mac = <Hmac<Sha256> as hmac::digest::KeyInit>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| <Hmac<Sha256> as hmac::digest::KeyInit>::new(&Default::default()));
    mac.update(if to.is_some() { b"v2:" } else { b"v1:" });
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    if let Some((bot, chat)) = to {
        // Names hold no `:` (letters, digits, `-`, `_`), so the fields
        // cannot run into each other.
        mac.update(bot.as_bytes());
        mac.update(b":");
        mac.update(chat.as_bytes());
        mac.update(b":");
    }
    mac.update(body);
    mac
}

/// Which signature formats a service accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Formats {
    /// `v2` only: the default.
    V2Only,
    /// `v2`, and `v1` too: `[gateway] accept_v1 = true` in the shared
    /// config, for senders not yet moved to `v2`.
    V2AndV1,
}

impl Formats {
    /// What the shared config of `home` (`$VAK_HOME/.vak/config.toml`,
    /// never a project's) says: [`Formats::V2AndV1`] only with `[gateway]
    /// accept_v1 = true`.
    ///
    /// # Errors
    ///
    /// [`LifecycleError::SharedConfig`] naming the file when it cannot be
    /// read, is not TOML, or `[gateway] accept_v1` is not a boolean.
    pub fn of_home(home: &Utf8Path) -> Result<Formats, LifecycleError> {
        let Some((path, table)) = crate::store::shared_config(home)? else {
            return Ok(Formats::V2Only);
        };
        let Some(setting) = table
            .get("gateway")
            .and_then(|gateway| gateway.get("accept_v1"))
        else {
            return Ok(Formats::V2Only);
        };
        match setting.as_bool() {
            Some(true) => Ok(Formats::V2AndV1),
            Some(false) => Ok(Formats::V2Only),
            None => Err(LifecycleError::SharedConfig {
                path,
                reason: "`[gateway] accept_v1` must be `true` or `false`".to_owned(),
            }),
        }
    }
}

/// Why a signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureRefusal {
    /// `X-Vak-Timestamp` or `X-Vak-Signature` is missing.
    Missing,
    /// The timestamp is not whole Unix seconds.
    BadTimestamp,
    /// The timestamp is more than [`REPLAY_WINDOW_SECS`] from now (or too
    /// far to fit in 64 bits).
    Stale,
    /// The signature is not `v2=<hex>` (or `v1=<hex>`) or does not match.
    Wrong,
    /// A `v1` signature, which this service does not accept.
    V1Refused,
}

impl SignatureRefusal {
    /// One sentence for the JSON error.
    pub fn message(self) -> &'static str {
        match self {
            SignatureRefusal::Missing => {
                "the request is not signed: send X-Vak-Timestamp and X-Vak-Signature"
            }
            SignatureRefusal::BadTimestamp => "X-Vak-Timestamp must be whole Unix seconds",
            SignatureRefusal::Stale => {
                "X-Vak-Timestamp is more than 300 s from the server's clock (a replay, or a clock to fix)"
            }
            SignatureRefusal::Wrong => {
                "X-Vak-Signature does not match: sign \"v2:\" + timestamp + \":\" + bot + \":\" + chat + \":\" + the raw body with the bot's secret"
            }
            SignatureRefusal::V1Refused => {
                "X-Vak-Signature is a v1 signature, which does not name the bot and chat, and this service accepts v2 only: sign \"v2:\" + timestamp + \":\" + bot + \":\" + chat + \":\" + the raw body (an operator can accept v1 with `[gateway] accept_v1 = true` in the shared config $VAK_HOME/.vak/config.toml)"
            }
        }
    }
}

/// Whether a request dated `at` is inside the window at `now`: at most
/// [`REPLAY_WINDOW_SECS`] away either way, both ends included (300 s away
/// is in, 301 s is out). The distance is taken without overflow whatever
/// the two times are.
pub(crate) fn within_window(at: i64, now: i64) -> bool {
    at.abs_diff(now) <= REPLAY_WINDOW_SECS.unsigned_abs()
}

/// A request whose signature matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The request's Unix time (its `X-Vak-Timestamp`).
    pub at: i64,
    /// The signature in its one canonical spelling (`v1=` and the MAC's
    /// bytes in lowercase hex): what a replay is recognised by. Hex decodes
    /// whatever its case (and `u8::from_str_radix` takes a `+` too), so the
    /// spelling as received would let one captured request be sent again
    /// under thousands of names.
    pub key: String,
}

/// Check a request's signature headers against `secret` at `now` (Unix
/// seconds), for a request addressed to `bot` and `chat` (what a `v2`
/// signature covers), accepting the `formats` given: a `v1` signature is
/// refused ([`SignatureRefusal::V1Refused`]) unless they include it. The
/// comparison is constant-time (`Mac::verify_slice`).
pub fn verify(
    secret: &str,
    formats: Formats,
    to: (&str, &str),
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<Verified, SignatureRefusal> {
    let (Some(timestamp), Some(signature)) = (timestamp, signature) else {
        return Err(SignatureRefusal::Missing);
    };
    let at = match timestamp.trim().parse::<i64>() {
        Ok(at) => at,
        // Whole seconds too far either way to fit: stale, like any time
        // past the window.
        Err(e)
            if matches!(
                e.kind(),
                IntErrorKind::PosOverflow | IntErrorKind::NegOverflow
            ) =>
        {
            return Err(SignatureRefusal::Stale);
        }
        Err(_) => return Err(SignatureRefusal::BadTimestamp),
    };
    if !within_window(at, now) {
        return Err(SignatureRefusal::Stale);
    }
    let signature = signature.trim();
    let (version, covered) = if let Some(rest) = signature.strip_prefix("v2=") {
        ("v2", Some((rest, to)))
    } else {
        ("v1", signature.strip_prefix("v1=").map(|rest| (rest, to)))
    };
    let (hex_part, to) = covered.ok_or(SignatureRefusal::Wrong)?;
    if version == "v1" && formats == Formats::V2Only {
        return Err(SignatureRefusal::V1Refused);
    }
    let given = unhex(hex_part).ok_or(SignatureRefusal::Wrong)?;
    let to = (version == "v2").then_some(to);
    mac(secret, timestamp.trim(), to, body)
        .verify_slice(&given)
        .map_err(|_| SignatureRefusal::Wrong)?;
    Ok(Verified {
        at,
        key: format!("{version}={}", hex(&given)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_signature_verifies_only_for_its_body_time_and_secret() {
        let body = br#"{"text":"hi"}"#;
        let sig = sign(SECRET, "1000", body);
        assert!(sig.starts_with("v1=") && sig.len() == 3 + 64);
        assert_eq!(
            verify(
                SECRET,
                Formats::V2AndV1,
                ("b", "c"),
                Some("1000"),
                Some(&sig),
                body,
                1100
            ),
            Ok(Verified {
                at: 1000,
                key: sig.clone()
            })
        );
        assert_eq!(
            verify(
                SECRET,
                Formats::V2AndV1,
                ("b", "c"),
                Some("1000"),
                Some(&sig),
                b"{}",
                1000
            ),
            Err(SignatureRefusal::Wrong)
        );
        assert_eq!(
            verify(
                "another secret of enough length!!",
                Formats::V2AndV1,
                ("b", "c"),
                Some("1000"),
                Some(&sig),
                body,
                1000
            ),
            Err(SignatureRefusal::Wrong)
        );
        assert_eq!(
            verify(
                SECRET,
                Formats::V2AndV1,
                ("b", "c"),
                Some("1001"),
                Some(&sig),
                body,
                1000
            ),
            Err(SignatureRefusal::Wrong)
        );
        assert_eq!(
            verify(
                SECRET,
                Formats::V2AndV1,
                ("b", "c"),
                Some("1000"),
                Some(&sig),
                body,
                1301
            ),
            Err(SignatureRefusal::Stale)
        );
        assert_eq!(
            verify(
                SECRET,
                Formats::V2AndV1,
                ("b", "c"),
                Some("1000"),
                Some(&sig),
                body,
                699
            ),
            Err(SignatureRefusal::Stale)
        );
        assert_eq!(
            verify(
                SECRET,
                Formats::V2AndV1,
                ("b", "c"),
                None,
                Some(&sig),
                body,
                1000
            ),
            Err(SignatureRefusal::Missing)
        );
        assert_eq!(
            verify(
                SECRET,
                Formats::V2AndV1,
                ("b", "c"),
                Some("soon"),
                Some(&sig),
                body,
                1000
            ),
            Err(SignatureRefusal::BadTimestamp)
        );
        assert_eq!(
            verify(
                SECRET,
                Formats::V2AndV1,
                ("b", "c"),
                Some("1000"),
                Some("v1=zz"),
                body,
                1000
            ),
            Err(SignatureRefusal::Wrong)
        );
        // Only when the service accepts v1.
        assert_eq!(
            verify(
                SECRET,
                Formats::V2Only,
                ("b", "c"),
                Some("1000"),
                Some(&sig),
                body,
                1000
            ),
            Err(SignatureRefusal::V1Refused)
        );
    }

    /// The window is inclusive: a request 300 s from the server's clock
    /// either way is in it, 301 s is stale. Times at the edges of `i64`
    /// (and past them) are stale, never wrapped into the window.
    #[test]
    fn the_window_is_exact_at_both_ends_and_never_overflows() {
        let body = br#"{"text":"hi"}"#;
        let check = |at: &str, now: i64| {
            let sig = sign_v2(SECRET, at, "b", "c", body);
            verify(
                SECRET,
                Formats::V2AndV1,
                ("b", "c"),
                Some(at),
                Some(&sig),
                body,
                now,
            )
            .map(|v| v.at)
        };
        for away in [0, 299, 300] {
            assert_eq!(check("10000", 10_000 + away), Ok(10_000), "{away} s after");
            assert_eq!(check("10000", 10_000 - away), Ok(10_000), "{away} s before");
        }
        assert_eq!(check("10000", 10_301), Err(SignatureRefusal::Stale));
        assert_eq!(check("10000", 9_699), Err(SignatureRefusal::Stale));
        let now = 1_700_000_000_i64;
        let edges = [
            i64::MIN.to_string(),
            (i64::MIN + 1).to_string(),
            i64::MAX.to_string(),
            (now - (1_i64 << 62)).to_string(),
            (now + i64::MIN).to_string(),
            (now.wrapping_sub(i64::MAX)).to_string(),
            u64::MAX.to_string(),
            "-18446744073709551615".to_owned(),
            "340282366920938463463374607431768211456".to_owned(),
        ];
        for at in &edges {
            assert_eq!(check(at, now), Err(SignatureRefusal::Stale), "{at}");
            for now in [i64::MIN, i64::MAX, 0] {
                let refused = check(at, now);
                // No panic, no wrap: only a time as near as the window is in.
                let near = at
                    .parse::<i128>()
                    .is_ok_and(|a| (a - i128::from(now)).abs() <= 300);
                assert_eq!(refused.is_ok(), near, "{at} at {now}: {refused:?}");
            }
        }
    }

    #[test]
    fn every_spelling_of_one_signature_has_one_key() {
        let body = br#"{"text":"hi"}"#;
        let sig = sign(SECRET, "1000", body);
        let hex = &sig[3..];
        let upper = format!("v1={}", hex.to_uppercase());
        let mixed: String = hex
            .chars()
            .enumerate()
            .map(|(i, c)| {
                if i % 3 == 0 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect();
        let mixed = format!("v1={mixed}");
        let mut spellings = vec![sig.clone(), upper, mixed, format!(" {sig} ")];
        // `u8::from_str_radix` takes "+f" for "0f".
        if let Some(at) = (0..hex.len()).step_by(2).find(|i| &hex[*i..=*i] == "0") {
            spellings.push(format!("v1={}+{}", &hex[..at], &hex[at + 1..]));
        }
        for spelling in &spellings {
            let verified = verify(
                SECRET,
                Formats::V2AndV1,
                ("b", "c"),
                Some("1000"),
                Some(spelling),
                body,
                1000,
            );
            assert_eq!(verified.map(|v| v.key), Ok(sig.clone()), "{spelling}");
        }
    }

    #[test]
    fn a_v2_signature_names_its_bot_and_chat() {
        let body = br#"{"text":"hi"}"#;
        let sig = sign_v2(SECRET, "1000", "helpdesk", "42", body);
        assert!(sig.starts_with("v2=") && sig.len() == 3 + 64);
        let verified = verify(
            SECRET,
            Formats::V2Only,
            ("helpdesk", "42"),
            Some("1000"),
            Some(&sig),
            body,
            1000,
        );
        assert_eq!(verified.map(|v| v.key), Ok(sig.clone()));
        for to in [("helpdesk", "43"), ("other", "42"), ("helpdesk4", "2")] {
            assert_eq!(
                verify(
                    SECRET,
                    Formats::V2AndV1,
                    to,
                    Some("1000"),
                    Some(&sig),
                    body,
                    1000
                ),
                Err(SignatureRefusal::Wrong),
                "{to:?}"
            );
        }
        // Not a v1 signature either, nor the other way round.
        let v1 = format!("v1={}", &sig[3..]);
        assert!(
            verify(
                SECRET,
                Formats::V2AndV1,
                ("helpdesk", "42"),
                Some("1000"),
                Some(&v1),
                body,
                1000
            )
            .is_err()
        );
        // printf 'v2:1700000000:helpdesk:42:{"text":"hi"}' | openssl dgst -sha256 -hmac 0123456789abcdef0123456789abcdef
        assert_eq!(
            sign_v2(SECRET, "1700000000", "helpdesk", "42", body),
            "v2=e0a9bbe17f9f0c03cd9bacbb962b6890e491fbbb65069c45256013acb18e0de4"
        );
    }

    #[test]
    fn a_known_vector() {
        // printf 'v1:1700000000:{"text":"hi"}' | openssl dgst -sha256 -hmac 0123456789abcdef0123456789abcdef
        assert_eq!(
            sign(SECRET, "1700000000", br#"{"text":"hi"}"#),
            "v1=ca67de5867a1efa6098256cfb754ea3ba95a479762af7ce78001a99e8f921ea7"
        );
    }

    /// A home whose `gateway` directory is a symlink leading out of it gets
    /// no `secrets` directory (nor secret) made through the link: refused,
    /// naming the secret's path, with nothing created where it leads.
    #[test]
    #[cfg(unix)]
    fn no_secret_directory_is_created_through_a_symlinked_gateway_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Utf8Path::from_path(dir.path()).expect("utf8");
        let outside = tempfile::tempdir().expect("outside");
        std::fs::create_dir_all(home.join(".vak")).expect("mkdir");
        std::os::unix::fs::symlink(outside.path(), home.join(".vak/gateway")).expect("symlink");
        let bot = Name::new(vak_core::prompts::NameKind::Bot, "helpdesk").expect("name");
        let refused = ensure_secret(home, &bot).expect_err("refused").to_string();
        assert!(
            refused.contains(secret_path(home, &bot).as_str()),
            "names the path: {refused}"
        );
        assert!(refused.contains("outside"), "says why: {refused}");
        assert!(
            std::fs::read_dir(outside.path())
                .expect("list")
                .next()
                .is_none(),
            "nothing was created through the link"
        );
    }

    #[test]
    fn secrets_are_created_once_mode_0600_and_never_through_a_symlink() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Utf8Path::from_path(dir.path()).expect("utf8");
        let bot = Name::new(vak_core::prompts::NameKind::Bot, "helpdesk").expect("name");
        let (first, created) = ensure_secret(home, &bot).expect("created");
        assert!(created);
        assert_eq!(first.len(), 64);
        let (again, created) = ensure_secret(home, &bot).expect("read");
        assert!(!created);
        assert_eq!(first, again);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(secret_path(home, &bot))
                .expect("meta")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
            let outside = tempfile::NamedTempFile::new().expect("tmp");
            std::fs::write(outside.path(), "x".repeat(64)).expect("write");
            let other = Name::new(vak_core::prompts::NameKind::Bot, "other").expect("name");
            std::os::unix::fs::symlink(outside.path(), secret_path(home, &other)).expect("symlink");
            assert!(
                ensure_secret(home, &other).is_err(),
                "a symlink out of the home is refused"
            );
        }
    }
}
