//! The pre-tokenizers of `o200k_base` and `cl100k_base`, hand-written so that
//! nothing is compiled at run time (compiling the patterns with `regex` alone
//! costs ~2 ms per process).
//!
//! Each function returns where the piece starting at `pos` ends, exactly as
//! the reference patterns match under leftmost-first alternation with greedy
//! quantifiers (the backtracking order is followed step by step; comments
//! quote the branch). Every position starts a match, so pieces tile the text.
//!
//! ```text
//! o200k:  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//!        |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//!        |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//! cl100k: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*
//!        |\s*[\r\n]+|\s+(?!\S)|\s+
//! ```

include!(concat!(env!("OUT_DIR"), "/classes.rs"));

/// The general-category group of a character, as the patterns tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// None of the others: punctuation, symbols, controls, unassigned.
    Other,
    /// `Lu`, `Lt`.
    Upper,
    /// `Ll`.
    Lower,
    /// `Lm`, `Lo`: in both of o200k's letter classes.
    OtherLetter,
    /// `M`: not a letter, but in both of o200k's letter classes.
    Mark,
    /// `N`.
    Number,
    /// `\s` (White_Space).
    Space,
}

fn class_of(c: char) -> Class {
    let c = u32::from(c);
    let found = RANGES
        .binary_search_by(|&(first, last, _)| {
            if last < c {
                std::cmp::Ordering::Less
            } else if first > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .ok()
        .map(|i| RANGES[i].2);
    match found {
        Some(1) => Class::Upper,
        Some(2) => Class::Lower,
        Some(3) => Class::OtherLetter,
        Some(4) => Class::Mark,
        Some(5) => Class::Number,
        Some(6) => Class::Space,
        _ => Class::Other,
    }
}

/// The classes of the ASCII characters, without a search.
static ASCII: [Class; 128] = {
    let mut table = [Class::Other; 128];
    let mut i = 0;
    while i < 128 {
        table[i] = match i as u8 {
            b'A'..=b'Z' => Class::Upper,
            b'a'..=b'z' => Class::Lower,
            b'0'..=b'9' => Class::Number,
            b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ' => Class::Space,
            _ => Class::Other,
        };
        i += 1;
    }
    table
};

/// A character and its class, with a table for ASCII.
#[derive(Clone, Copy)]
struct Ch {
    c: char,
    class: Class,
}

impl Ch {
    fn new(c: char) -> Self {
        let class = match ASCII.get(c as usize) {
            Some(&class) => class,
            None => class_of(c),
        };
        Ch { c, class }
    }
    fn letter(self) -> bool {
        matches!(self.class, Class::Upper | Class::Lower | Class::OtherLetter)
    }
    fn newline(self) -> bool {
        matches!(self.c, '\r' | '\n')
    }
    /// `[^\r\n\p{L}\p{N}]`
    fn prefix(self) -> bool {
        !self.newline() && !self.letter() && self.class != Class::Number
    }
    /// `[^\s\p{L}\p{N}]`
    fn punct(self) -> bool {
        matches!(self.class, Class::Other | Class::Mark)
    }
    /// `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`
    fn upperish(self) -> bool {
        matches!(self.class, Class::Upper | Class::OtherLetter | Class::Mark)
    }
    /// `[\p{Ll}\p{Lm}\p{Lo}\p{M}]`
    fn lowerish(self) -> bool {
        matches!(self.class, Class::Lower | Class::OtherLetter | Class::Mark)
    }
}

fn at(text: &str, pos: usize) -> Option<Ch> {
    text.get(pos..)?.chars().next().map(Ch::new)
}

/// The end of the longest run from `pos` of characters satisfying `f`, and
/// how many characters it holds (counting stops at `max`).
fn run(text: &str, pos: usize, max: usize, f: impl Fn(Ch) -> bool) -> (usize, usize) {
    let mut end = pos;
    let mut n = 0;
    for c in text[pos..].chars() {
        if n == max || !f(Ch::new(c)) {
            break;
        }
        end += c.len_utf8();
        n += 1;
    }
    (end, n)
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at `pos`: its end, if it matches. Case
/// folding is Unicode's: `ſ` (U+017F) folds to `s`.
fn contraction(text: &str, pos: usize) -> Option<usize> {
    let rest = text.get(pos..)?.strip_prefix('\'')?;
    let mut chars = rest.chars();
    let first = chars.next()?;
    let second = chars.next();
    let one = pos + 1 + first.len_utf8();
    match first {
        's' | 'S' | 'ſ' | 't' | 'T' | 'm' | 'M' | 'd' | 'D' => Some(one),
        'r' | 'R' | 'v' | 'V' if matches!(second, Some('e' | 'E')) => Some(one + 1),
        'l' | 'L' if matches!(second, Some('l' | 'L')) => Some(one + 1),
        _ => None,
    }
}

/// Where `[^\r\n\p{L}\p{N}]?` may leave the match, in the order tried.
fn prefix_options(first: Ch, pos: usize) -> impl Iterator<Item = usize> {
    let with = first.prefix().then_some(pos + first.c.len_utf8());
    with.into_iter().chain(std::iter::once(pos))
}

/// o200k's first branch after the prefix: `U*` greedy then `L+`, backing off
/// one `U` at a time until `L+` can start.
fn upper_star_lower_plus(text: &str, start: usize) -> Option<usize> {
    let (u_end, _) = run(text, start, usize::MAX, Ch::upperish);
    let mut k = u_end;
    loop {
        if at(text, k).is_some_and(Ch::lowerish) {
            return Some(run(text, k, usize::MAX, Ch::lowerish).0);
        }
        if k == start {
            return None;
        }
        k = text[start..k]
            .char_indices()
            .next_back()
            .map_or(start, |(i, _)| start + i);
    }
}

fn o200k_letters(text: &str, pos: usize, first: Ch) -> Option<usize> {
    // Branch 1: P? U* L+ C?
    for start in prefix_options(first, pos) {
        if let Some(end) = upper_star_lower_plus(text, start) {
            return Some(contraction(text, end).unwrap_or(end));
        }
    }
    // Branch 2: P? U+ L* C?
    for start in prefix_options(first, pos) {
        let (u_end, n) = run(text, start, usize::MAX, Ch::upperish);
        if n > 0 {
            let (end, _) = run(text, u_end, usize::MAX, Ch::lowerish);
            return Some(contraction(text, end).unwrap_or(end));
        }
    }
    None
}

/// The branches both patterns end with:
/// `\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n…]*|\s*[\r\n]+|\s+(?!\S)|\s+`, where
/// `slash` says whether the punctuation tail admits `/` (o200k) or not.
fn common_tail(text: &str, pos: usize, first: Ch, slash: bool) -> usize {
    // \p{N}{1,3}
    if first.class == Class::Number {
        return run(text, pos, 3, |c| c.class == Class::Number).0;
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n/]*`: with the space first, then without (a
    // space is not punctuation, so without it this only matches when `first`
    // is punctuation).
    let start = if first.c == ' ' { pos + 1 } else { pos };
    let (p_end, n) = run(text, start, usize::MAX, Ch::punct);
    if n > 0 {
        return run(text, p_end, usize::MAX, |c| {
            c.newline() || (slash && c.c == '/')
        })
        .0;
    }
    // Only whitespace is left (every other character matched above).
    let (ws_end, n) = run(text, pos, usize::MAX, |c| c.class == Class::Space);
    // \s*[\r\n]+: `\s*` backs off to the last newline of the run; `[\r\n]+`
    // then takes it (what follows it in the run is not a newline).
    if let Some((i, c)) = text[pos..ws_end]
        .char_indices()
        .rev()
        .find(|&(_, c)| matches!(c, '\r' | '\n'))
    {
        return pos + i + c.len_utf8();
    }
    // \s+(?!\S): the whole run at the end of the text, else all but its last
    // character when that leaves one; otherwise \s+.
    if ws_end == text.len() || n < 2 {
        return ws_end;
    }
    text[pos..ws_end]
        .char_indices()
        .next_back()
        .map_or(ws_end, |(i, _)| pos + i)
}

/// The ASCII shapes most pieces have, matched without classifying
/// characters: an optional ASCII prefix (`[^\r\n\p{L}\p{N}]`), then ASCII
/// letters, where `cased` says whether o200k's case split applies
/// (`[A-Z]*[a-z]+|[A-Z]+[a-z]*`) or cl100k's `[A-Za-z]+`. `None` whenever the
/// run touches a non-ASCII byte (a mark or a letter beyond ASCII could
/// continue it) or holds no letter: the general path decides those.
fn ascii_word(text: &str, pos: usize, cased: bool) -> Option<usize> {
    let bytes = text.as_bytes();
    let letter_at = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_alphabetic);
    let mut i = pos;
    let first = *bytes.get(i)?;
    if !first.is_ascii() {
        return None;
    }
    if !first.is_ascii_alphanumeric() && first != b'\r' && first != b'\n' {
        i += 1; // the prefix
    }
    let start = i;
    if cased {
        while bytes.get(i).is_some_and(u8::is_ascii_uppercase) {
            i += 1;
        }
        while bytes.get(i).is_some_and(u8::is_ascii_lowercase) {
            i += 1;
        }
    } else {
        while letter_at(i) {
            i += 1;
        }
    }
    // The loops follow the case split (`HTTPServer` is one piece, `AbC`
    // stops before `C`, which starts the next piece). Only an ASCII byte may
    // stop the run: a non-ASCII one could be a letter or mark continuing it.
    if i == start || bytes.get(i).is_some_and(|b| !b.is_ascii()) {
        return None;
    }
    Some(i)
}

/// The end of the `o200k_base` piece that starts at `pos` (`pos < text.len()`,
/// on a character boundary).
pub(crate) fn o200k_next(text: &str, pos: usize) -> usize {
    if let Some(end) = ascii_word(text, pos, true) {
        return contraction(text, end).unwrap_or(end);
    }
    let Some(first) = at(text, pos) else {
        return text.len();
    };
    if let Some(end) = o200k_letters(text, pos, first) {
        return end;
    }
    let end = common_tail(text, pos, first, true);
    if end > pos {
        end
    } else {
        pos + first.c.len_utf8()
    }
}

/// The end of the `cl100k_base` piece that starts at `pos`.
pub(crate) fn cl100k_next(text: &str, pos: usize) -> usize {
    let Some(first) = at(text, pos) else {
        return text.len();
    };
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if let Some(end) = contraction(text, pos) {
        return end;
    }
    if let Some(end) = ascii_word(text, pos, false) {
        return end;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    for start in prefix_options(first, pos) {
        let (end, n) = run(text, start, usize::MAX, Ch::letter);
        if n > 0 {
            return end;
        }
    }
    let end = common_tail(text, pos, first, false);
    if end > pos {
        end
    } else {
        pos + first.c.len_utf8()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(text: &str, next: fn(&str, usize) -> usize) -> Vec<&str> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < text.len() {
            let end = next(text, pos);
            out.push(&text[pos..end]);
            pos = end;
        }
        out
    }

    #[test]
    fn o200k_pieces() {
        assert_eq!(
            pieces(
                "Hello world's  HTTPServer\n\n  x 123456 ...//\n",
                o200k_next
            ),
            [
                "Hello",
                " world's",
                " ",
                " HTTPServer",
                "\n\n",
                " ",
                " x",
                " ",
                "123",
                "456",
                " ...//\n"
            ]
        );
        assert_eq!(pieces("a  ", o200k_next), ["a", "  "]);
        assert_eq!(pieces("\tfoo'S", o200k_next), ["\tfoo'S"]);
    }

    #[test]
    fn cl100k_pieces() {
        assert_eq!(
            pieces("'re Hello  world\r\n\r\n 12345!!\n", cl100k_next),
            [
                "'re", " Hello", " ", " world", "\r\n\r\n", " ", "123", "45", "!!\n"
            ]
        );
    }

    #[test]
    fn ascii_fast_path_is_the_table() {
        for c in (0u8..128).map(char::from) {
            assert_eq!(Ch::new(c).class, class_of(c), "{c:?}");
        }
    }

    #[test]
    fn classes_cover_non_ascii() {
        assert_eq!(Ch::new('é').class, Class::Lower);
        assert_eq!(Ch::new('É').class, Class::Upper);
        assert_eq!(Ch::new('请').class, Class::OtherLetter);
        assert_eq!(Ch::new('\u{301}').class, Class::Mark);
        assert_eq!(Ch::new('٣').class, Class::Number);
        assert_eq!(Ch::new('\u{3000}').class, Class::Space);
        assert_eq!(Ch::new('👍').class, Class::Other);
    }
}
