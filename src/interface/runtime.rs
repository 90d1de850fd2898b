//! What a revision needs of the environment its wheel runs in, read from its
//! source where it says so (each need with its `file:line`):
//! - NVSHMEM: setup.py links NVSHMEM's device library statically
//!   (`-lnvshmem_device`, `libnvshmem_device.a`) and its host library
//!   dynamically, so the host library loaded at run time must be the version
//!   the device code was linked with (`nvshmem_same`; for HybridEP and the
//!   classic interface only when the build finds NVSHMEM);
//! - NCCL (EPv2, `main`): the README's "NCCL X.Y.Z and above", a
//!   `#if NCCL_VERSION_CODE < NCCL_VERSION(...)` + `#error` in nccl.cu (the
//!   lowest NCCL it compiles with), and nccl.cu's run-time check under
//!   `#if NCCL_VERSION_CODE >= NCCL_VERSION(X, Y, Z) ... #else` comparing
//!   `NCCL_VERSION_CODE ==` the loaded version (below X.Y the NCCL at run
//!   time must be the very version compiled against: `nccl_exact_below`);
//!   `#include <nccl_device.h>` (NCCL's device API) is kept as evidence.
//!
//! Pure: files come through the reader.
use super::{Branch, Files};
use crate::provenance::RuntimeNeeds;

/// The EPv2 files that include NCCL's headers and test its version.
const NCCL_SOURCES: [&str; 2] = ["csrc/kernels/backend/nccl.cu", "csrc/kernels/backend/api.cuh"];

/// Largest file scanned (nccl.cu is about 10 kB, the README 25 kB).
const MAX_FILE: usize = 1 << 20;

/// The run-time needs of the revision `files` reads (`setup`: its setup.py).
pub fn needs(files: &dyn Files, branch: Branch, setup: &str) -> RuntimeNeeds {
    let mut n = RuntimeNeeds::default();
    nvshmem_same(setup, &mut n);
    if branch == Branch::Main {
        readme_nccl_min(files, &mut n);
        for f in NCCL_SOURCES {
            if let Some(text) = files.read(f).filter(|t| t.len() <= MAX_FILE) {
                nccl_source(f, &text, &mut n);
            }
        }
    }
    n
}

/// setup.py links NVSHMEM's static device library: host and device must match.
fn nvshmem_same(setup: &str, n: &mut RuntimeNeeds) {
    let at = setup.lines().position(|l| {
        let code = l.split('#').next().unwrap_or("");
        code.contains("libnvshmem_device.a") || code.contains("-lnvshmem_device")
    });
    if let Some(i) = at {
        n.nvshmem_same = true;
        n.evidence.push(format!(
            "setup.py:{}: links NVSHMEM's device library statically (libnvshmem_device) and its host library dynamically: the host library at run time must be the same NVSHMEM version",
            i + 1
        ));
    }
}

/// README.md's "NCCL X.Y.Z and above".
fn readme_nccl_min(files: &dyn Files, n: &mut RuntimeNeeds) {
    let Some(text) = files.read("README.md").filter(|t| t.len() <= MAX_FILE) else { return };
    for (i, l) in text.lines().enumerate() {
        let Some(rest) = l.find("NCCL ").map(|p| &l[p + 5..]) else { continue };
        let v: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
        let v = v.trim_end_matches('.');
        if v.split('.').count() >= 2 && rest[v.len()..].trim_start().starts_with("and above") {
            raise_min(n, v);
            n.evidence.push(format!("README.md:{}: {}", i + 1, l.trim().trim_start_matches(['-', '*', ' '])));
            return;
        }
    }
}

/// `2.30.4` from `NCCL_VERSION(2, 30, 4)` at the start of `s`.
fn nccl_version_call(s: &str) -> Option<(u32, u32, u32)> {
    let inner = s.trim_start().strip_prefix("NCCL_VERSION")?.trim_start().strip_prefix('(')?;
    let inner = &inner[..inner.find(')')?];
    let parts: Vec<u32> = inner.split(',').map(|p| p.trim().parse().ok()).collect::<Option<_>>()?;
    match parts[..] {
        [a, b, c] => Some((a, b, c)),
        _ => None,
    }
}

fn show((a, b, c): (u32, u32, u32)) -> String {
    if c == 0 {
        format!("{a}.{b}")
    } else {
        format!("{a}.{b}.{c}")
    }
}

/// A `#if NCCL_VERSION_CODE OP NCCL_VERSION(...)` line: (OP, version).
fn version_test(line: &str) -> Option<(&str, (u32, u32, u32))> {
    let rest = line.trim_start().strip_prefix("#if")?.trim_start().strip_prefix("NCCL_VERSION_CODE")?.trim_start();
    let op = [">=", "<=", "<", ">"].into_iter().find(|op| rest.starts_with(op))?;
    Some((op, nccl_version_call(&rest[op.len()..])?))
}

