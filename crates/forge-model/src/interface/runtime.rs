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
//!   `#include <nccl_device.h>` (NCCL's device API) is kept as evidence;
//! - stated minimums (every branch; NCCL's only for EPv2, the one that links
//!   NCCL): a requirement line of README.md, docs/nvshmem.md (EPv2) or
//!   third-party/README.md (HybridEP, the classic interface) naming torch
//!   (`PyTorch`), NCCL or NVSHMEM, a version (`v` allowed) and "and above",
//!   "or later", "and later", "or above", "or newer", "and newer" (EPv2
//!   README.md:69 "PyTorch 2.10 and above", docs/nvshmem.md:18 "NVSHMEM v3.3.9
//!   or later"). The version must be PEP 440 ([`crate::pep`]); a line whose
//!   version is not is kept in `unread` and gives no minimum (never guessed).
//!
//! Pure: files come through the reader.
use super::{Branch, Files};
use forge_wheel::provenance::{RuntimeNeeds, Stated};

/// The EPv2 files that include NCCL's headers and test its version.
const NCCL_SOURCES: [&str; 2] = ["csrc/kernels/backend/nccl.cu", "csrc/kernels/backend/api.cuh"];

/// Largest file scanned (nccl.cu is about 10 kB, the README 25 kB).
const MAX_FILE: usize = 1 << 20;

/// The files whose requirement lines state minimums (EPv2 moved NVSHMEM's guide
/// from third-party/README.md to docs/nvshmem.md).
pub const STATING: [&str; 3] = ["README.md", "docs/nvshmem.md", "third-party/README.md"];

/// How a requirement line says "this version or newer" after the version.
const AT_LEAST: [&str; 6] = ["and above", "or later", "and later", "or above", "or newer", "and newer"];

/// A library a requirement line can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lib {
    Torch,
    Nccl,
    Nvshmem,
}

/// The words naming each library (compared without case, as whole words).
const NAMES: [(&str, Lib); 4] =
    [("pytorch", Lib::Torch), ("torch", Lib::Torch), ("nccl", Lib::Nccl), ("nvshmem", Lib::Nvshmem)];

/// One requirement line: the library, the version as written, `file:line`, the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub lib: Lib,
    pub version: String,
    pub at: String,
    pub text: String,
}

/// The run-time needs of the revision `files` reads (`setup`: its setup.py).
pub fn needs(files: &dyn Files, branch: Branch, setup: &str) -> RuntimeNeeds {
    let mut n = RuntimeNeeds { registration: super::registration::read(files), ..Default::default() };
    nvshmem_same(setup, &mut n);
    for f in STATING {
        if let Some(text) = files.read(f).filter(|t| t.len() <= MAX_FILE) {
            for s in statements(f, &text) {
                take(s, branch, &mut n);
            }
        }
    }
    if branch == Branch::Main {
        for f in NCCL_SOURCES {
            if let Some(text) = files.read(f).filter(|t| t.len() <= MAX_FILE) {
                nccl_source(f, &text, &mut n);
            }
        }
        jit_needs(files, &mut n);
    }
    n
}

