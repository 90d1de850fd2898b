//! CUDA's binary compatibility: whether GPU code built for one target runs on
//! a GPU of a given compute capability, natively, through the driver's PTX JIT
//! (a slow first call), or not at all. The one place these rules live: the
//! pins checks, `cubin-arch`, the provenance check and the variant wheels'
//! properties ask here. Sources (docs/probe.md): the CUDA C++ Programming
//! Guide, "Binary Compatibility", "PTX Compatibility" and "Feature Set
//! Compiler Targets"; the NVCC documentation on `sm_XYa` / `sm_XYf` (family
//! targets from CUDA 12.9).
//! - a plain `sm_XY` cubin runs on X.Z for every Z >= Y (same major);
//! - an arch-specific `sm_XYa` cubin runs on X.Y only;
//! - a family-specific `sm_XYf` cubin runs on X.Z for Z >= Y (the family);
//! - plain `compute_XY` PTX is compiled by the driver for any X'.Z' >= X.Y;
//!   `compute_XYa` PTX only for X.Y, `compute_XYf` PTX only within the family.
//!
//! Must not read binaries or files.
use std::fmt;

use serde::Serialize;

/// A GPU's compute capability (`10.3` for B300/GB300).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Cc {
    pub major: u32,
    pub minor: u32,
}

impl Cc {
    pub const fn new(major: u32, minor: u32) -> Cc {
        Cc { major, minor }
    }
    /// From the SM number fatbins and `sm_XY` use (90 is 9.0, 103 is 10.3).
    pub const fn from_sm(sm: u32) -> Cc {
        Cc { major: sm / 10, minor: sm % 10 }
    }
    /// The SM number (103).
    pub const fn sm(self) -> u32 {
        self.major * 10 + self.minor
    }
}

impl fmt::Display for Cc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Which form of GPU code: a cubin (SASS for one architecture) or PTX (compiled by the driver).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Code {
    Cubin,
    Ptx,
}

/// How a target's code meets a GPU, worst first (so `max` is the best of several).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runs {
    /// The GPU cannot run it.
    No,
    /// The driver compiles PTX for the GPU at the first call (slow; and the
    /// compiled code lacks what an `a`/`f` build would have used).
    Jit,
    /// A cubin the GPU runs as it is.
    Native,
}

/// One compile target: `sm_90`, `sm_100a`, `sm_100f` (with `code` whether the
/// cubin or the PTX of `compute_...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Target {
    pub cc: Cc,
    /// `a` (arch-specific) or `f` (family-specific).
    pub suffix: Option<char>,
    pub code: Code,
}

impl Target {
    /// `sm_100a` (a cubin) or `compute_100a` (PTX).
    pub fn name(&self) -> String {
        let s = self.suffix.map(String::from).unwrap_or_default();
        match self.code {
            Code::Cubin => format!("sm_{}{s}", self.cc.sm()),
            Code::Ptx => format!("compute_{}{s}", self.cc.sm()),
        }
    }
}

/// Whether code for `t` runs on a GPU of compute capability `gpu`.
pub fn runs(t: Target, gpu: Cc) -> Runs {
    let same_major_newer = gpu.major == t.cc.major && gpu.minor >= t.cc.minor;
    match (t.code, t.suffix) {
        (Code::Cubin, Some('a')) if gpu == t.cc => Runs::Native,
        (Code::Cubin, Some('a')) => Runs::No,
        (Code::Cubin, _) if same_major_newer => Runs::Native,
        (Code::Cubin, _) => Runs::No,
        (Code::Ptx, Some('a')) if gpu == t.cc => Runs::Jit,
        (Code::Ptx, Some(_)) if t.suffix == Some('f') && same_major_newer => Runs::Jit,
        (Code::Ptx, Some(_)) => Runs::No,
        (Code::Ptx, None) if gpu >= t.cc => Runs::Jit,
        (Code::Ptx, None) => Runs::No,
    }
}

/// The best of several targets on one GPU, with the target that gives it.
pub fn best(targets: impl IntoIterator<Item = Target>, gpu: Cc) -> (Runs, Option<Target>) {
    targets.into_iter().map(|t| (runs(t, gpu), Some(t))).max_by_key(|(r, _)| *r).unwrap_or((Runs::No, None))
}

