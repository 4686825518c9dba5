//! The per-turn tail: the temporal instant and epistemic stance, and the
//! session's intent, work contract and conversation thread.
//!
//! It is rendered fresh for every turn, is never user-editable, and sits
//! outside the drift fingerprint and, but for the scoped rules a turn adds
//! after it (budgeted all at once by the facade), outside the budget cap.

use std::time::{SystemTime, UNIX_EPOCH};

use vak_prompt_blocks::civil_from_days;

/// What the tail is rendered from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TailContext {
    /// The current instant, seconds since the Unix epoch.
    pub now_unix: i64,
    /// What the session is for, if known.
    pub intent: Option<String>,
    /// What was agreed to deliver, if anything.
    pub work_contract: Option<String>,
    /// A short summary of the conversation so far, if any.
    pub thread: Option<String>,
}

impl TailContext {
    /// A context for the current instant and nothing else.
    pub fn now() -> Self {
        let now_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        TailContext {
            now_unix,
            ..TailContext::default()
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` for a Unix timestamp (proleptic Gregorian, UTC).
pub fn rfc3339_utc(unix: i64) -> String {
    let mut out = String::with_capacity(20);
    push_rfc3339_utc(unix, &mut out);
    out
}

/// [`rfc3339_utc`], appended to `out`: formatted straight into the string
/// it belongs in, not into one of its own first.
fn push_rfc3339_utc(unix: i64, out: &mut String) {
    use std::fmt::Write;
    let (year, month, day) = civil_from_days(unix.div_euclid(86_400));
    let secs = unix.rem_euclid(86_400);
    // Writing to a `String` cannot fail.
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    );
}

const NOW_STANCE: &str = ". Your training data stops before this; treat later events as unknown unless a tool shows them, and say when you are unsure.";

/// Render the tail.
pub fn render_tail(context: &TailContext) -> String {
    let labelled = [
        ("Session intent", &context.intent),
        ("Work contract", &context.work_contract),
        ("Conversation so far", &context.thread),
    ];
    let extra: usize = labelled
        .iter()
        .filter_map(|(label, value)| value.as_ref().map(|v| label.len() + v.len() + 3))
        .sum();
    let mut tail = String::with_capacity(5 + 20 + NOW_STANCE.len() + extra);
    tail.push_str("Now: ");
    push_rfc3339_utc(context.now_unix, &mut tail);
    tail.push_str(NOW_STANCE);
    for (label, value) in labelled {
        if let Some(value) = value {
            tail.push('\n');
            tail.push_str(label);
            tail.push_str(": ");
            tail.push_str(value);
        }
    }
    tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(1_796_212_800), "2026-12-02T12:00:00Z");
        assert_eq!(rfc3339_utc(-1), "1969-12-31T23:59:59Z");
        assert_eq!(rfc3339_utc(253_402_300_799), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339_utc(253_402_300_800), "10000-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(-62_167_219_201), "-001-12-31T23:59:59Z");
    }

    #[test]
    fn tail_carries_intent() {
        let tail = render_tail(&TailContext {
            now_unix: 0,
            intent: Some("fix the tests".into()),
            ..TailContext::default()
        });
        assert!(tail.starts_with("Now: 1970-01-01T00:00:00Z."));
        assert!(tail.ends_with("Session intent: fix the tests"));
    }
}
