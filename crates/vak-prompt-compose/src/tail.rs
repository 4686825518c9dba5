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

/// [`rfc3339_utc`], appended to `out`: digits pushed one by one for the
/// years 0 to 9999, by the formatter past them.
fn push_rfc3339_utc(unix: i64, out: &mut String) {
    let (year, month, day) = civil_from_days(unix.div_euclid(86_400));
    let secs = unix.rem_euclid(86_400);
    let Ok(year @ 0..=9999) = u32::try_from(year) else {
        use std::fmt::Write;
        let _ = write!(
            out,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
            secs / 3600,
            secs % 3600 / 60,
            secs % 60
        );
        return;
    };
    let mut push = |n: u32, width: u32, after: char| {
        for place in (0..width).rev() {
            let digit = n / 10u32.pow(place) % 10;
            out.push(char::from(b'0' + digit as u8));
        }
        out.push(after);
    };
    let secs = secs as u32;
    push(year, 4, '-');
    push(month, 2, '-');
    push(day, 2, 'T');
    push(secs / 3600, 2, ':');
    push(secs % 3600 / 60, 2, ':');
    push(secs % 60, 2, 'Z');
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

    proptest::proptest! {
        /// The digits pushed one by one are the formatter's.
        #[test]
        fn dates_are_the_formatters(unix in -100_000_000_000i64..400_000_000_000) {
            let (year, month, day) = civil_from_days(unix.div_euclid(86_400));
            let secs = unix.rem_euclid(86_400);
            let formatted = format!(
                "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
                secs / 3600,
                secs % 3600 / 60,
                secs % 60
            );
            proptest::prop_assert_eq!(rfc3339_utc(unix), formatted);
        }
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