/// What an arch list could add to run natively on `gpu`, as pins.toml spells
/// entries: `10.3 or 10.3a`, and `or use 10.0f` when the list has an older
/// entry of the same family (family targets exist from Blackwell, major 10).
pub fn would_serve(gpu: Cc, family_base: Option<Cc>) -> String {
    let mut s = format!("add {gpu} or {gpu}a");
    if let Some(b) = family_base.filter(|b| b.major == gpu.major && b.minor <= gpu.minor && gpu.major >= 10) {
        s.push_str(&format!(", or use {b}f"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cubin(sm: u32, suffix: Option<char>) -> Target {
        Target { cc: Cc::from_sm(sm), suffix, code: Code::Cubin }
    }
    fn ptx(sm: u32, suffix: Option<char>) -> Target {
        Target { cc: Cc::from_sm(sm), suffix, code: Code::Ptx }
    }

    /// The table docs/pins.md prints: each target on H100 (9.0), B200 (10.0), B300 (10.3), RTX PRO (12.0).
    #[test]
    fn the_compatibility_table() {
        use Runs::*;
        let gpus = [Cc::new(9, 0), Cc::new(10, 0), Cc::new(10, 3), Cc::new(12, 0)];
        let rows: [(Target, [Runs; 4]); 12] = [
            (cubin(90, None), [Native, No, No, No]),
            (cubin(90, Some('a')), [Native, No, No, No]),
            (cubin(100, None), [No, Native, Native, No]),
            (cubin(100, Some('a')), [No, Native, No, No]),
            (cubin(100, Some('f')), [No, Native, Native, No]),
            (cubin(103, None), [No, No, Native, No]),
            (cubin(103, Some('a')), [No, No, Native, No]),
            (cubin(120, Some('f')), [No, No, No, Native]),
            (ptx(90, None), [Jit, Jit, Jit, Jit]),
            (ptx(90, Some('a')), [Jit, No, No, No]),
            (ptx(100, Some('f')), [No, Jit, Jit, No]),
            (ptx(100, Some('a')), [No, Jit, No, No]),
        ];
        for (t, want) in rows {
            let got: Vec<Runs> = gpus.iter().map(|g| runs(t, *g)).collect();
            assert_eq!(got, want, "{}", t.name());
        }
    }

    /// docs/pins.md's table says what this module decides: every entry it names, per GPU row.
    #[test]
    fn the_docs_table_is_what_runs_decides() {
        let page = include_str!("../../../docs/pins.md");
        let mut rows = 0;
        for line in page.lines().filter(|l| l.starts_with("| ") && l.contains(") | ")) {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            let cc = cells[0].rsplit('(').next().and_then(|c| c.strip_suffix(')')).and_then(|c| c.split_once('.'));
            let Some(gpu) = cc.and_then(|(a, b)| Some(Cc::new(a.parse().ok()?, b.parse().ok()?))) else { continue };
            for (cell, want) in cells[1..].iter().zip([Runs::Native, Runs::Jit, Runs::No]) {
                for entry in cell.split('`').skip(1).step_by(2) {
                    let Ok(list) = entry.parse::<crate::pins::ArchList>() else { continue };
                    assert_eq!(list.on(gpu), want, "docs/pins.md: `{entry}` on {gpu}");
                }
            }
            rows += 1;
        }
        assert_eq!(rows, 3, "the H100, B200 and B300 rows");
    }

    #[test]
    fn best_prefers_native_and_names_the_target() {
        let (r, t) = best([ptx(90, None), cubin(103, None)], Cc::new(10, 3));
        assert_eq!((r, t.map(|t| t.name())), (Runs::Native, Some("sm_103".into())));
        assert_eq!(best([ptx(90, None)], Cc::new(10, 0)).0, Runs::Jit);
        assert_eq!(best([], Cc::new(10, 0)), (Runs::No, None));
    }

    #[test]
    fn would_serve_names_the_family_only_where_one_exists() {
        assert_eq!(would_serve(Cc::new(10, 3), Some(Cc::new(10, 0))), "add 10.3 or 10.3a, or use 10.0f");
        assert_eq!(would_serve(Cc::new(9, 0), None), "add 9.0 or 9.0a");
        assert_eq!(would_serve(Cc::new(10, 0), Some(Cc::new(9, 0))), "add 10.0 or 10.0a");
    }
}
