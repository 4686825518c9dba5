//! The request an agent would send: the prefix, the tail rendered for this
//! turn, and the message. No model is called.

use std::fmt::Write as _;

use serde::Serialize;
use vak_core::prompts::{TailContext, Turn};

/// The request an agent would send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Request {
    /// The session's frozen prefix (or the current one for a session frozen
    /// before prefixes were recorded).
    pub prefix: String,
    /// `frozen` or `current`.
    pub prefix_source: &'static str,
    /// The tail rendered for this turn.
    pub tail: String,
    /// The message, if one was given.
    pub message: Option<String>,
}

impl Request {
    /// The request as text, in three labelled parts (not yet escaped for a
    /// terminal: the caller does that).
    pub fn text(&self) -> String {
        let mut out = String::new();
        let source = match self.prefix_source {
            "frozen" => "frozen at session creation",
            _ => "current; the session froze no prefix",
        };
        let _ = writeln!(out, "--- prefix ({source}) ---");
        let _ = writeln!(out, "{}", self.prefix.trim_end());
        let _ = writeln!(out, "--- tail (rendered for this turn) ---");
        let _ = writeln!(out, "{}", self.tail.trim_end());
        if let Some(message) = &self.message {
            let _ = writeln!(out, "--- message ---");
            let _ = writeln!(out, "{message}");
        }
        out
    }
}

/// One line of at most `max` characters, for the tail and listings.
pub fn clip(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let mut cut: String = flat.chars().take(max).collect();
        cut.push('…');
        cut
    }
}

/// The tail for the next turn of a session with `turns` so far: the current
/// instant, the session's intent (its first message) and where the thread
/// stands. Rendered fresh every turn, never frozen.
pub fn render_tail_for(turns: &[&Turn], message: Option<&str>) -> String {
    render_tail_from(
        turns.first().copied(),
        turns.last().copied(),
        turns.len(),
        message,
    )
}

/// [`render_tail_for`] from the first and last of `count` turns.
pub fn render_tail_from(
    first: Option<&Turn>,
    last: Option<&Turn>,
    count: usize,
    message: Option<&str>,
) -> String {
    let intent = first
        .map(|t| t.message.as_str())
        .or(message)
        .filter(|m| !m.trim().is_empty())
        .map(|m| clip(m, 200));
    let thread = last.map(|last| {
        format!(
            "{} earlier turn{}; the last was: {}",
            count,
            if count == 1 { "" } else { "s" },
            clip(&last.message, 200)
        )
    });
    vak_core::prompts::render_tail(&TailContext {
        intent,
        thread,
        ..TailContext::now()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_flattens_and_cuts() {
        assert_eq!(clip("a\n b", 10), "a b");
        assert_eq!(clip("abcdef", 3), "abc…");
    }

    #[test]
    fn the_tail_names_the_first_message_as_intent() {
        let first = Turn::now("fix the build", "");
        let tail = render_tail_for(&[&first], Some("and now?"));
        assert!(tail.contains("fix the build"), "{tail}");
        assert!(tail.contains("1 earlier turn;"), "{tail}");
    }
}
