//! Splitting a text into lines with `memchr`.
//!
//! [`str::lines`] and `str::split('\n')` find each newline through a
//! general character searcher, about a hundred instructions a line before
//! a byte is looked at; a prompt's lines are short, and every text is
//! walked line by line several times on its way into the prefix (the
//! guardrail parser, containment, rendering). These give exactly what the
//! standard ones give, each newline found by `memchr`.

/// The pieces of `text` between `\n`s: exactly `text.split('\n')`.
pub fn split_lines(text: &str) -> SplitLines<'_> {
    SplitLines { rest: Some(text) }
}

/// The lines of `text`: exactly [`str::lines`] (a `\r` before a `\n` is
/// not part of the line, and a last `\n` ends the last line rather than
/// starting an empty one).
pub fn lines(text: &str) -> Lines<'_> {
    Lines { rest: text }
}

/// See [`split_lines`].
#[derive(Debug, Clone)]
pub struct SplitLines<'t> {
    rest: Option<&'t str>,
}

impl<'t> Iterator for SplitLines<'t> {
    type Item = &'t str;

    fn next(&mut self) -> Option<&'t str> {
        let rest = self.rest?;
        match memchr::memchr(b'\n', rest.as_bytes()) {
            Some(at) => {
                self.rest = rest.get(at + 1..);
                rest.get(..at)
            }
            None => {
                self.rest = None;
                Some(rest)
            }
        }
    }
}

/// See [`lines`].
#[derive(Debug, Clone)]
pub struct Lines<'t> {
    rest: &'t str,
}

impl<'t> Iterator for Lines<'t> {
    type Item = &'t str;

    fn next(&mut self) -> Option<&'t str> {
        if self.rest.is_empty() {
            return None;
        }
        let rest = self.rest;
        match memchr::memchr(b'\n', rest.as_bytes()) {
            Some(at) => {
                self.rest = rest.get(at + 1..).unwrap_or_default();
                let line = rest.get(..at).unwrap_or_default();
                Some(line.strip_suffix('\r').unwrap_or(line))
            }
            None => {
                self.rest = "";
                Some(rest)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_same_lines_as_the_standard_library(
            text in prop_oneof![any::<String>(), "[a\r\n ]{0,16}", "(a|\n|\r|\r\n|é){0,12}"]
        ) {
            prop_assert_eq!(lines(&text).collect::<Vec<_>>(), text.lines().collect::<Vec<_>>());
            prop_assert_eq!(
                split_lines(&text).collect::<Vec<_>>(),
                text.split('\n').collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn edges() {
        for text in [
            "", "\n", "\r", "\r\n", "a\r", "a\r\r\n", "\n\n", "a\nb", "a\nb\n",
        ] {
            assert_eq!(
                lines(text).collect::<Vec<_>>(),
                text.lines().collect::<Vec<_>>()
            );
            assert_eq!(
                split_lines(text).collect::<Vec<_>>(),
                text.split('\n').collect::<Vec<_>>()
            );
        }
    }
}