/// nccl.cu-like source: version tests, the run-time equality check, the device API include.
fn nccl_source(file: &str, text: &str, n: &mut RuntimeNeeds) {
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        if t.starts_with("#include") && t.contains("nccl_device.h") {
            n.evidence.push(format!("{file}:{}: includes <nccl_device.h> (NCCL's device API)", i + 1));
        }
        let Some((op, v)) = version_test(l) else { continue };
        let (else_at, end_at) = branches(&lines, i);
        let below = match op {
            "<" => lines[i + 1..end_at.unwrap_or(lines.len())].iter().any(|b| b.trim_start().starts_with("#error")),
            _ => false,
        };
        if below {
            raise_min(n, &show(v));
            n.evidence.push(format!("{file}:{}: `#error` below NCCL {}", i + 1, show(v)));
        }
        if op == ">=" {
            if let Some(e) = else_at {
                let stop = end_at.unwrap_or(lines.len());
                if let Some(k) = (e + 1..stop).find(|k| lines[*k].contains("NCCL_VERSION_CODE ==")) {
                    n.nccl_exact_below = Some(show(v));
                    n.evidence.push(format!(
                        "{file}:{}-{}: below NCCL {} the NCCL loaded at run time must be the version compiled against (asserted at start-up)",
                        i + 1,
                        k + 1,
                        show(v)
                    ));
                }
            }
        }
    }
}

/// The `#else` and `#endif` (0-based lines) of the `#if` at `start`, nesting counted.
fn branches(lines: &[&str], start: usize) -> (Option<usize>, Option<usize>) {
    let mut depth = 0;
    let mut else_at = None;
    for (k, l) in lines.iter().enumerate().skip(start + 1) {
        let t = l.trim_start();
        if t.starts_with("#if") {
            depth += 1;
        } else if t.starts_with("#endif") {
            if depth == 0 {
                return (else_at, Some(k));
            }
            depth -= 1;
        } else if depth == 0 && (t.starts_with("#else") || t.starts_with("#elif")) && else_at.is_none() {
            else_at = Some(k);
        }
    }
    (else_at, None)
}

/// Keep the higher of the known minimum and `v`.
fn raise_min(n: &mut RuntimeNeeds, v: &str) {
    let higher = match &n.nccl_min {
        Some(old) => version_key(v) > version_key(old),
        None => true,
    };
    if higher {
        n.nccl_min = Some(v.to_string());
    }
}

/// `2.30.4` -> [2, 30, 4] for comparisons (missing parts are 0, junk is 0).
pub fn version_key(v: &str) -> [u32; 3] {
    let mut k = [0; 3];
    for (i, p) in v.split(['.', '+']).take(3).enumerate() {
        k[i] = p.chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap_or(0);
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    const NCCL_CU: &str = "#include <nccl.h>\n#include <nccl_device/core.h>\nvoid f() {\n#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 31, 0)\n    a();\n#if X\n#else\n#endif\n#else\n    EP_HOST_ASSERT(NCCL_VERSION_CODE == v and \"same\");\n#endif\n}\n";

    #[test]
    fn the_runtime_equality_below_a_version_is_read_with_its_lines() {
        let mut n = RuntimeNeeds::default();
        nccl_source("csrc/kernels/backend/nccl.cu", NCCL_CU, &mut n);
        assert_eq!(n.nccl_exact_below.as_deref(), Some("2.31"));
        assert_eq!(n.evidence.len(), 1, "{:?}", n.evidence);
        assert!(n.evidence[0].starts_with("csrc/kernels/backend/nccl.cu:4-10: below NCCL 2.31"), "{:?}", n.evidence);
    }

    #[test]
    fn an_error_below_a_version_is_a_minimum_and_the_higher_minimum_wins() {
        let mut n = RuntimeNeeds::default();
        nccl_source("x.cu", "#if NCCL_VERSION_CODE < NCCL_VERSION(2,28,3)\n#error old\n#endif\n", &mut n);
        assert_eq!(n.nccl_min.as_deref(), Some("2.28.3"));
        raise_min(&mut n, "2.30.4");
        raise_min(&mut n, "2.29");
        assert_eq!(n.nccl_min.as_deref(), Some("2.30.4"));
        // A test without #error is no minimum.
        let mut m = RuntimeNeeds::default();
        nccl_source("x.cu", "#if NCCL_VERSION_CODE < NCCL_VERSION(2,28,3)\nint x;\n#endif\n", &mut m);
        assert_eq!(m.nccl_min, None);
    }

    #[test]
    fn readme_and_setup_py_needs() {
        let files = |p: &str| match p {
            "README.md" => Some("## Requirements\n- Python 3.8 and above\n- NCCL 2.30.4 and above\n".to_string()),
            _ => None,
        };
        let setup =
            "x = 1\n    # '-lnvshmem_device' in a comment\n    nvcc_dlink.extend(['-dlink', '-lnvshmem_device'])\n";
        let n = needs(&files, Branch::Main, setup);
        assert_eq!(n.nccl_min.as_deref(), Some("2.30.4"));
        assert!(n.nvshmem_same);
        assert!(n.evidence.iter().any(|e| e.starts_with("setup.py:3: links NVSHMEM")), "{:?}", n.evidence);
        assert!(n.evidence.iter().any(|e| e == "README.md:3: NCCL 2.30.4 and above"), "{:?}", n.evidence);
        // Not EPv2: NCCL needs are not read.
        let h = needs(&files, Branch::HybridEp, "x = 1\n");
        assert_eq!(h, RuntimeNeeds::default());
    }
}
