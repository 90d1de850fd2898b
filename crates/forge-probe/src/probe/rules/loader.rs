//! `loaded-libraries` (with `--python`): the NCCL and NVSHMEM host library the
//! process would load (`probe::loader`: through torch, RUNPATH and the
//! loader's rules) and the versions their own bytes state, against the
//! dist-info that claims them and against what the wheel was built with
//! (EPv2 below NCCL 2.31: the very NCCL; NVSHMEM linked statically: the very
//! NVSHMEM). Said before anything is imported.
use std::str::FromStr;

use pep440_rs::Version;

use super::Bx;
use crate::probe::loader::Loaded;
use forge_model::verdict::Check;

const RULE: &str = "loaded-libraries";

fn same(a: &str, b: &str) -> bool {
    match (Version::from_str(a), Version::from_str(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

fn older(a: &str, b: &str) -> bool {
    matches!((Version::from_str(a), Version::from_str(b)), (Ok(x), Ok(y)) if x < y)
}

/// One row per library: pass, or fail naming the two versions that differ.
pub fn loaded_libraries(cx: &Bx) -> Vec<Check> {
    // `--python`: the installed extensions; `--wheel --python`: the wheel's, as installed there.
    let loaded = match (cx.env, cx.versions) {
        (Some(env), _) => env.loaded.as_slice(),
        (None, Some(v)) => v.loaded.as_slice(),
        (None, None) => return Vec::new(),
    };
    let built = cx.b.provenance.as_ref().and_then(|p| p.as_ref().ok()).and_then(|p| p.toolchain.environment.as_ref());
    let mut out = Vec::new();
    for l in loaded {
        let (Some(path), Some(have)) = (&l.path, &l.version) else {
            if let Some(path) = &l.path {
                out.push(Check::warn(
                    RULE,
                    format!("{} -> {path} ({}): its version string is not in its .rodata", l.soname, l.how),
                ));
            }
            continue;
        };
        let at = format!("{} -> {path} ({})", l.soname, l.how);
        if let Some((name, claimed)) = l.dist.as_ref().filter(|(_, v)| !same(v, have)) {
            out.push(
                Check::fail(
                    RULE,
                    format!("{at} is {} {have} by its own bytes, but the dist-info says {name} {claimed}", l.what),
                )
                .fix(format!(
                    "uv pip install --reinstall --no-deps \"{name}=={claimed}\" (a library was replaced under the distribution)"
                )),
            );
            continue;
        }
        if let Some(f) = built.and_then(|b| against_build(l, b, &at, have)) {
            out.push(f);
            continue;
        }
        out.push(Check::pass(RULE, format!("{at}: {} {have}", l.what)));
    }
    out
}

/// A failure when the build's needs say this library must be another version.
fn against_build(l: &Loaded, b: &forge_wheel::provenance::BuildEnvironment, at: &str, have: &str) -> Option<Check> {
    let pkg =
        l.dist.as_ref().map(|(n, _)| n.clone()).unwrap_or_else(|| format!("nvidia-{}-cuXX", l.what.to_lowercase()));
    match l.what.as_str() {
        "NCCL" => {
            let built = b.nccl.as_deref()?;
            let exact = b.needs.nccl_exact_below.as_deref().is_some_and(|x| older(built, x));
            if exact && !same(built, have) {
                return Some(Check::fail(RULE, format!(
                    "{at} is NCCL {have}, the extension was built against NCCL {built}: below NCCL {} they must be the same version (DeepEP asserts it at start-up; an older NCCL fails the import with `undefined symbol`)",
                    b.needs.nccl_exact_below.as_deref().unwrap_or_default()
                ))
                .fix(format!("install {pkg}=={built} (with uv: `override-dependencies = [\"{pkg}=={built}\"]`), so torch loads it too")));
            }
            let min = b.needs.nccl_min.as_deref()?;
            older(have, min).then(|| {
                Check::fail(RULE, format!("{at} is NCCL {have}, older than the {min} this revision needs"))
                    .fix(format!("install {pkg}>={min}"))
            })
        }
        _ => {
            let built = b.nvshmem.as_deref().filter(|_| b.needs.nvshmem_same)?;
            (!same(built, have)).then(|| {
                Check::fail(RULE, format!(
                    "{at} is NVSHMEM {have}, the device code was linked with NVSHMEM {built}: host and device library must be one version"
                ))
                .fix(format!("install {pkg}=={built}"))
            })
        }
    }
}
