//! Reading a `config.toml` into a [`toml::Table`].
//!
//! Nearly every config is a few `key = value` lines under a few `[table]`
//! headers. Those are read here in one pass, straight into the table; the
//! `toml` crate builds a spanned document first and deserialises it, which
//! made parsing two 99-byte configs the largest single cost of a cold
//! resolution (about a tenth of it, with a dozen allocations of more than a
//! kilobyte each).
//!
//! The fast path is deliberately narrow, and the crate stays the authority:
//! anything outside the shape below (an escape, a quoted or dotted key, a
//! float, a date, an inline table, an array of tables, a multi-line value, a
//! key or table met twice, a stray carriage return) is handed to
//! `toml` whole, so every error, and every table the crate would build
//! differently, is the crate's. A property test holds the two to the same
//! table on every text the fast path accepts.
//!
//! The shape read here, line by line (lines end in LF or CRLF):
//!
//! - blank, or a `#` comment;
//! - `[a.b]`: bare keys joined by dots, each table defined once;
//! - `key = value`, a bare key, the value a basic string without
//!   backslashes, `true` or `false`, a decimal integer (no sign but `-`, no
//!   underscores, at most 18 digits), or a one-line array of those;
//!
//! each optionally followed by a comment.

use toml::{Table, Value};

/// How many `[table]` headers the fast path reads before it leaves the
/// text to the crate.
const MAX_PLAIN_TABLES: usize = 64;

/// `text` parsed as TOML: by the fast path when it has the common shape,
/// else by the `toml` crate.
///
/// # Errors
///
/// The `toml` crate's error when `text` is not valid TOML.
pub(crate) fn parse_table(text: &str) -> Result<Table, toml::de::Error> {
    match plain_table(text) {
        Some(table) => Ok(table),
        None => text.parse::<Table>(),
    }
}

/// `text` read as the common shape (see the module's documentation), or
/// `None` when it is anything else, valid TOML or not.
fn plain_table(text: &str) -> Option<Table> {
    let mut root = Table::new();
    // The headers defined so far, as written (no spaces inside, so each
    // table has one spelling), and where keys go now. They are searched
    // one by one, so a config of more than a few dozen tables (a hostile
    // one could hold thousands) is left to the crate, which stays linear.
    let mut defined: Vec<&str> = Vec::new();
    let mut current: Option<&str> = None;
    let mut pieces = vak_prompt_blocks::lines::split_lines(text).peekable();
    while let Some(piece) = pieces.next() {
        // A `\r` ends a line only before its `\n`.
        let line = match pieces.peek() {
            Some(_) => piece.strip_suffix('\r').unwrap_or(piece),
            None => piece,
        };
        if line.as_bytes().contains(&b'\r') {
            return None;
        }
        let line = skip_space(line);
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            plain_comment(comment)?;
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            let (path, rest) = header.split_once(']')?;
            let path = path.trim_matches([' ', '\t']);
            end_of_line(rest)?;
            if defined.len() == MAX_PLAIN_TABLES
                || path.split('.').any(|key| !is_bare_key(key))
                || defined.contains(&path)
            {
                return None;
            }
            define(&mut root, path)?;
            defined.push(path);
            current = Some(path);
            continue;
        }
        let key_end = line
            .bytes()
            .position(|b| !is_bare_byte(b))
            .unwrap_or(line.len());
        let (key, rest) = line.split_at(key_end);
        if key.is_empty() {
            return None;
        }
        let rest = skip_space(rest).strip_prefix('=')?;
        let (value, rest) = plain_value(skip_space(rest), true)?;
        end_of_line(rest)?;
        let table = match current {
            None => &mut root,
            Some(path) => table_at(&mut root, path)?,
        };
        if table.contains_key(key) {
            return None;
        }
        table.insert(key.to_owned(), value);
    }
    Some(root)
}

/// Make the table at the dotted `path` (whose keys are bare), creating it
/// and the tables above it; `None` when something other than a table is in
/// the way, or the table itself is a value already.
fn define(root: &mut Table, path: &str) -> Option<()> {
    let mut table = root;
    for key in path.split('.') {
        let entry = table
            .entry(key.to_owned())
            .or_insert_with(|| Value::Table(Table::new()));
        table = entry.as_table_mut()?;
    }
    Some(())
}

/// The table `path` names, which [`define`] made.
fn table_at<'t>(root: &'t mut Table, path: &str) -> Option<&'t mut Table> {
    let mut table = root;
    for key in path.split('.') {
        table = table.get_mut(key)?.as_table_mut()?;
    }
    Some(table)
}

