//! The environment a consumer locks against what pins.toml builds (docs/findings.md,
//! "The environment around DeepEP"): torch per architecture equals `[toolchain] torch`,
//! `nvidia-nvshmem-cu*` equals the build's NVSHMEM, and for an EPv2 revision (as
//! its source says, `lock::revision`; never pins.toml's `branch`) `nvidia-nccl-cu*`
//! meets the revision's need; torch and `nvidia-nvshmem-cu*` are at least what the pinned
//! revision states it needs (its README / NVSHMEM guide, `interface::runtime`). One
//! function per rule id, registered in `RULES` (phase `Lock`).
use std::str::FromStr;

use pep440_rs::Version;

use super::Judging;
use crate::lock::uvlock::EnvPackage;
use forge_model::findings::{Finding, Severity};
use forge_model::interface::{Branch, Interface};
use forge_model::pins::{Arch, Pins};

/// DeepEP main (EPv2, dd758ca) README, "Requirements": "NCCL 2.30.4 and above"
/// (`pip install "nvidia-nccl-cu13>=2.30.4" --no-deps`).
pub const EPV2_NCCL_MIN: &str = "2.30.4";
/// DeepEP main csrc/kernels/backend/nccl.cu:100-104: compiled against NCCL below 2.31,
/// the NCCL loaded at run time must be that very version.
pub const EPV2_NCCL_EXACT_BELOW: &str = "2.31";

/// What DeepEP pinned for `a` is, read from its source at the revision (`lock::revision`),
/// never from pins.toml's `branch` (None: no pin for `a`).
fn pinned_at<'j>(j: &'j Judging, a: Arch) -> Option<Entry<'j>> {
    let rev = j.ctx.intent.get(&a)?;
    let revs = &j.ctx.revisions;
    Some(match revs.get(rev) {
        Some(i) => Entry::Read(i),
        None => Entry::Unread(revs.unread(rev).unwrap_or("its source was not read")),
    })
}

