//! vak-admin (work in progress).
