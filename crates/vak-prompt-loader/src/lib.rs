//! vak-prompt-loader (work in progress).