/// A pinned revision as [`pinned_at`] finds it.
enum Entry<'j> {
    Read(&'j Interface),
    Unread(&'j str),
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

/// `lock-nccl` (an EPv2 revision, as its source says): `nvidia-nccl-cu*` in uv.lock is at least
/// the revision's NCCL minimum (its README; [`EPV2_NCCL_MIN`] when it states none), and the
/// build's `[toolchain] nccl` when that is below [`EPV2_NCCL_EXACT_BELOW`]. A revision whose
/// source could not be read gets a note: what it is is not guessed from a branch name.
pub fn lock_nccl(j: &Judging, out: &mut Vec<Finding>) {
    let Some(pins) = j.ctx.pins else { return };
    for a in built(j) {
        match pinned_at(j, a) {
            Some(Entry::Read(i)) if i.branch == Branch::Main => {
                let min = i.runtime.nccl_min.as_deref().unwrap_or(EPV2_NCCL_MIN);
                nccl_against(j, pins, a, min, out)
            }
            Some(Entry::Unread(why)) => nccl_unknown(j, a, why, out),
            _ => {}
        }
    }
}

/// `lock-torch-min`: torch in uv.lock (per architecture) is at least the torch the pinned
/// revision states it needs (its README: EPv2 "PyTorch 2.10 and above"), read from the source.
pub fn lock_torch_min(j: &Judging, out: &mut Vec<Finding>) {
    below_stated(j, ("lock-torch-min", "torch", "torch"), |i| i.runtime.torch_min.as_ref(), out)
}

/// `lock-nvshmem-min`: `nvidia-nvshmem-cu*` in uv.lock is at least the NVSHMEM the pinned revision
/// states it needs (EPv2 docs/nvshmem.md, HybridEP third-party/README.md: "NVSHMEM v3.3.9 or later").
pub fn lock_nvshmem_min(j: &Judging, out: &mut Vec<Finding>) {
    below_stated(j, ("lock-nvshmem-min", "nvidia-nvshmem-cu", "NVSHMEM"), |i| i.runtime.nvshmem_min.as_ref(), out)
}

/// The locked packages named `prefix` on each built architecture older than the minimum
/// `stated` reads from the revision pinned there (release numbers compared,
/// `interface::below`); a revision not read, or stating none, is not judged here.
fn below_stated(
    j: &Judging,
    (id, prefix, lib): (&str, &str, &str),
    stated: impl Fn(&Interface) -> Option<&forge_wheel::provenance::Stated>,
    out: &mut Vec<Finding>,
) {
    for a in built(j) {
        let Some(Entry::Read(i)) = pinned_at(j, a) else { continue };
        let Some(min) = stated(i) else { continue };
        let rev = short(&j.ctx.intent[&a]);
        for p in locked(j, a, prefix) {
            if forge_model::interface::below(&p.version, &min.version) != Some(true) {
                continue;
            }
            out.push(
                Finding::new(
                    id,
                    Severity::Error,
                    lock_file(j),
                    format!(
                        "uv.lock installs {} {} on {a}, but DeepEP at {rev} states \"{}\" ({} at that revision): it needs {lib} {} or newer",
                        p.name, p.version, min.text, min.at, min.version
                    ),
                )
                .at(p.line, p.col)
                .arch(a)
                .expected_found(format!(">={}", min.version), &p.version)
                .fix(format!(
                    "lock {}>={} (raise it in pyproject.toml, or add it to [tool.uv] override-dependencies), then uv lock, and build DeepEP against it; or pin a DeepEP revision whose requirements allow {lib} {}",
                    p.name, min.version, p.version
                )),
            );
        }
    }
}

/// The locked NCCL on `a` against an EPv2 revision's need `min` (and the build's exact NCCL below 2.31).
fn nccl_against(j: &Judging, pins: &Pins, a: Arch, min: &str, out: &mut Vec<Finding>) {
    let built_nccl = pins.toolchain.as_ref().and_then(|t| t.nccl.clone());
    // A build NCCL below the need cannot build main at all (build-wheel's preflight says so):
    // the lock is then judged against the need alone.
    let exact = built_nccl.as_deref().filter(|b| older(b, EPV2_NCCL_EXACT_BELOW) && !older(b, min));
    for p in locked(j, a, "nvidia-nccl-cu") {
        let (want, why) = match exact {
            Some(b) if !same(b, &p.version) => (
                format!("=={b}"),
                format!("the build compiles against NCCL {b} ([toolchain] nccl), and below NCCL {EPV2_NCCL_EXACT_BELOW} DeepEP main asserts the NCCL loaded at run time is that very version"),
            ),
            _ if older(&p.version, min) => (
                format!(">={min}"),
                format!("DeepEP at {} is EPv2 (its setup.py builds deep_ep._C) and needs NCCL {min} or newer (its README; its NCCL Gin backend uses ncclCommProperties)", short(&j.ctx.intent[&a])),
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
                    Some(_) if !older(&p.version, min) => format!(
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

/// The revision pinned for `a` could not be read, and the locked NCCL would matter were it EPv2
/// (older than [`EPV2_NCCL_MIN`], or not the build's `[toolchain] nccl`): said, not guessed.
fn nccl_unknown(j: &Judging, a: Arch, why: &str, out: &mut Vec<Finding>) {
    let built_nccl = j.ctx.pins.and_then(|p| p.toolchain.as_ref()).and_then(|t| t.nccl.as_deref());
    let matters = |v: &str| older(v, EPV2_NCCL_MIN) || built_nccl.is_some_and(|b| !same(b, v));
    let Some(p) = locked(j, a, "nvidia-nccl-cu").find(|p| matters(&p.version)) else { return };
    let rev = short(&j.ctx.intent[&a]);
    out.push(
        Finding::new(
            "lock-nccl",
            Severity::Note,
            lock_file(j),
            format!(
                "uv.lock installs {} {} on {a}; whether DeepEP at {rev} is EPv2 (which needs NCCL {EPV2_NCCL_MIN} or newer) is read from its source, and that was not read: {why}",
                p.name, p.version
            ),
        )
        .at(p.line, p.col)
        .arch(a)
        .expected_found(format!("DeepEP's source at {rev}"), &p.version)
        .fix(format!(
            "deepep-forge lock check --source <DeepEP checkout or URL> --project {}",
            j.ctx.project.display()
        )),
    );
}

/// 7 characters of a full sha, else the revision as written.
fn short(rev: &str) -> &str {
    rev.get(..7).filter(|_| forge_model::pins::is_full_sha(rev)).unwrap_or(rev)
}

/// `a < b` as PEP 440 versions (false when either does not parse).
fn older(a: &str, b: &str) -> bool {
    matches!((Version::from_str(a), Version::from_str(b)), (Ok(x), Ok(y)) if x < y)
}
