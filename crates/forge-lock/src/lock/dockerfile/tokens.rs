//! Where a revision is written in a Dockerfile, and which of those places
//! the reader reads as DeepEP's pin: `pin set` moves exactly those byte
//! ranges (the pin's own tokens) and nothing else, and refuses a Dockerfile
//! that holds the revision anywhere else it cannot read (`lock check` reports
//! the same places). Must not read files or decide what to write.
//!
//! Each place the revision is written as a word of its own (not part of a
//! longer hex word such as an image digest, not after `sha256:`, not in a
//! comment) is swapped for a probe revision of its own, the text is read
//! again, and the place is the pin when the rules read its probe, whole, as a
//! DeepEP revision (an `ARG`/`ENV` value the DeepEP build uses, a
//! `DeepEP.git@<rev>` URL, `git checkout <rev>`). Anything else that holds it
//! (a command substitution, the revision joined with other text, a label, a
//! base image tag) is not understood.
use std::collections::BTreeSet;
use std::ops::Range;
use std::path::Path;

use forge_model::dockerfile::model::Model;
use forge_model::pins::Arch;

use super::rules::Checker;

/// One place the revision is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// Its bytes in the text.
    pub at: Range<usize>,
    /// 1-based line.
    pub line: usize,
    pub kind: PlaceKind,
    /// For a pin: the platform of the stage that reads it (`None`: no
    /// platform, or stages of several platforms read it).
    pub platform: Option<Arch>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlaceKind {
    /// The reader reads this token, whole, as DeepEP's revision: the pin.
    Pin,
    /// In a comment, or inside a longer word (an image digest, a longer hex
    /// string), or after `sha256:`: not the pin, left as it is.
    Other,
    /// A value the reader cannot read as the pin; why, in words.
    Unread(&'static str),
}

/// At most this many places are probed: a file that writes the revision more often (outside
/// comments and longer words) is not understood.
pub const MAX_PLACES: usize = 256;

/// Every place `rev` (a full sha) is written in `text`, each with what it is.
/// `None`: more than [`MAX_PLACES`] places (refused as not understood).
pub fn places(text: &str, rev: &str) -> Option<Vec<Place>> {
    let mut out: Vec<Place> = candidates(text, rev).collect();
    if out.iter().filter(|p| p.kind != PlaceKind::Other).count() > MAX_PLACES {
        return None;
    }
    if out.iter().all(|p| p.kind == PlaceKind::Other) {
        return Some(out); // nothing to probe: the text is not read again
    }
    let probes: Vec<String> = (0..out.len()).map(|i| probe(rev, i)).collect();
    let mut probed = String::with_capacity(text.len());
    let mut last = 0;
    for (p, probe) in out.iter().zip(&probes).filter(|(p, _)| p.kind != PlaceKind::Other) {
        probed.push_str(&text[last..p.at.start]);
        probed.push_str(probe);
        last = p.at.end;
    }
    probed.push_str(&text[last..]);
    let read = revisions(&probed);
    for (p, probe) in out.iter_mut().zip(&probes) {
        if p.kind == PlaceKind::Other {
            continue;
        }
        let platforms: BTreeSet<Option<Arch>> = read.iter().filter(|(v, _)| v == probe).map(|(_, a)| *a).collect();
        p.kind = if platforms.is_empty() { PlaceKind::Unread(why(text, p)) } else { PlaceKind::Pin };
        p.platform = match platforms.len() {
            1 => platforms.into_iter().next().flatten(),
            _ => None,
        };
    }
    Some(out)
}

/// The places of `rev` written as a word of their own (kind `Unread` until
/// probed), and those that are not (`Other`).
fn candidates<'t>(text: &'t str, rev: &'t str) -> impl Iterator<Item = Place> + 't {
    let lower = text.to_ascii_lowercase();
    let rev = rev.to_ascii_lowercase();
    let starts: Vec<usize> = lower.match_indices(&rev).map(|(i, _)| i).collect();
    starts.into_iter().map(move |start| {
        let at = start..start + rev.len();
        let line = text[..start].bytes().filter(|b| *b == b'\n').count() + 1;
        let kind = if in_comment(text, start) || inside_longer_word(text, &at) || after_digest(text, start) {
            PlaceKind::Other
        } else {
            PlaceKind::Unread("")
        };
        Place { at, line, kind, platform: None }
    })
}

/// The line holding `at` starts with `#` (a Dockerfile comment, or one in a heredoc's script).
fn in_comment(text: &str, at: usize) -> bool {
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    text[start..at].trim_start().starts_with('#')
}

/// A hex digit right before or after: part of a longer word (a 64-hex digest).
fn inside_longer_word(text: &str, at: &Range<usize>) -> bool {
    let b = text.as_bytes();
    (at.start > 0 && b[at.start - 1].is_ascii_hexdigit()) || b.get(at.end).is_some_and(|c| c.is_ascii_hexdigit())
}

/// Right after `sha1:`, `sha256:`, `sha512:` (a digest, never a git revision).
fn after_digest(text: &str, at: usize) -> bool {
    let before = &text[..at];
    let Some(word) = before.strip_suffix(':') else { return false };
    let algo: String = word.chars().rev().take_while(|c| c.is_ascii_alphanumeric()).collect();
    algo.chars().rev().collect::<String>().to_ascii_lowercase().starts_with("sha")
}

/// Why a place is not read as the pin, as the line holding it shows.
fn why(text: &str, p: &Place) -> &'static str {
    let start = text[..p.at.start].rfind('\n').map_or(0, |i| i + 1);
    let end = text[p.at.end..].find('\n').map_or(text.len(), |i| p.at.end + i);
    let line = &text[start..end];
    let b = text.as_bytes();
    let joined = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_alphanumeric() || b"$({`-_.+~:".contains(c));
    if line.contains("$(") || line.contains('`') {
        "a command substitution"
    } else if joined(p.at.start.checked_sub(1).and_then(|i| b.get(i))) || joined(b.get(p.at.end)) {
        "the revision joined with other text"
    } else {
        "a value deepep-forge does not read as DeepEP's revision"
    }
}

