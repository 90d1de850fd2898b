//! The environment rules (docs/probe.md, "The environment around the wheel"):
//! the wheel's provenance `toolchain.environment` (what its compiled code was
//! built against, and what its revision needs at run time) against the versions
//! `--python`'s environment has installed (`env::Versions`). One function per
//! rule id, registered in `BINARY_RULES`; without provenance, `build-environment`
//! says what the ELF shows and what cannot be known.
use std::str::FromStr;

use pep440_rs::Version;

use super::{elfs, short, Bx};
use forge_model::verdict::Check;
use forge_wheel::provenance::BuildEnvironment;

/// The build environment the wheel's provenance records, if any.
fn recorded<'a>(cx: &Bx<'a>) -> Option<&'a BuildEnvironment> {
    cx.b.provenance.as_ref()?.as_ref().ok()?.toolchain.environment.as_ref()
}

/// `a == b` as PEP 440 versions (`2.11.0+cu130` == `2.11.0+cu130`), else as text.
fn same(a: &str, b: &str) -> bool {
    match (Version::from_str(a), Version::from_str(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// `a < b` as PEP 440 versions; None when either does not parse.
fn older(a: &str, b: &str) -> Option<bool> {
    Some(Version::from_str(a).ok() < Some(Version::from_str(b).ok()?))
}

/// The pip package of an NVIDIA library for the wheel's CUDA major (`nvidia-nccl-cu13`):
/// the name installed in the environment, else from the build's CUDA.
fn package(installed: Option<&(String, String)>, build: &BuildEnvironment, lib: &str) -> String {
    if let Some((name, _)) = installed {
        return name.clone();
    }
    let major =
        build.cuda.as_deref().and_then(|c| c.split('.').next()).filter(|m| m.bytes().all(|b| b.is_ascii_digit()));
    format!("nvidia-{lib}-cu{}", major.unwrap_or("<cuda major>"))
}

/// `build-environment`: what the wheel says it was built against; for a wheel
/// without that record, what its ELF shows (NEEDED, versioned symbols, RUNPATH,
/// the C++ ABI of its std:: references) and what could not be known.
pub fn build_environment(cx: &Bx) -> Vec<Check> {
    if let Some(e) = recorded(cx) {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        let abi = match e.torch_cxx11_abi {
            Some(a) => format!(" (cxx11 ABI {})", u8::from(a)),
            None => String::new(),
        };
        let mut needs = Vec::new();
        if let Some(m) = &e.needs.nccl_min {
            needs.push(format!("NCCL >= {m}"));
        }
        if let Some(x) = &e.needs.nccl_exact_below {
            needs.push(format!("the build's NCCL at run time when built below {x}"));
        }
        if e.needs.nvshmem_same {
            needs.push("the build's NVSHMEM host library".into());
        }
        let needs = if needs.is_empty() { String::new() } else { format!("; its revision needs {}", needs.join(", ")) };
        return vec![Check::pass(
            "build-environment",
            format!(
                "built against torch {}{abi}, CUDA {}, NVSHMEM {}, NCCL {} (provenance){needs}",
                show(&e.torch),
                show(&e.cuda),
                show(&e.nvshmem),
                show(&e.nccl)
            ),
        )];
    }
    let why = match &cx.b.provenance {
        None => "no deepep-forge provenance",
        // Without an environment to judge, a deepep-forge wheel's other rows say enough.
        Some(_) if cx.versions.is_none() => return Vec::new(),
        Some(Err(_)) => "its provenance is unreadable",
        Some(Ok(_)) => "its provenance predates the build-environment record",
    };
    let mut seen = Vec::new();
    for (e, f) in elfs(cx.b) {
        seen.push(format!("{}: {}", short(&e.path), elf_summary(f)));
    }
    let text = format!(
        "{}; not known ({why}): the torch version, the NVSHMEM and NCCL versions it was compiled against, and its revision's run-time needs",
        if seen.is_empty() { "no readable extension".to_string() } else { seen.join("; ") }
    );
    // Asked to judge an environment (--python), not knowing is a warning; else it is information.
    vec![if cx.versions.is_some() {
        Check::warn("build-environment", text)
    } else {
        Check::skip("build-environment", text)
    }]
}

/// NEEDED, the highest symbol version per library, RUNPATH and the C++ ABI of the std:: references.
fn elf_summary(f: &crate::probe::elf::ElfFacts) -> String {
    let versions: Vec<String> = f
        .version_needs
        .iter()
        .filter_map(|(lib, vs)| {
            let best = vs.iter().max_by(|a, b| version_key(a).cmp(&version_key(b)))?;
            Some(format!("{lib} {best}"))
        })
        .collect();
    let abi = if f.undefined.iter().any(|s| s.contains("St7__cxx11")) {
        "C++11 std::string ABI (_GLIBCXX_USE_CXX11_ABI=1)"
    } else if f.undefined.iter().any(|s| s.starts_with("_Z") && s.contains("Ss")) {
        "old std::string ABI (_GLIBCXX_USE_CXX11_ABI=0)"
    } else {
        "C++ ABI not shown"
    };
    let runpath = if f.runpath.is_empty() && f.rpath.is_empty() {
        "none".to_string()
    } else {
        f.runpath.iter().chain(&f.rpath).cloned().collect::<Vec<_>>().join(":")
    };
    format!(
        "NEEDED [{}], versions [{}], RUNPATH {runpath}, {abi}",
        f.needed.join(", "),
        if versions.is_empty() { "none".to_string() } else { versions.join(", ") }
    )
}

/// `GLIBCXX_3.4.29` -> [3, 4, 29] (for picking the highest version a library is asked for).
fn version_key(v: &str) -> Vec<u64> {
    let tail = v.rsplit('_').next().unwrap_or(v);
    tail.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

/// `torch-abi` (with `--python`): the environment's torch is the build's version and C++ ABI.
/// A different torch breaks a compiled extension at import: `undefined symbol` (its c10/ATen
/// symbols change between releases, and std::string symbols differ between the two ABIs).
pub fn torch_abi(cx: &Bx) -> Vec<Check> {
    let (Some(v), Some(e)) = (cx.versions, recorded(cx)) else { return Vec::new() };
    let Some(built) = &e.torch else {
        return vec![Check::skip("torch-abi", "the provenance records no torch version")];
    };
    let Some(have) = &v.torch else {
        return vec![Check::fail(
            "torch-abi",
            format!("built against torch {built}, but {} has no torch installed", v.python),
        )
        .fix(format!("install torch=={built} in that environment"))];
    };
    let risk =
        "importing it fails with `undefined symbol` (a compiled extension links the exact torch it was built against)";
    if !same(built, have) {
        return vec![Check::fail(
            "torch-abi",
            format!("built against torch {built}, the environment has torch {have}: {risk}"),
        )
        .fix(format!(
            "install torch=={built}, or rebuild the wheel against torch {have} ([toolchain] torch in pins.toml)"
        ))];
    }
    match (e.torch_cxx11_abi, &v.torch_cxx11_abi) {
        (Some(b), Some((h, from))) if b != *h => vec![Check::fail(
            "torch-abi",
            format!(
                "torch {have} in both, but built with _GLIBCXX_USE_CXX11_ABI={} and the environment's torch is {} ({from}): {risk}",
                u8::from(b),
                u8::from(*h)
            ),
        )
        .fix(format!("install the torch {built} build with _GLIBCXX_USE_CXX11_ABI={}, or rebuild against this torch", u8::from(b)))],
        (Some(b), Some((_, from))) => vec![Check::pass(
            "torch-abi",
            format!("torch {have}, _GLIBCXX_USE_CXX11_ABI={} as built ({from})", u8::from(b)),
        )],
        _ => vec![Check::pass("torch-abi", format!("torch {have} as built (C++ ABI not compared: not recorded or not readable)"))],
    }
}

/// `nvshmem-version` (with `--python`): NVSHMEM's host library is the version the device code
/// was linked with (a mismatch between libnvshmem_device.a and libnvshmem_host fails at init).
pub fn nvshmem_version(cx: &Bx) -> Vec<Check> {
    let (Some(v), Some(e)) = (cx.versions, recorded(cx)) else { return Vec::new() };
    let Some(built) = &e.nvshmem else { return Vec::new() };
    let name = package(v.nvshmem.as_ref(), e, "nvshmem");
    match &v.nvshmem {
        Some((_, have)) if same(built, have) => {
            vec![Check::pass("nvshmem-version", format!("{name} {have}: the NVSHMEM the device code was built with"))]
        }
        Some((_, have)) => vec![Check::fail(
            "nvshmem-version",
            format!("the device code was linked with NVSHMEM {built}, the environment's host library is {name} {have}: device and host NVSHMEM must be one version"),
        )
        .fix(format!("uv pip install --no-deps {name}=={built}"))],
        None => vec![Check::warn(
            "nvshmem-version",
            format!("built with NVSHMEM {built}; the environment has no {name}: the host library comes from elsewhere (NVSHMEM_DIR, LD_LIBRARY_PATH) and its version is not checked"),
        )
        .fix(format!("uv pip install --no-deps {name}=={built}"))],
    }
}

/// `nccl-version` (with `--python`): at least what the revision needs, and the very version
/// compiled against when that is below `needs.nccl_exact_below` (EPv2's nccl.cu asserts it).
pub fn nccl_version(cx: &Bx) -> Vec<Check> {
    let (Some(v), Some(e)) = (cx.versions, recorded(cx)) else { return Vec::new() };
    let (built, min, exact_below) =
        (e.nccl.as_deref(), e.needs.nccl_min.as_deref(), e.needs.nccl_exact_below.as_deref());
    if built.is_none() && min.is_none() {
        return Vec::new();
    }
    let name = package(v.nccl.as_ref(), e, "nccl");
    let Some((_, have)) = &v.nccl else {
        let want = built.map(|b| format!("=={b}")).or(min.map(|m| format!(">={m}"))).unwrap_or_default();
        return vec![Check::warn(
            "nccl-version",
            format!("the environment has no {name}: the NCCL loaded at run time is not known here"),
        )
        .fix(format!("uv pip install --no-deps \"{name}{want}\""))];
    };
    let exact = match (built, exact_below) {
        (Some(b), Some(x)) => older(b, x) == Some(true),
        _ => false,
    };
    if let (Some(m), Some(true)) = (min, older(have, min.unwrap_or_default())) {
        let want = if exact { format!("=={}", built.unwrap_or(m)) } else { format!(">={m}") };
        return vec![Check::fail("nccl-version", format!("{name} {have} is older than the {m} this revision needs"))
            .fix(format!("uv pip install --no-deps \"{name}{want}\" (with uv sync: an override-dependencies entry)"))];
    }
    match built {
        Some(b) if exact && !same(b, have) => vec![Check::fail(
            "nccl-version",
            format!(
                "built against NCCL {b}, the environment has {name} {have}: below NCCL {} the compile-time and run-time NCCL must be the same version (DeepEP asserts it when the buffer is created)",
                exact_below.unwrap_or_default()
            ),
        )
        .fix(format!("uv pip install --no-deps \"{name}=={b}\""))],
        Some(b) => vec![Check::pass("nccl-version", format!("{name} {have} (built against {b}{})", min.map(|m| format!("; needs >= {m}")).unwrap_or_default()))],
        None => vec![Check::pass("nccl-version", format!("{name} {have} >= {}", min.unwrap_or_default()))],
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions_compare_as_pep440() {
        assert!(super::same("2.11.0+cu130", "2.11.0+cu130") && !super::same("2.11.0+cu130", "2.11.0+cu128"));
        assert_eq!(super::older("2.28.9", "2.30.4"), Some(true));
        assert_eq!(super::older("2.30.10", "2.30.4"), Some(false));
        assert_eq!(super::version_key("GLIBCXX_3.4.29"), vec![3, 4, 29]);
    }
}
