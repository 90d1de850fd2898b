//! The environment a consumer locks against what pins.toml builds (docs/findings.md,
//! "The environment around DeepEP"): torch per architecture equals `[toolchain] torch`,
//! `nvidia-nvshmem-cu*` equals the build's NVSHMEM, and for an EPv2 pin (branch
//! `main`, version 2 or later) `nvidia-nccl-cu*` meets the revision's need. One
//! function per rule id, registered in `RULES` (phase `Lock`).
use std::str::FromStr;

use pep440_rs::Version;

use super::Judging;
use crate::findings::{Finding, Severity};
use crate::lock::uvlock::EnvPackage;
use crate::pins::{Arch, Pins};

/// DeepEP main (EPv2, dd758ca) README, "Requirements": "NCCL 2.30.4 and above"
/// (`pip install "nvidia-nccl-cu13>=2.30.4" --no-deps`).
pub const EPV2_NCCL_MIN: &str = "2.30.4";
/// DeepEP main csrc/kernels/backend/nccl.cu:100-104: compiled against NCCL below 2.31,
/// the NCCL loaded at run time must be that very version.
pub const EPV2_NCCL_EXACT_BELOW: &str = "2.31";

/// The pin is DeepEP `main` as EPv2 (version 2 or later): it needs [`EPV2_NCCL_MIN`].
fn epv2(pins: &Pins) -> bool {
    pins.source.branch.as_deref() == Some("main")
        && Version::from_str(&pins.source.base_version).is_ok_and(|v| v.release().first().is_some_and(|m| *m >= 2))
}

/// The locked packages named `prefix*` (or exactly `torch`) that can install on `a`.
fn locked<'l>(j: &'l Judging, a: Arch, prefix: &'l str) -> impl Iterator<Item = &'l EnvPackage> + 'l {
    let env = j.ctx.lock.map(|l| l.environment.as_slice()).unwrap_or_default();
    env.iter().filter(move |p| p.archs.contains(&a) && (p.name == prefix || p.name.starts_with(prefix)))
}

/// Architectures the project installs DeepEP on and pins.toml builds a variant for.
fn built(j: &Judging) -> Vec<Arch> {
    let Some(p) = j.ctx.pins else { return Vec::new() };
    j.used.iter().copied().filter(|a| p.variants.iter().any(|v| v.arch == *a)).collect()
}

fn lock_file(j: &Judging) -> std::path::PathBuf {
    j.ctx.pyproject_path.with_file_name("uv.lock")
}

fn pins_name(j: &Judging) -> String {
    j.ctx.pins_path.display().to_string()
}

/// `2.11.0+cu130` -> (`2.11.0`, Some(`cu130`)).
fn public_and_local(v: &str) -> (String, Option<String>) {
    match v.split_once('+') {
        Some((p, l)) => (p.to_string(), Some(l.to_ascii_lowercase())),
        None => (v.to_string(), None),
    }
}

