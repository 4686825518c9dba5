//! vak-prompt-drift (work in progress).
