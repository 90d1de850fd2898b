//! Wheel files: names (PEP 427, with PEP 825's variant label), RECORD, reading (`read`: the one place a wheel file is
//! opened, bounded), rewriting (`stamp`), comparing (`diff`). Owns the wheel
//! format; must not know about DeepEP's flags or topology.
pub mod diff;
pub mod metadata;
pub mod read;
pub mod record;
pub mod stamp;

pub use read::{limits, open, Wheel};

/// The parts of a wheel file name (PEP 427): `{dist}-{version}(-{build})?-{py}-{abi}-{plat}.whl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelName {
    pub dist: String,
    pub version: String,
    pub build: Option<String>,
    pub python: String,
    pub abi: String,
    pub platform: String,
    /// The PEP 825 variant label after the platform tag (`-h100.whl`).
    pub variant: Option<String>,
}

/// The most characters of a variant label (PEP 825).
pub const MAX_LABEL: usize = 16;

/// A PEP 825 variant label: 1 to 16 of `0-9 a-z . _`, not `null` (the null
/// variant is the label-less wheel), never a path (`.` or `..` alone).
pub fn is_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= MAX_LABEL
        && l != "null"
        && !l.chars().all(|c| c == '.')
        && l.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'.' || b == b'_')
}

/// `cp312` -> `3.12` (a CPython tag of major 3); None for any other tag.
fn cpython_minor(tag: &str) -> Option<String> {
    let d = tag.strip_prefix("cp3")?;
    (!d.is_empty() && d.len() <= 3 && d.bytes().all(|b| b.is_ascii_digit()))
        .then(|| format!("3.{}", d.trim_start_matches('0').parse::<u32>().unwrap_or(0)))
}

impl WheelName {
    /// The Python minor of a `cp3XY` tag (`cp312` -> `3.12`); None for any other tag.
    pub fn cpython_minor(&self) -> Option<String> {
        cpython_minor(&self.python)
    }
    pub fn parse(file_name: &str) -> Option<WheelName> {
        let stem = file_name.strip_suffix(".whl")?;
        let parts: Vec<&str> = stem.split('-').collect();
        // PEP 825: a build tag starts with a digit; a seventh part, or a sixth
        // after the platform, is the variant label.
        let digit = |p: &str| p.starts_with(|c: char| c.is_ascii_digit());
        let (dist, version, build, rest, variant) = match parts.len() {
            5 => (parts[0], parts[1], None, &parts[2..5], None),
            6 if digit(parts[2]) => (parts[0], parts[1], Some(parts[2].to_string()), &parts[3..6], None),
            6 => (parts[0], parts[1], None, &parts[2..5], Some(parts[5].to_string())),
            7 if digit(parts[2]) => {
                (parts[0], parts[1], Some(parts[2].to_string()), &parts[3..6], Some(parts[6].to_string()))
            }
            _ => return None,
        };
        if variant.as_deref().is_some_and(|l| !is_label(l)) {
            return None;
        }
        Some(WheelName {
            dist: dist.to_string(),
            version: version.to_string(),
            build,
            variant,
            python: rest[0].to_string(),
            abi: rest[1].to_string(),
            platform: rest[2].to_string(),
        })
    }
    /// `<dist>-<version>.dist-info`.
    pub fn dist_info(&self) -> String {
        format!("{}-{}.dist-info", self.dist, self.version)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpython_tags_name_their_minor() {
        assert_eq!(cpython_minor("cp312").as_deref(), Some("3.12"));
        assert_eq!(cpython_minor("cp310").as_deref(), Some("3.10"));
        assert_eq!(cpython_minor("cp39").as_deref(), Some("3.9"));
        assert_eq!(cpython_minor("py3"), None);
        assert_eq!(cpython_minor("cp3"), None);
        assert_eq!(cpython_minor("pp310"), None);
    }

    use super::*;
    #[test]
    fn parses_deepep_wheel_name() {
        let w = WheelName::parse("deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl").unwrap();
        assert_eq!(w.version, "1.2.1+17cfb81");
        assert_eq!(w.platform, "linux_x86_64");
        assert_eq!(w.dist_info(), "deep_ep-1.2.1+17cfb81.dist-info");
        assert!(WheelName::parse("nope.whl").is_none());
        let v = WheelName::parse("deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64-h100.whl").unwrap();
        assert_eq!((v.platform.as_str(), v.variant.as_deref(), v.build), ("linux_x86_64", Some("h100"), None));
        let b = WheelName::parse("deep_ep-1.2.1-1-cp312-cp312-linux_x86_64.whl").unwrap();
        assert_eq!((b.build.as_deref(), b.variant), (Some("1"), None));
        assert!(WheelName::parse("deep_ep-1.2.1-cp312-cp312-linux_x86_64-H/100.whl").is_none());
    }
}