fn same(a: &str, b: &str) -> bool {
    match (Version::from_str(a), Version::from_str(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// `lock-torch`: torch in uv.lock (per architecture) is the torch the variants build against.
/// `[toolchain] torch` names a public version and `cuda` its CUDA: a locked `+cuXYZ` build
/// must be that CUDA (`13.0` -> `cu130`).
pub fn lock_torch(j: &Judging, out: &mut Vec<Finding>) {
    let Some(tc) = j.ctx.pins.and_then(|p| p.toolchain.as_ref()) else { return };
    let cu = format!("cu{}", tc.cuda.replace('.', ""));
    for a in built(j) {
        for p in locked(j, a, "torch") {
            let (public, local) = public_and_local(&p.version);
            let cuda_differs = local.as_deref().is_some_and(|l| l.starts_with("cu") && l != cu);
            if same(&public, &tc.torch) && !cuda_differs {
                continue;
            }
            let want = format!("{}+{cu}", tc.torch);
            out.push(
                Finding::new(
                    "lock-torch",
                    Severity::Error,
                    lock_file(j),
                    format!(
                        "uv.lock installs torch {} on {a}, but {} builds DeepEP for {a} against torch {} (CUDA {}): a compiled extension imported with another torch fails with `undefined symbol`",
                        p.version,
                        pins_name(j),
                        tc.torch,
                        tc.cuda
                    ),
                )
                .at(p.line, p.col)
                .arch(a)
                .expected_found(want, &p.version)
                .fix(format!(
                    "set [toolchain] torch = \"{public}\" (and cuda to match) in {} and rebuild the variants, or lock torch {}",
                    pins_name(j),
                    tc.torch
                )),
            );
        }
    }
}

/// `lock-nvshmem`: `nvidia-nvshmem-cu*` in uv.lock is the NVSHMEM the build links its device
/// code with (`[toolchain] nvshmem`); without it, what is known is said as a note.
pub fn lock_nvshmem(j: &Judging, out: &mut Vec<Finding>) {
    let Some(tc) = j.ctx.pins.and_then(|p| p.toolchain.as_ref()) else { return };
    for a in built(j) {
        for p in locked(j, a, "nvidia-nvshmem-cu") {
            match &tc.nvshmem {
                Some(n) if same(n, &p.version) => {}
                Some(n) => out.push(
                    Finding::new(
                        "lock-nvshmem",
                        Severity::Error,
                        lock_file(j),
                        format!(
                            "uv.lock installs {} {} on {a}, but {} builds DeepEP's device code with NVSHMEM {n}: NVSHMEM's device and host libraries must be one version",
                            p.name,
                            p.version,
                            pins_name(j)
                        ),
                    )
                    .at(p.line, p.col)
                    .arch(a)
                    .expected_found(n, &p.version)
                    .fix(format!(
                        "set [toolchain] nvshmem = \"{}\" in {} and rebuild the variants, or add \"{}=={n}\" to [tool.uv] override-dependencies in pyproject.toml, then uv lock",
                        p.version,
                        pins_name(j),
                        p.name
                    )),
                ),
                None => out.push(
                    Finding::new(
                        "lock-nvshmem",
                        Severity::Note,
                        lock_file(j),
                        format!(
                            "uv.lock installs {} {} on {a}; {} sets no [toolchain] nvshmem, so the registry toolchain builds with the NVSHMEM torch {} pins (uv.lock does not record which): not proven equal",
                            p.name,
                            p.version,
                            pins_name(j),
                            tc.torch
                        ),
                    )
                    .at(p.line, p.col)
                    .arch(a)
                    .expected_found("[toolchain] nvshmem", &p.version)
                    .fix(format!("set [toolchain] nvshmem = \"{}\" in {} and rebuild the variants", p.version, pins_name(j))),
                ),
            }
        }
    }
}

/// `lock-nccl` (an EPv2 pin): `nvidia-nccl-cu*` in uv.lock is at least [`EPV2_NCCL_MIN`], and the
/// build's `[toolchain] nccl` when that is below [`EPV2_NCCL_EXACT_BELOW`].
pub fn lock_nccl(j: &Judging, out: &mut Vec<Finding>) {
    let Some(pins) = j.ctx.pins.filter(|p| epv2(p)) else { return };
    let built_nccl = pins.toolchain.as_ref().and_then(|t| t.nccl.clone());
    // A build NCCL below the need cannot build main at all (build-wheel's preflight says so):
    // the lock is then judged against the need alone.
    let exact = built_nccl.as_deref().filter(|b| older(b, EPV2_NCCL_EXACT_BELOW) && !older(b, EPV2_NCCL_MIN));
    for a in built(j) {
        for p in locked(j, a, "nvidia-nccl-cu") {
            let (want, why) = match exact {
                Some(b) if !same(b, &p.version) => (
                    format!("=={b}"),
                    format!("the build compiles against NCCL {b} ([toolchain] nccl), and below NCCL {EPV2_NCCL_EXACT_BELOW} DeepEP main asserts the NCCL loaded at run time is that very version"),
                ),
                _ if older(&p.version, EPV2_NCCL_MIN) => (
                    format!(">={EPV2_NCCL_MIN}"),
                    format!("DeepEP main (EPv2) needs NCCL {EPV2_NCCL_MIN} or newer (its README; its NCCL Gin backend uses ncclCommProperties)"),
                ),
                _ => continue,
            };
            out.push(
                Finding::new(
                    "lock-nccl",
                    Severity::Error,
                    lock_file(j),
                    format!("uv.lock installs {} {} on {a}: {why}", p.name, p.version),
                )
                .at(p.line, p.col)
                .arch(a)
                .expected_found(&want, &p.version)
                .fix(format!(
                    "add \"{}{want}\" to [tool.uv] override-dependencies in pyproject.toml (torch pins its own NCCL), then uv lock{}",
                    p.name,
                    match exact {
                        Some(_) if !older(&p.version, EPV2_NCCL_MIN) => format!(
                            "; or set [toolchain] nccl = \"{}\" in {} and rebuild the variants",
                            p.version,
                            pins_name(j)
                        ),
                        _ => String::new(),
                    }
                )),
            );
        }
    }
}

/// `a < b` as PEP 440 versions (false when either does not parse).
fn older(a: &str, b: &str) -> bool {
    matches!((Version::from_str(a), Version::from_str(b)), (Ok(x), Ok(y)) if x < y)
}
