//! vak-core (work in progress).
