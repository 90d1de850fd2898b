//! (Top level so the lock graph and `builder` can use it without importing `lock`.)
//! Per-architecture marker evaluation: `platform_machine` and
//! `sys_platform == 'linux'` fixed, extras, groups and `python_version` free.
//! A requirement counts for an architecture when SOME choice of the free
//! variables makes its marker true. pep508_rs keeps markers as canonical
//! decision diagrams, so "satisfiable" is `(marker ∧ arch ∧ linux ∧ allowed) ≠ FALSE`
//! computed exactly over every variable at once (no enumeration).
use std::str::FromStr;

use pep508_rs::MarkerTree;

use crate::pins::Arch;
use forge_os::error::Failure;

/// Parse a PEP 508 marker from a file. pep508_rs 0.9 panics slicing a marker
/// that holds non-ASCII text (found by `fuzz/` lockfiles: a U+FEFF inside
/// `or`); PEP 508 names and the platform values markers compare are ASCII, so
/// anything else is refused before the parser sees it.
pub fn parse(s: &str) -> Result<MarkerTree, Failure> {
    if !s.is_ascii() {
        return Err(Failure::usage(format!(
            "`{}` is not ASCII (PEP 508 markers are)",
            forge_os::input::excerpt(s, 60)
        )));
    }
    MarkerTree::from_str(s).map_err(|e| Failure::usage(e.to_string()))
}

/// The environment of one architecture as a marker: `platform_machine == A and sys_platform == 'linux'`.
pub fn arch_env(arch: Arch) -> MarkerTree {
    MarkerTree::from_str(&format!("platform_machine == '{arch}' and sys_platform == 'linux'"))
        .expect("static marker parses")
}

/// Architectures for which `marker`, restricted by `allowed` (e.g. uv's
/// conflicting-extras exclusions), can be true.
///
/// `is_false` on pep508_rs's diagrams is exact for the variables lock files
/// use (platform_machine, sys_platform, extras, python_version); where it
/// could not prove a contradiction it answers "could be true", so an
/// architecture is never dropped wrongly.
pub fn archs(marker: &MarkerTree, allowed: &MarkerTree) -> Vec<Arch> {
    Arch::ALL
        .into_iter()
        .filter(|a| {
            let mut m = marker.clone();
            m.and(allowed.clone());
            m.and(arch_env(*a));
            !m.is_false()
        })
        .collect()
}

/// uv.lock's `conflicts`: sets of extras/groups that can never be active
/// together. uv writes markers over encoded names (`extra-7-nemo-rl-vllm`,
/// `group-7-nemo-rl-dev`) and leaves impossible combinations unsimplified, so
/// evaluation must exclude them. Returns the marker "no conflicting set is
/// fully active".
pub fn conflicts_allowed(sets: &[Vec<(String, ConflictItem)>]) -> MarkerTree {
    let mut allowed = MarkerTree::TRUE;
    for set in sets {
        if set.len() < 2 {
            continue;
        }
        let all = set
            .iter()
            .map(|(package, item)| {
                let (kind, name) = match item {
                    ConflictItem::Extra(e) => ("extra", e),
                    ConflictItem::Group(g) => ("group", g),
                };
                format!("extra == '{kind}-{}-{package}-{name}'", package.len())
            })
            .collect::<Vec<_>>()
            .join(" and ");
        match parse(&all) {
            Ok(m) => allowed.and(m.negate()),
            // A name uv could not have written: ignore the set (evaluation stays conservative).
            Err(_) => continue,
        }
    }
    allowed
}

/// One member of a uv conflict set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConflictItem {
    Extra(String),
    Group(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> MarkerTree {
        MarkerTree::from_str(s).unwrap()
    }

    #[test]
    fn arch_markers_select_their_arch_and_free_variables_stay_free() {
        let t = MarkerTree::TRUE;
        assert_eq!(archs(&m("platform_machine == 'x86_64'"), &t), vec![Arch::X86_64]);
        assert_eq!(archs(&m("platform_machine == 'aarch64'"), &t), vec![Arch::Aarch64]);
        assert_eq!(archs(&m("platform_machine != 'x86_64'"), &t), vec![Arch::Aarch64]);
        assert_eq!(archs(&MarkerTree::TRUE, &t), Arch::ALL.to_vec());
        // extras and python_version are free: some choice makes these true
        assert_eq!(archs(&m("platform_machine == 'x86_64' and extra == 'vllm'"), &t), vec![Arch::X86_64]);
        assert_eq!(archs(&m("python_version < '3.9' and platform_machine == 'aarch64'"), &t), vec![Arch::Aarch64]);
        // sys_platform is fixed to linux
        assert!(archs(&m("sys_platform == 'darwin'"), &t).is_empty());
        assert_eq!(archs(&m("sys_platform == 'darwin' or platform_machine == 'aarch64'"), &t), vec![Arch::Aarch64]);
        // contradictions over free variables are still contradictions
        assert!(archs(&m("extra == 'a' and extra != 'a'"), &t).is_empty());
    }

    #[test]
    fn conflicting_extras_are_excluded() {
        let lockish = m("(platform_machine == 'x86_64' and extra == 'extra-7-nemo-rl-automodel') or (extra == 'extra-7-nemo-rl-automodel' and extra == 'extra-7-nemo-rl-mcore')");
        assert_eq!(archs(&lockish, &MarkerTree::TRUE), Arch::ALL.to_vec());
        let allowed = conflicts_allowed(&[vec![
            ("nemo-rl".into(), ConflictItem::Extra("automodel".into())),
            ("nemo-rl".into(), ConflictItem::Extra("mcore".into())),
        ]]);
        assert_eq!(archs(&lockish, &allowed), vec![Arch::X86_64]);
    }
}
