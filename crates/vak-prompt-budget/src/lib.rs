//! vak-prompt-budget (work in progress).
