//! `vak prompts set|edit|reset|check` (editing and budget).