/// EPv2's import and JIT (deep_ep/__init__.py, csrc/jit/compiler.hpp): a CUDA home, nvcc of at
/// least the version the JIT asserts, cuobjdump, NCCL's headers; each with the line that says it.
fn jit_needs(files: &dyn Files, n: &mut RuntimeNeeds) {
    let mut j = forge_wheel::provenance::JitNeeds::default();
    let read = |f: &str| files.read(f).filter(|t| t.len() <= MAX_FILE);
    let code = |l: &str| !l.trim_start().starts_with(['#', '/']);
    if let Some(text) = read("deep_ep/__init__.py") {
        if let Some(i) = text.lines().position(|l| code(l) && l.contains("def find_cuda_home")) {
            j.cuda_home = true;
            n.evidence.push(format!("deep_ep/__init__.py:{}: `import deep_ep` finds a CUDA home (CUDA_HOME, CUDA_PATH, nvcc on PATH, /usr/local/cuda) and asserts one", i + 1));
        }
    }
    if let Some(text) = read(JIT_COMPILER) {
        for (i, l) in text.lines().enumerate().filter(|(_, l)| code(l)) {
            let at = format!("{JIT_COMPILER}:{}", i + 1);
            if let Some(v) = l.split("NVCC version should be >= ").nth(1).and_then(|r| {
                let v = r.split(|c: char| !(c.is_ascii_digit() || c == '.')).next()?;
                crate::pep::check_version(v).is_ok().then(|| v.to_string())
            }) {
                n.evidence.push(format!("{at}: the JIT compiles kernels with the CUDA home's nvcc, version >= {v}"));
                j.nvcc_min.get_or_insert(v);
            }
            if !j.cuobjdump && l.contains("\"cuobjdump\"") {
                j.cuobjdump = true;
                n.evidence.push(format!("{at}: the JIT runs the CUDA home's bin/cuobjdump"));
            }
            if !j.nccl_headers && l.contains("-I {}/include") && l.contains("nccl_root") {
                j.nccl_headers = true;
                n.evidence.push(format!("{at}: the JIT compiles with -I <nccl root>/include (NCCL's headers)"));
            }
        }
    }
    if j != forge_wheel::provenance::JitNeeds::default() {
        n.jit = Some(j);
    }
}

/// EPv2's run-time compiler.
const JIT_COMPILER: &str = "csrc/jit/compiler.hpp";

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

/// Every requirement line of `text` (the file `file`) naming torch, NCCL or
/// NVSHMEM with a version and an "at least" phrase after it.
pub fn statements(file: &str, text: &str) -> Vec<Statement> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let lower = l.to_ascii_lowercase();
        for (name, lib) in NAMES {
            for (p, _) in lower.match_indices(name) {
                if let Some(version) = stated_after(&lower, p, name.len()) {
                    // A hostile README's line is shown cut short, never whole.
                    let text = forge_os::input::excerpt(l.trim().trim_start_matches(['-', '*', ' ']).trim(), 160);
                    out.push(Statement { lib, version: l[version].to_string(), at: format!("{file}:{}", i + 1), text });
                }
            }
        }
    }
    out
}

/// The version's byte range when `line` (lower case) has the word at `p..p+len`
/// followed by a version and an "at least" phrase.
fn stated_after(line: &str, p: usize, len: usize) -> Option<std::ops::Range<usize>> {
    let word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '/' | '.' | '=' | '<' | '>');
    if line[..p].chars().next_back().is_some_and(word) {
        return None;
    }
    let after = &line[p + len..];
    let spaced = after.trim_start();
    if spaced.len() == after.len() {
        return None; // `nccl.h`, `torch_dtype`, `nvshmem_host`: not the library's name
    }
    let start = p + len + (after.len() - spaced.len());
    let v = spaced.strip_prefix('v').filter(|r| r.starts_with(|c: char| c.is_ascii_digit())).unwrap_or(spaced);
    let start = start + (spaced.len() - v.len());
    if !v.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let token = v.split_whitespace().next().unwrap_or("");
    let version = token.trim_end_matches(['.', ',', ';', ':', ')']);
    let rest = v[token.len()..].trim_start();
    AT_LEAST.iter().any(|a| rest.starts_with(a)).then(|| start..start + version.len())
}

/// A statement as a need: NCCL's only for EPv2 (the branch that links NCCL); a
/// version that is not PEP 440 is kept in `unread`, never guessed.
fn take(s: Statement, branch: Branch, n: &mut RuntimeNeeds) {
    if s.lib == Lib::Nccl && branch != Branch::Main {
        return;
    }
    if let Err(e) = crate::pep::check_version(&s.version) {
        n.unread.push(format!("{}: `{}`: {e}; no minimum taken from it", s.at, s.text));
        return;
    }
    n.evidence.push(format!("{}: {}", s.at, s.text));
    let stated = Stated { version: s.version, at: s.at, text: s.text };
    match s.lib {
        Lib::Nccl => raise_min(n, &stated.version),
        Lib::Torch => keep_higher(&mut n.torch_min, stated),
        Lib::Nvshmem => keep_higher(&mut n.nvshmem_min, stated),
    }
}

