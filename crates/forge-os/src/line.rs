//! [`Line`]: the one type for a value from outside (a file, a folder name,
//! sysfs, the environment, a wheel, a server) in a row of a report. It is
//! escaped when it is made, so no value can break the row it sits in, in any
//! format: line breaks, carriage returns, ESC and every other control
//! character are shown escaped (`\n`, `\r`, `\u{1b}`), and a value that would
//! open a CI workflow command (`::` or `##[` at its start) gets a leading `\`.
//! A row's fields are `Line`s (`verdict::Check`, `findings::Finding`, the
//! evidence and host rows): a `String` made by `format!` from raw text becomes
//! one only through [`Line::new`] (or `.into()`, the same function), never raw.
//! Format-specific escaping (Markdown's `|`, a workflow command's `%`) is the
//! renderer's, on top. Must not decide what is shown.
use std::fmt;

/// One escaped value: holds no line break, no control character and no
/// leading workflow-command marker.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct Line(String);

impl Line {
    /// `value` escaped (see the module's text).
    pub fn new(value: impl AsRef<str>) -> Line {
        Line(escape(value.as_ref()))
    }

    /// The escaped text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The escaped text, owned.
    pub fn into_string(self) -> String {
        self.0
    }

    /// `self`, then `more` escaped, as one value.
    pub fn push(&mut self, more: impl AsRef<str>) {
        let more = escape_controls(more.as_ref());
        self.0.push_str(&more);
    }
}

/// The escaping [`Line::new`] applies.
pub fn escape(value: &str) -> String {
    let body = escape_controls(value);
    let lead = body.trim_start();
    if lead.starts_with("::") || lead.starts_with("##[") {
        format!("\\{body}")
    } else {
        body
    }
}

fn escape_controls(value: &str) -> String {
    if !value.chars().any(char::is_control) {
        return value.to_string();
    }
    value.chars().flat_map(|c| if c.is_control() { c.escape_debug().collect() } else { vec![c] }).collect()
}

impl std::ops::Deref for Line {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Line {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Line {
    /// Honours width and alignment (`{:<w$}`), as `str` does.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl From<String> for Line {
    fn from(s: String) -> Line {
        Line::new(s)
    }
}

impl From<&String> for Line {
    fn from(s: &String) -> Line {
        Line::new(s)
    }
}

impl From<&str> for Line {
    fn from(s: &str) -> Line {
        Line::new(s)
    }
}

impl From<Line> for String {
    fn from(l: Line) -> String {
        l.0
    }
}

impl PartialEq<str> for Line {
    fn eq(&self, o: &str) -> bool {
        self.0 == o
    }
}

impl PartialEq<&str> for Line {
    fn eq(&self, o: &&str) -> bool {
        self.0 == *o
    }
}

impl PartialEq<String> for Line {
    fn eq(&self, o: &String) -> bool {
        &self.0 == o
    }
}

impl<'de> serde::Deserialize<'de> for Line {
    /// Read back through [`Line::new`]: a document cannot hand in a raw value.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Line, D::Error> {
        String::deserialize(d).map(Line::new)
    }
}

/// Several rows the tool lays out itself (a ready-to-paste TOML table as a
/// fix), each a [`Line`]: the breaks between them are the tool's, never a
/// value's. Made from one `String` it is one escaped line, as [`Line::new`].
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lines(Vec<Line>);

impl Lines {
    /// The rows, in order.
    pub fn new(lines: impl IntoIterator<Item = Line>) -> Lines {
        Lines(lines.into_iter().collect())
    }

    /// The rows.
    pub fn lines(&self) -> &[Line] {
        &self.0
    }

    /// The rows joined by a line break and `indent` (for a block under a label);
    /// an empty row stays empty (no trailing blanks).
    pub fn indented(&self, indent: &str) -> String {
        let mut out = String::new();
        for (i, l) in self.0.iter().enumerate() {
            if i > 0 {
                out.push('\n');
                if !l.is_empty() {
                    out.push_str(indent);
                }
            }
            out.push_str(l);
        }
        out
    }
}

impl fmt::Display for Lines {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.indented(""))
    }
}

impl From<Line> for Lines {
    fn from(l: Line) -> Lines {
        Lines(vec![l])
    }
}

impl From<String> for Lines {
    fn from(s: String) -> Lines {
        Lines(vec![Line::new(s)])
    }
}

impl From<&str> for Lines {
    fn from(s: &str) -> Lines {
        Lines(vec![Line::new(s)])
    }
}

impl PartialEq<str> for Lines {
    fn eq(&self, o: &str) -> bool {
        self.to_string() == o
    }
}

impl serde::Serialize for Lines {
    /// One string, the rows joined by `\n` (as a JSON reader expects a fix).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for Lines {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Lines, D::Error> {
        String::deserialize(d).map(|s| Lines(s.split('\n').map(Line::new).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_cannot_break_its_row() {
        for (raw, shown) in [
            ("mlx5_0\n  pass  forged-rule  ok", "mlx5_0\\n  pass  forged-rule  ok"),
            ("100 Gb/sec\r  FAIL", "100 Gb/sec\\r  FAIL"),
            ("\u{1b}[2Kgone", "\\u{1b}[2Kgone"),
            ("::error::forged", "\\::error::forged"),
            ("  ##[error]forged", "\\  ##[error]forged"),
            ("tab\there", "tab\\there"),
            ("plain fe80::1", "plain fe80::1"),
        ] {
            let l = Line::new(raw);
            assert_eq!(l.as_str(), shown, "{raw:?}");
            assert!(!l.contains(['\n', '\r', '\u{1b}']));
        }
        let mut l = Line::new("a");
        l.push("\nb");
        assert_eq!(l, "a\\nb");
        assert_eq!(format!("[{:<5}]", Line::new("ab")), "[ab   ]", "padded as a str");
        let block = Lines::new(["add:", "[[variant]]", "name = \"x\\ny\""].map(Line::new));
        assert_eq!(block.indented("  "), "add:\n  [[variant]]\n  name = \"x\\ny\"");
        assert_eq!(Lines::from("a\nb").lines().len(), 1, "a String is one escaped row");
        let back: Line = serde_json::from_str("\"x\\ny\"").unwrap();
        assert_eq!(back, "x\\ny");
        assert_eq!(format!("[{:<6}]", Line::new("ab")), "[ab    ]", "a column pads a Line as a str");
    }
}
