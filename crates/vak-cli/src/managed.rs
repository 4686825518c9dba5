//! `vak managed …`: the administrator's tools for the managed layer
//! (`/etc/vak/prompts/`): make a signing key, sign a file, verify the
//! layer, and forget the keys this home pinned. vak writes nothing under the
//! managed directory: `sign` prints the signature for the administrator to
//! put in `<file>.sig`.

use camino::Utf8PathBuf;
use clap::{Args, Subcommand};
use serde::Serialize;
use vak_core::prompts::{
    Escaped, Verification, generate_managed_key, sign_managed_file, unpin_managed, verify_managed,
};

use crate::selectors::{Format, HomeArg};
use crate::{CliError, out};

/// `vak managed …`
#[derive(Debug, Clone, Subcommand)]
pub(crate) enum ManagedCommand {
    /// Check every file of the managed layer (mode, owner, signature, the
    /// home's pinned keys); non-zero when any is refused.
    Verify(VerifyArgs),
    /// Print the detached signature of FILE by the key in --key, for
    /// FILE.sig (base64 of the 64-byte ed25519 signature).
    Sign(SignArgs),
    /// Make a signing key in a new file (base64 of a 32-byte ed25519 seed,
    /// mode 0600) and print its public key for `managed_keys`.
    Keygen(KeygenArgs),
    /// Forget the managed keys this home pinned, after the administrator
    /// changed them on purpose.
    Unpin(UnpinArgs),
}

/// `vak managed verify`.
#[derive(Debug, Clone, Args)]
pub(crate) struct VerifyArgs {
    #[command(flatten)]
    home: HomeArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// `vak managed sign`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SignArgs {
    /// The signing-key file: one line, the base64 of a 32-byte ed25519 seed.
    #[arg(long, value_name = "FILE")]
    key: Utf8PathBuf,
    /// The file to sign.
    #[arg(value_name = "PATH")]
    path: Utf8PathBuf,
}

/// `vak managed keygen`.
#[derive(Debug, Clone, Args)]
pub(crate) struct KeygenArgs {
    /// Where to write the new key; never overwritten.
    #[arg(long, value_name = "FILE")]
    out: Utf8PathBuf,
}

/// `vak managed unpin`.
#[derive(Debug, Clone, Args)]
pub(crate) struct UnpinArgs {
    #[command(flatten)]
    home: HomeArg,
}

/// `vak managed …`
pub(crate) fn managed(command: &ManagedCommand) -> Result<(), CliError> {
    match command {
        ManagedCommand::Verify(args) => verify(args),
        ManagedCommand::Sign(args) => out::println(&sign_managed_file(&args.key, &args.path)?),
        ManagedCommand::Keygen(args) => {
            let public = generate_managed_key(&args.out)?;
            out::say(&format!(
                "wrote the signing key `{}` (keep it off the machines it signs for); its public key, for `managed_keys`:",
                Escaped(args.out.as_str())
            ));
            out::println(&public)
        }
        ManagedCommand::Unpin(args) => {
            let home = args.home.dir()?;
            let forgotten = unpin_managed(&home)?;
            if forgotten.is_empty() {
                out::say("no managed keys were pinned in this home");
            } else {
                out::say(&format!(
                    "forgot {} pinned managed key(s); the next resolution pins the keys the managed layer lists then",
                    forgotten.len()
                ));
            }
            Ok(())
        }
    }
}

#[derive(Serialize)]
struct FileJson<'a> {
    path: &'a str,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    signed_by: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refused: Option<String>,
}

#[derive(Serialize)]
struct VerifyJson<'a> {
    dir: &'a str,
    keys: Option<&'a [String]>,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    layer: Option<String>,
    files: Vec<FileJson<'a>>,
}

fn verify(args: &VerifyArgs) -> Result<(), CliError> {
    let home = args.home.dir()?;
    let verification = verify_managed(&home)?;
    match args.format {
        Format::Json => out::print_json(&verify_json(&verification))?,
        Format::Text => out::print(&verify_text(&verification))?,
    }
    if verification.refused() {
        return Err(CliError::Failed(format!(
            "the managed layer `{}` is refused: no session starts on it until every file above is OK",
            Escaped(verification.dir.as_str())
        )));
    }
    Ok(())
}

fn verify_json(v: &Verification) -> VerifyJson<'_> {
    VerifyJson {
        dir: v.dir.as_str(),
        keys: v.keys.as_deref(),
        ok: !v.refused(),
        layer: v.layer.as_ref().map(ToString::to_string),
        files: v
            .files
            .iter()
            .map(|f| FileJson {
                path: f.path.as_str(),
                ok: f.outcome.is_ok(),
                signed_by: f.outcome.as_ref().ok().and_then(|s| s.as_deref()),
                refused: f.outcome.as_ref().err().map(ToString::to_string),
            })
            .collect(),
    }
}

/// One line per file, `OK` or `refused`, every path escaped.
fn verify_text(v: &Verification) -> String {
    let mut text = format!("managed layer {}\n", Escaped(v.dir.as_str()));
    match v.keys.as_deref() {
        None => text.push_str("keys: unknown (the config that lists them is refused)\n"),
        Some([]) => text.push_str("keys: none (signatures are not required)\n"),
        Some(keys) => {
            for key in keys {
                text.push_str(&format!("key: {}\n", Escaped(key)));
            }
        }
    }
    if let Some(error) = &v.layer {
        text.push_str(&format!("refused  {}\n", Escaped(&error.to_string())));
    }
    for file in &v.files {
        match &file.outcome {
            Ok(Some(key)) => text.push_str(&format!(
                "OK       {}  signed by {}\n",
                Escaped(file.path.as_str()),
                Escaped(key)
            )),
            Ok(None) => text.push_str(&format!("OK       {}\n", Escaped(file.path.as_str()))),
            // The error names the file itself.
            Err(error) => text.push_str(&format!("refused  {}\n", Escaped(&error.to_string()))),
        }
    }
    text
}