/// One value at the start of `text`, and what follows it; arrays only when
/// `array` (one level deep).
fn plain_value(text: &str, array: bool) -> Option<(Value, &str)> {
    let bytes = text.as_bytes();
    match bytes.first()? {
        b'"' => {
            let body = &text[1..];
            let end = body.find('"')?;
            let string = &body[..end];
            // `"""` opens a multi-line string; a backslash an escape; a
            // control character (but tab) is not allowed in a string.
            if end == 0 && body.as_bytes().get(1) == Some(&b'"') {
                return None;
            }
            if string
                .bytes()
                .any(|b| b == b'\\' || (b < 0x20 && b != b'\t') || b == 0x7f)
            {
                return None;
            }
            Some((Value::String(string.to_owned()), &body[end + 1..]))
        }
        b't' | b'f' => {
            let (value, rest) = if let Some(rest) = text.strip_prefix("true") {
                (true, rest)
            } else {
                (false, text.strip_prefix("false")?)
            };
            ends_value(rest)?;
            Some((Value::Boolean(value), rest))
        }
        b'-' | b'0'..=b'9' => {
            let digits_from = usize::from(bytes[0] == b'-');
            let digits = bytes[digits_from..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            // No leading zero but `0` itself; `-0` is left to the crate.
            let first = bytes.get(digits_from).copied();
            if digits == 0
                || digits > 18
                || (first == Some(b'0') && (digits > 1 || digits_from == 1))
            {
                return None;
            }
            let (number, rest) = text.split_at(digits_from + digits);
            ends_value(rest)?;
            Some((Value::Integer(number.parse().ok()?), rest))
        }
        b'[' if array => {
            let mut items = Vec::new();
            let mut rest = skip_space(&text[1..]);
            loop {
                if let Some(after) = rest.strip_prefix(']') {
                    return Some((Value::Array(items), after));
                }
                let (item, after) = plain_value(rest, false)?;
                items.push(item);
                rest = skip_space(after);
                if let Some(after) = rest.strip_prefix(',') {
                    rest = skip_space(after);
                } else if !rest.starts_with(']') {
                    return None;
                }
            }
        }
        _ => None,
    }
}

/// Whether a bare value (a number, a boolean) ends where `rest` starts.
fn ends_value(rest: &str) -> Option<()> {
    match rest.as_bytes().first() {
        None | Some(b' ' | b'\t' | b',' | b']' | b'#') => Some(()),
        Some(_) => None,
    }
}

/// What may follow a header or a value on its line: spaces, then nothing
/// or a comment.
fn end_of_line(rest: &str) -> Option<()> {
    let rest = skip_space(rest);
    match rest.strip_prefix('#') {
        Some(comment) => plain_comment(comment),
        None if rest.is_empty() => Some(()),
        None => None,
    }
}

/// A comment's text holds no control character but tab.
fn plain_comment(comment: &str) -> Option<()> {
    (!comment
        .bytes()
        .any(|b| (b < 0x20 && b != b'\t') || b == 0x7f))
    .then_some(())
}

fn skip_space(text: &str) -> &str {
    text.trim_start_matches([' ', '\t'])
}

fn is_bare_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

fn is_bare_key(key: &str) -> bool {
    !key.is_empty() && key.bytes().all(is_bare_byte)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn crate_table(text: &str) -> Option<Table> {
        text.parse::<Table>().ok()
    }

    /// Each text the fast path reads gives what the crate gives.
    fn agrees(text: &str) -> Option<Table> {
        let plain = plain_table(text);
        if let Some(plain) = &plain {
            assert_eq!(Some(plain), crate_table(text).as_ref(), "{text:?}");
        }
        plain
    }

    #[test]
    fn a_config_of_the_common_shape_is_read_as_the_crate_reads_it() {
        let text = "# vak\nmodel = \"gpt-4o\"  # the model\r\n\n[permissions]\ndeny = [\"run_command:rm *\", \"x\",]\nallow = []\n[mcp.servers.docs]\ncommand = \"docs-mcp\"\nargs=[\"--port\",\"80\"]\n[prompts]\nmax_tokens = 12000\ninterop = [ \"AGENTS.md\" ]\nflag = false\nneg = -3\nzero = 0\n[mcp]\nnote = \"later super-table\"\n";
        let table = agrees(text).expect("read by the fast path");
        assert_eq!(table["prompts"]["max_tokens"].as_integer(), Some(12000));
        assert_eq!(parse_table(text).unwrap(), table);
        assert_eq!(agrees(""), Some(Table::new()));
    }

    /// Headers are compared one by one, so a config of many tables goes to
    /// the crate whole (the same table), and the fast path's work stays
    /// bounded however many a hostile config holds.
    #[test]
    fn a_config_of_many_tables_is_left_to_the_crate() {
        let tables =
            |n: usize| -> String { (0..n).map(|i| format!("[t{i}]\nk = {i}\n")).collect() };
        assert!(agrees(&tables(MAX_PLAIN_TABLES)).is_some());
        let many = tables(20_000);
        assert_eq!(plain_table(&many), None);
        let table = parse_table(&many).unwrap();
        assert_eq!(table.len(), 20_000);
        assert_eq!(table["t19999"]["k"].as_integer(), Some(19_999));
    }

    #[test]
    fn anything_else_is_left_to_the_crate() {
        for text in [
            "a = \"x\\ty\"\n",
            "\"quoted\" = 1\n",
            "a.b = 1\n",
            "a = 1.5\n",
            "a = 1979-05-27\n",
            "a = { b = 1 }\n",
            "[[a]]\nb = 1\n",
            "a = \"\"\"x\"\"\"\n",
            "a = [\n1]\n",
            "a = 1\na = 2\n",
            "[a]\n[a]\n",
            "a = 1\n[a]\n",
            "[a.b]\n[a]\nb = 1\n",
            "a = 1\r",
            "a = 1\rb = 2\n",
            "a = 01\n",
            "a = -0\n",
            "a = +1\n",
            "a = 1_000\n",
            "a = 1234567890123456789\n",
            "a = [[1]]\n",
            "a = truex\n",
            "a = 1 b\n",
            "[a b]\n",
            "[a.]\n",
            "\u{feff}a = 1\n",
            "a = 'literal'\n",
            "# bell \u{7}\n",
            "a = \"bell \u{7}\"\n",
        ] {
            assert_eq!(plain_table(text), None, "{text:?}");
        }
        assert!(parse_table("a = 1\na = 2\n").is_err());
        assert_eq!(parse_table("a = 1.5\n").unwrap()["a"].as_float(), Some(1.5));
    }

    fn piece() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "a",
            "b",
            "mcp",
            "servers",
            "x-y",
            "_1",
            "0",
            " ",
            "\t",
            "=",
            "\"",
            "\"s p\"",
            "'",
            "[",
            "]",
            ",",
            ".",
            "#",
            "# c",
            "\n",
            "\r\n",
            "\r",
            "true",
            "false",
            "-",
            "1",
            "42",
            "007",
            "1.5",
            "\\",
            "é",
            "{",
            "}",
            "\u{7}",
            "\u{85}",
            "\u{7f}",
            "[a]",
            "[a.b]",
            "a = 1",
            "b = \"t\"",
            "[[a]]",
            "= [1, \"x\", true]",
        ])
        .prop_map(str::to_owned)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Random texts of TOML's pieces, valid or not: whatever the fast
        /// path reads, the crate reads to the same table.
        #[test]
        fn the_fast_path_never_disagrees_with_the_crate(
            pieces in prop::collection::vec(piece(), 0..24)
        ) {
            agrees(&pieces.concat());
        }

        /// Generated configs of the common shape are all read by the fast
        /// path, as the crate reads them.
        #[test]
        fn common_configs_take_the_fast_path(
            root in prop::collection::btree_map("[a-z][a-z0-9_-]{0,6}", plain_scalar(), 0..4),
            tables in prop::collection::btree_map(
                "[a-z]{1,4}(\\.[a-z]{1,4}){0,2}",
                prop::collection::btree_map("[a-z][a-z0-9_-]{0,6}", plain_scalar(), 0..4),
                0..4,
            ),
        ) {
            let mut text = String::new();
            for (key, value) in &root {
                text.push_str(&format!("{key} = {value}\n"));
            }
            // A header that is a prefix of an earlier one redefines an
            // implicit table (allowed), and keys may clash with tables
            // (not allowed): both are checked against the crate.
            for (path, keys) in &tables {
                text.push_str(&format!("[{path}] # t\n"));
                for (key, value) in keys {
                    text.push_str(&format!("{key} = {value}\r\n"));
                }
            }
            let crate_says = crate_table(&text);
            let plain = agrees(&text);
            prop_assert_eq!(plain.is_some(), crate_says.is_some(), "{}", text);
        }
    }

    fn plain_scalar() -> impl Strategy<Value = String> {
        prop_oneof![
            "\"[a-zA-Z0-9 :*é#]{0,12}\"",
            any::<bool>().prop_map(|b| b.to_string()),
            (-99_999i64..99_999).prop_map(|n| n.to_string()),
            prop::collection::vec("\"[a-z ]{0,5}\"|[0-9]{1,3}", 0..3)
                .prop_map(|items| format!("[{}]", items.join(", "))),
        ]
    }
}
