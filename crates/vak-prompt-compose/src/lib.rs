//! vak-prompt-compose (work in progress).