/// A full sha that stands in for place `i` of `rev` while probing (never a
/// real revision of anything; distinct per place).
fn probe(rev: &str, i: usize) -> String {
    let h = forge_os::input::sha256_hex(format!("deepep-forge probe {i} of {rev}").as_bytes());
    h[..40].to_string()
}

/// Every value the Dockerfile rules read as a DeepEP revision, with its stage's platform.
fn revisions(text: &str) -> Vec<(String, Option<Arch>)> {
    let model = Model::read(text);
    let revs = Default::default();
    let mut c = Checker::new(Path::new(""), None, &revs);
    for d in &model.defs {
        c.def(d, model.platform_of(d));
    }
    for r in &model.runs {
        c.run(r, model.stages[r.stage].platform);
    }
    c.found
}

/// The line of `text` holding byte `at`, trimmed and cut for a message.
pub fn line_text(text: &str, at: usize) -> String {
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    forge_os::input::excerpt(text[start..end].trim(), 160)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "29d31c095796f3c8ece47ee9cdcc167051bbeed9";

    fn kinds(text: &str) -> Vec<(usize, PlaceKind)> {
        places(text, OLD).unwrap().into_iter().map(|p| (p.line, p.kind)).collect()
    }

    #[test]
    fn the_pin_its_neighbours_and_what_is_not_understood() {
        let digest = format!("{OLD}0123456789abcdef0123456789abcdef01234567");
        let text = format!(
            "FROM ubuntu@sha256:{digest} AS base\n# was {OLD}\nARG DEEPEP_REV=\"{OLD}\"\nRUN pip install \"deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@{OLD}\"\nARG OTHER=\"{OLD}$(date)\"\nLABEL rev={OLD}\nARG X=sha1:{OLD}\n"
        );
        assert_eq!(
            kinds(&text),
            vec![
                (1, PlaceKind::Other),
                (2, PlaceKind::Other),
                (3, PlaceKind::Pin),
                (4, PlaceKind::Pin),
                (5, PlaceKind::Unread("a command substitution")),
                (6, PlaceKind::Unread("a value deepep-forge does not read as DeepEP's revision")),
                (7, PlaceKind::Other),
            ]
        );
        // A value that flows into the DeepEP checkout is the pin; one joined with text is not.
        let text = format!("FROM b\nARG REV={OLD}\nARG TAG=v{OLD}\nRUN git clone https://github.com/deepseek-ai/DeepEP && cd DeepEP && git checkout ${{REV}}\n");
        assert_eq!(
            kinds(&text),
            vec![(2, PlaceKind::Pin), (3, PlaceKind::Unread("the revision joined with other text"))]
        );
        let many = format!("FROM b\n{}", format!("LABEL a={OLD}\n").repeat(MAX_PLACES + 1));
        assert!(places(&many, OLD).is_none());
    }
}
