//! vak-prompt-trust (work in progress).
