use thiserror::Error;
use vak_prompt_blocks::Escaped;

/// Everything that can go wrong while choosing an encoding or a model.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BudgetError {
    /// The `model` key names a model the catalog does not know.
    #[error(
        "unknown model `{}` in config key `model`: set it to one of {known} (or leave it out for the default `{default}`)",
        Escaped(.name)
    )]
    UnknownModel {
        /// The model name as written in the config.
        name: String,
        /// The catalog's names, comma separated, so the message is actionable.
        known: String,
        /// The default model.
        default: &'static str,
    },
    /// An encoding name that is not one of the supported wire names.
    #[error("unknown token encoding `{}`: expected `o200k_base` or `cl100k_base`", Escaped(.0))]
    UnknownEncoding(String),
}
