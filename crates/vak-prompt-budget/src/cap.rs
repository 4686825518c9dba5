//! The cap on the assembled prefix, as one pure function.
//!
//! | shared config | project config | project trusted? | effective cap |
//! |---|---|---|---|
//! | absent | absent | either | 8192 (the default) |
//! | `S` | absent | either | `S` |
//! | any | `P` | yes | `P` |
//! | any | `P` < base | no | `P` (lowering is restrictive, so allowed) |
//! | any | `P` > base | no | base, and a warning naming the project file |
//!
//! "base" is the shared value, or the default when the shared config is
//! silent. A value below 1 is not a usable cap: it is ignored with a warning,
//! wherever it came from, rather than refusing every save.

use std::fmt;

use camino::Utf8PathBuf;

/// The cap when no config sets `prompts.max_tokens`, on the assembled
/// prefix: room for a real repository's instruction files (AGENTS.md files
/// run 1,000 to 6,000 tokens; 8192 tokens is about 32 KiB of text).
pub const DEFAULT_MAX_TOKENS: usize = 8192;

/// The limit on the shipped seed alone (`cargo xtask check-seed`): the
/// built-in prompt leaves nearly all of [`DEFAULT_MAX_TOKENS`] to the user.
pub const SEED_MAX_TOKENS: usize = 1500;

/// The config key the cap is read from.
pub const MAX_TOKENS_KEY: &str = "prompts.max_tokens";

/// One `prompts.max_tokens` value and the config file that set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapSetting {
    /// The value as written. Signed, because TOML integers are, and a
    /// negative value deserves a warning rather than a wrap-around.
    pub value: i64,
    /// The config file the value was read from.
    pub file: Utf8PathBuf,
}

impl CapSetting {
    /// A value read from `file`.
    pub fn new(value: i64, file: impl Into<Utf8PathBuf>) -> Self {
        CapSetting {
            value,
            file: file.into(),
        }
    }
}

/// Which config decided the effective cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapSource {
    /// Nothing set it: [`DEFAULT_MAX_TOKENS`].
    Default,
    /// The shared config under `$VAK_HOME`.
    Shared,
    /// The project's config (a trusted project, or an untrusted one lowering).
    Project,
    /// The managed layer's config: a ceiling the others stayed above.
    Managed,
}

/// A config value that was not applied, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapWarning {
    /// An untrusted project asked for a larger cap than the user allows.
    UntrustedRaiseIgnored {
        /// The project config file.
        file: Utf8PathBuf,
        /// What it asked for.
        requested: i64,
        /// The cap that stays in force.
        kept: usize,
    },
    /// A value below 1, which would refuse every prompt.
    NotPositive {
        /// The config file.
        file: Utf8PathBuf,
        /// The value as written.
        value: i64,
    },
}

impl fmt::Display for CapWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CapWarning::UntrustedRaiseIgnored {
                file,
                requested,
                kept,
            } => write!(
                f,
                "`{MAX_TOKENS_KEY} = {requested}` in `{file}` is ignored: an untrusted project may lower the prompt token cap but not raise it; the cap stays {kept} (run `vak trust` on the project to let it raise the cap)"
            ),
            CapWarning::NotPositive { file, value } => write!(
                f,
                "`{MAX_TOKENS_KEY} = {value}` in `{file}` is ignored: the cap must be at least 1 token"
            ),
        }
    }
}

/// The cap in force, where it came from, and what was not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectiveCap {
    /// The cap on the assembled prefix, in tokens.
    pub tokens: usize,
    /// Which config decided it.
    pub source: CapSource,
    /// The file that set it, unless it is the default.
    pub file: Option<Utf8PathBuf>,
    /// Values that were read but not applied.
    pub warnings: Vec<CapWarning>,
}

/// The effective cap from the shared and project config values (either may
/// be absent) and whether the project is trusted. Pure: the caller reads the
/// files; the rule is the table in this module's docs.
pub fn effective_cap(
    shared: Option<&CapSetting>,
    project: Option<&CapSetting>,
    project_trusted: bool,
) -> EffectiveCap {
    let mut warnings = Vec::new();
    let mut usable = |setting: Option<&CapSetting>| -> Option<(usize, Utf8PathBuf)> {
        let setting = setting?;
        match usize::try_from(setting.value) {
            Ok(tokens) if tokens > 0 => Some((tokens, setting.file.clone())),
            _ => {
                warnings.push(CapWarning::NotPositive {
                    file: setting.file.clone(),
                    value: setting.value,
                });
                None
            }
        }
    };
    let base = usable(shared);
    let project = usable(project);
    let (mut tokens, mut source, mut file) = match base {
        Some((tokens, file)) => (tokens, CapSource::Shared, Some(file)),
        None => (DEFAULT_MAX_TOKENS, CapSource::Default, None),
    };
    if let Some((requested, project_file)) = project {
        if project_trusted || requested <= tokens {
            // Equal counts as a lowering: applying it changes nothing, and
            // reporting the project as the source is the honest answer.
            tokens = requested;
            source = CapSource::Project;
            file = Some(project_file);
        } else {
            tracing::warn!(file = %project_file, requested, kept = tokens, "untrusted project tried to raise the prompt token cap");
            warnings.push(CapWarning::UntrustedRaiseIgnored {
                file: project_file,
                requested: i64::try_from(requested).unwrap_or(i64::MAX),
                kept: tokens,
            });
        }
    }
    EffectiveCap {
        tokens,
        source,
        file,
        warnings,
    }
}