/// Keep the higher of two stated minimums (the first of equal ones).
fn keep_higher(slot: &mut Option<Stated>, s: Stated) {
    if slot.as_ref().is_none_or(|old| pep_key(&s.version) > pep_key(&old.version)) {
        *slot = Some(s);
    }
}

fn pep_key(v: &str) -> Option<pep440_rs::Version> {
    v.parse().ok()
}

/// `found` is older than the stated minimum `min`, comparing release numbers only:
/// a pre-release or local build of the stated version (NGC's `2.10.0a0+git...`)
/// counts as that version. None when either is not PEP 440.
pub fn below(found: &str, min: &str) -> Option<bool> {
    let f: pep440_rs::Version = found.trim().parse().ok()?;
    let m: pep440_rs::Version = min.trim().parse().ok()?;
    let len = f.release().len().max(m.release().len());
    let pad = |r: &[u64]| {
        let mut v = r.to_vec();
        v.resize(len, 0);
        v
    };
    Some(pad(f.release()) < pad(m.release()))
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

    /// DeepEP main's README "Requirements" (dd758ca, the same lines at b306af0, EPv2's first
    /// release, and epv2-release 018f21e) around its pip line, which names NCCL but states no minimum.
    const EPV2_README: &str = "### Requirements\n\n- Hopper (SM90) GPUs, or other architectures with SM90 PTX ISA support\n- Python 3.8 and above\n- CUDA version\n  - CUDA 12.3 and above for SM90 GPUs\n- PyTorch 2.10 and above\n- NCCL 2.30.4 and above\n- NVLink for intranode communication\n\n```bash\npip install \"nvidia-nccl-cu13>=2.30.4\" --no-deps\n```\n";
    /// docs/nvshmem.md at dd758ca (the classic tree's third-party/README.md has the same lines).
    const NVSHMEM_GUIDE: &str = "Software requirements:\n   - NVSHMEM v3.3.9 or later\n\n## Installation procedure\n\nNVSHMEM 3.3.9 binaries are available in several formats:\n   - Tarballs for  [x86_64](https://developer.download.nvidia.com/compute/nvshmem/redist/libnvshmem/linux-x86_64/libnvshmem-linux-x86_64-3.3.9_cuda12-archive.tar.xz)\n   - pip wheels through PyPI: `pip install nvidia-nvshmem-cu12`\nDeepEP is compatible with upstream NVSHMEM 3.3.9 and later.\n";
    /// hybrid-ep's README (94a9f8f; 567632d on main before EPv2 says the same).
    const HYBRID_README: &str = "- Python 3.8 and above\n- CUDA version\n  - CUDA 11.0 and above for SM80 GPUs\n  - CUDA 12.3 and above for SM90 GPUs\n- PyTorch 2.1 and above\n- NVLink for intranode communication\n";

    #[test]
    fn requirement_lines_of_every_library_are_read_the_same_way_with_their_lines() {
        let got: Vec<(Lib, String, String)> =
            statements("README.md", EPV2_README).into_iter().map(|s| (s.lib, s.version, s.at)).collect();
        assert_eq!(
            got,
            vec![(Lib::Torch, "2.10".into(), "README.md:7".into()), (Lib::Nccl, "2.30.4".into(), "README.md:8".into())]
        );
        let got: Vec<(Lib, String, String, String)> = statements("docs/nvshmem.md", NVSHMEM_GUIDE)
            .into_iter()
            .map(|s| (s.lib, s.version, s.at, s.text))
            .collect();
        assert_eq!(
            got,
            vec![
                (Lib::Nvshmem, "3.3.9".into(), "docs/nvshmem.md:2".into(), "NVSHMEM v3.3.9 or later".into()),
                (
                    Lib::Nvshmem,
                    "3.3.9".into(),
                    "docs/nvshmem.md:9".into(),
                    "DeepEP is compatible with upstream NVSHMEM 3.3.9 and later.".into()
                ),
            ]
        );
        // Other phrasings of the class; names inside other words are not the library.
        let other =
            "torch 2.4 or newer\nNCCL v2.31 or above\nlibnvshmem 9.9 and above\ntorch_npu 3.0 and above\nPyTorch 2.9\n";
        let got: Vec<(Lib, String)> = statements("x.md", other).into_iter().map(|s| (s.lib, s.version)).collect();
        assert_eq!(got, vec![(Lib::Torch, "2.4".into()), (Lib::Nccl, "2.31".into())]);
    }

    #[test]
    fn epv2_and_hybrid_ep_needs_from_their_own_text_and_an_unreadable_version_is_no_need() {
        let epv2 = |p: &str| match p {
            "README.md" => Some(EPV2_README.to_string()),
            "docs/nvshmem.md" => Some(NVSHMEM_GUIDE.to_string()),
            _ => None,
        };
        let n = needs(&epv2, Branch::Main, "x = 1\n");
        let t = n.torch_min.as_ref().unwrap();
        assert_eq!(
            (t.version.as_str(), t.at.as_str(), t.text.as_str()),
            ("2.10", "README.md:7", "PyTorch 2.10 and above")
        );
        let v = n.nvshmem_min.as_ref().unwrap();
        assert_eq!(
            (v.version.as_str(), v.at.as_str()),
            ("3.3.9", "docs/nvshmem.md:2"),
            "the first of equal statements"
        );
        assert_eq!(n.nccl_min.as_deref(), Some("2.30.4"));
        assert!(n.evidence.contains(&"README.md:7: PyTorch 2.10 and above".to_string()), "{:?}", n.evidence);
        // hybrid-ep: its own torch minimum and the NVSHMEM guide under third-party/; no NCCL need.
        let hybrid = |p: &str| match p {
            "README.md" => Some(HYBRID_README.to_string()),
            "third-party/README.md" => Some(NVSHMEM_GUIDE.to_string()),
            _ => None,
        };
        let h = needs(&hybrid, Branch::HybridEp, "x = 1\n");
        assert_eq!(h.torch_min.map(|s| (s.version, s.at)), Some(("2.1".into(), "README.md:5".into())));
        assert_eq!(h.nvshmem_min.map(|s| s.at), Some("third-party/README.md:2".into()));
        assert_eq!(h.nccl_min, None);
        // Not PEP 440: said, no minimum; no statement at all: no minimum.
        let odd = |p: &str| (p == "README.md").then(|| "- PyTorch 2.x and above\n".to_string());
        let o = needs(&odd, Branch::Main, "x = 1\n");
        assert_eq!(o.torch_min, None);
        assert!(
            o.unread.len() == 1 && o.unread[0].starts_with("README.md:1: `PyTorch 2.x and above`"),
            "{:?}",
            o.unread
        );
        assert_eq!(needs(&|_: &str| None, Branch::Main, "x = 1\n").torch_min, None);
    }

    #[test]
    fn below_compares_release_numbers() {
        assert_eq!(below("2.9.1+cu130", "2.10"), Some(true));
        assert_eq!(below("2.10.0+cu130", "2.10"), Some(false));
        assert_eq!(below("2.10.0a0+b558c98", "2.10"), Some(false), "NGC's pre-release of 2.10 is 2.10");
        assert_eq!(below("3.3.8", "3.3.9"), Some(true));
        assert_eq!(below("3.4.5", "3.3.9"), Some(false));
        assert_eq!(below("2.10", "2.10.0.1"), Some(true));
        assert_eq!(below("junk", "2.10"), None);
    }
}
