use std::time::{SystemTime, UNIX_EPOCH};

use vak_prompt_blocks::civil_from_days;

/// The current instant as an RFC 3339 UTC timestamp with milliseconds,
/// e.g. `2026-12-02T14:06:43.123Z`. Ledger records carry this form so they
/// sort as strings and read without a date library.
pub fn now_rfc3339() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(now.as_secs(), now.subsec_millis())
}

fn rfc3339(secs: u64, millis: u32) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(i64::try_from(days).unwrap_or(i64::MAX));
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(rfc3339(1_796_219_203, 123), "2026-12-02T13:46:43.123Z");
        assert_eq!(rfc3339(4_107_542_399, 999), "2100-02-28T23:59:59.999Z");
    }

    #[test]
    fn now_is_well_formed() {
        let now = now_rfc3339();
        assert_eq!(now.len(), 24);
        assert!(now.ends_with('Z'));
    }
}