/// `cap` held under the managed layer's `prompts.max_tokens`: a ceiling
/// that no narrower config raises, whatever its trust. A cap already at or
/// below it is kept as it is (with its own source).
pub fn under_ceiling(cap: EffectiveCap, ceiling: Option<&CapSetting>) -> EffectiveCap {
    let Some(ceiling) = ceiling else { return cap };
    match usize::try_from(ceiling.value) {
        Ok(tokens) if tokens > 0 && tokens < cap.tokens => EffectiveCap {
            tokens,
            source: CapSource::Managed,
            file: Some(ceiling.file.clone()),
            warnings: cap.warnings,
        },
        _ => cap,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// No config, trusted or not, lifts the cap above the managed
        /// ceiling; a cap below it is left alone.
        #[test]
        fn the_managed_ceiling_is_never_exceeded(
            shared in proptest::option::of(1i64..20_000),
            project in proptest::option::of(1i64..20_000),
            trusted: bool,
            ceiling in 1i64..20_000,
        ) {
            let shared = shared.map(|v| CapSetting::new(v, SHARED));
            let project = project.map(|v| CapSetting::new(v, PROJECT));
            let plain = effective_cap(shared.as_ref(), project.as_ref(), trusted);
            let managed = CapSetting::new(ceiling, "/etc/vak/prompts/config.toml");
            let held = under_ceiling(plain.clone(), Some(&managed));
            prop_assert!(held.tokens <= usize::try_from(ceiling).unwrap_or(usize::MAX));
            prop_assert_eq!(held.tokens, plain.tokens.min(usize::try_from(ceiling).unwrap_or(usize::MAX)));
            if held.tokens < plain.tokens {
                prop_assert_eq!(held.source, CapSource::Managed);
            } else {
                prop_assert_eq!(held, plain);
            }
        }
    }

    const SHARED: &str = "/home/u/vak-home/.vak/config.toml";
    const PROJECT: &str = "/code/p/.vak/config.toml";

    fn s(v: i64) -> Option<CapSetting> {
        Some(CapSetting::new(v, SHARED))
    }
    fn p(v: i64) -> Option<CapSetting> {
        Some(CapSetting::new(v, PROJECT))
    }

    /// (shared, project, trusted, cap, source, number of warnings)
    type Row = (
        Option<CapSetting>,
        Option<CapSetting>,
        bool,
        usize,
        CapSource,
        usize,
    );

    #[test]
    fn rule_table() {
        use CapSource::*;
        let table: [Row; 14] = [
            (None, None, false, 8192, Default, 0),
            (None, None, true, 8192, Default, 0),
            (s(2000), None, false, 2000, Shared, 0),
            (s(800), None, true, 800, Shared, 0),
            (None, p(1000), false, 1000, Project, 0),
            (None, p(9000), false, 8192, Default, 1),
            (None, p(4000), true, 4000, Project, 0),
            (s(2000), p(1800), false, 1800, Project, 0),
            (s(2000), p(2500), false, 2000, Shared, 1),
            (s(2000), p(2500), true, 2500, Project, 0),
            (s(2000), p(2000), false, 2000, Project, 0),
            (s(0), None, false, 8192, Default, 1),
            (s(-5), p(9000), false, 8192, Default, 2),
            (s(1200), p(0), true, 1200, Shared, 1),
        ];
        for (i, (shared, project, trusted, cap, source, warnings)) in table.into_iter().enumerate()
        {
            let got = effective_cap(shared.as_ref(), project.as_ref(), trusted);
            assert_eq!(
                (got.tokens, got.source, got.warnings.len()),
                (cap, source, warnings),
                "row {i}: {got:?}"
            );
            let want_file = match source {
                Default => None,
                Shared => Some(SHARED),
                Project => Some(PROJECT),
                // `effective_cap` never answers it: only `under_ceiling`.
                Managed => unreachable!("row {i}"),
            };
            assert_eq!(
                got.file.as_deref().map(|f| f.as_str()),
                want_file,
                "row {i}"
            );
        }
    }

    #[test]
    fn raise_warning_names_the_project_file_and_the_kept_cap() {
        let got = effective_cap(s(2000).as_ref(), p(9000).as_ref(), false);
        let msg = got.warnings[0].to_string();
        assert!(msg.contains(PROJECT), "{msg}");
        assert!(msg.contains("prompts.max_tokens = 9000"), "{msg}");
        assert!(msg.contains("stays 2000"), "{msg}");
        assert!(msg.contains("untrusted"), "{msg}");
    }

    #[test]
    fn non_positive_warning_names_its_file() {
        let got = effective_cap(s(-1).as_ref(), None, true);
        assert_eq!(got.warnings.len(), 1);
        let msg = got.warnings[0].to_string();
        assert!(msg.contains(SHARED) && msg.contains("= -1"), "{msg}");
    }

    proptest! {
        #[test]
        fn untrusted_project_never_raises(shared in proptest::option::of(-10i64..100_000), project in proptest::option::of(-10i64..100_000)) {
            let shared = shared.map(|v| CapSetting::new(v, SHARED));
            let project = project.map(|v| CapSetting::new(v, PROJECT));
            let without = effective_cap(shared.as_ref(), None, false);
            let with = effective_cap(shared.as_ref(), project.as_ref(), false);
            prop_assert!(with.tokens <= without.tokens);
            prop_assert!(with.tokens >= 1);
            // And a trusted project gets exactly what it asked for when usable.
            let trusted = effective_cap(shared.as_ref(), project.as_ref(), true);
            if let Some(p) = project.as_ref().filter(|p| p.value > 0) {
                prop_assert_eq!(trusted.tokens as i64, p.value);
            } else {
                prop_assert_eq!(trusted.tokens, without.tokens);
            }
        }
    }
}
