//! `vak session`, `vak exec`, `vak gateway deliver`, `vak audit list`.
