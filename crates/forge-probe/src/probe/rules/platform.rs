//! The wheel's platform: `platform-tag` (what its file name's tag claims
//! against the manylinux policy its binaries earn, `manylinux`) and `glibc`
//! (with `--python`: the glibc and libstdc++ symbol versions the binaries
//! require against those the environment's machine provides).
use super::Bx;
use forge_model::verdict::Check;
use forge_wheel::manylinux::judge::Level;
use forge_wheel::manylinux::{self, ElfNeeds};

/// How a wheel is given an honest tag.
const RETAG: &str = "build it with `deepep-forge build-wheel`, which tags a wheel for the policy its binaries earn; never rename a wheel by hand";

/// `platform-tag`: the one judgment of the tag set (`manylinux::judge`): every tag, every
/// member, fail closed on a member that cannot be read; a pass says who loads it in words.
pub fn platform_tag(cx: &Bx) -> Vec<Check> {
    let (Some(platform), Some(audit)) = (cx.b.platform.as_deref(), cx.b.platform_audit.as_ref()) else {
        return Vec::new();
    };
    let audit = match audit {
        Err(why) => {
            return vec![Check::fail("platform-tag", format!("the binaries could not be read: {why}")).fix(RETAG)]
        }
        Ok(a) => a,
    };
    let j = &audit.judgment;
    let mut out = Vec::new();
    for why in j.texts(Level::Warn) {
        out.push(Check::warn("platform-tag", why.to_string()).fix(RETAG));
    }
    for why in j.texts(Level::Fail) {
        out.push(Check::fail("platform-tag", why.to_string()).fix(RETAG));
    }
    if !out.is_empty() {
        return out;
    }
    match &j.audit {
        None => vec![Check::pass("platform-tag", format!("{platform}: the wheel holds no ELF file"))],
        Some(a) => vec![Check::pass(
            "platform-tag",
            format!(
                "{platform}: the binaries need {}{}; {}",
                a.platform.tag,
                manylinux::judge::raised(&a.platform.raised_by),
                manylinux::words::loads_where(platform)
            ),
        )],
    }
}

/// `glibc` (with `--python`): every GLIBC_ and GLIBCXX_ version the binaries require is one the environment has.
pub fn glibc(cx: &Bx) -> Vec<Check> {
    let (Some(v), Some(Ok(audit))) = (cx.versions, cx.b.platform_audit.as_ref()) else { return Vec::new() };
    let mut out = Vec::new();
    match v.glibc.as_deref().and_then(parse_pair) {
        None => out.push(Check::warn("glibc", format!("{} reports no glibc version", v.python))),
        Some(have) => out.push(glibc_check(&audit.elves, have, &v.python)),
    }
    if let Some((lib, defined)) = &v.libstdcxx {
        out.push(libstdcxx_check(&audit.elves, lib, defined));
    }
    out
}

fn glibc_check(elves: &[ElfNeeds], have: (u32, u32), python: &str) -> Check {
    let missing = required(elves, "GLIBC_", |ver| parse_pair(ver).is_some_and(|need| need > have));
    if missing.is_empty() {
        return Check::pass(
            "glibc",
            format!("{python}'s machine has glibc {}.{}: every GLIBC_ version the binaries require", have.0, have.1),
        );
    }
    Check::fail(
        "glibc",
        format!("{python}'s machine has glibc {}.{}; the binaries require {}", have.0, have.1, missing.join("; ")),
    )
    .fix("use a wheel built in an image or sysroot with this machine's glibc or older (pins.toml `[toolchain] manylinux`, docs/platform-tags.md)")
}

fn libstdcxx_check(elves: &[ElfNeeds], lib: &str, defined: &[String]) -> Check {
    let missing = required(elves, "GLIBCXX_", |ver| !defined.iter().any(|d| d == &format!("GLIBCXX_{ver}")));
    let missing_abi = required(elves, "CXXABI_", |ver| !defined.iter().any(|d| d == &format!("CXXABI_{ver}")));
    let all: Vec<String> = missing.into_iter().chain(missing_abi).collect();
    if all.is_empty() {
        return Check::pass("glibc", format!("{lib} defines every GLIBCXX_/CXXABI_ version the binaries require"));
    }
    Check::fail("glibc", format!("{lib} lacks what the binaries require: {}", all.join("; ")))
        .fix("install a newer libstdc++ (the build's gcc or newer), or use a wheel built with an older gcc")
}

/// The required versions of one family (`GLIBC_`) for which `missing(version)` holds, with who needs them.
fn required(elves: &[ElfNeeds], family: &str, missing: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    for e in elves {
        for ((lib, ver), (syms, _)) in &e.versions {
            let Some(v) = ver.strip_prefix(family) else { continue };
            if missing(v) {
                let s = if syms.is_empty() { String::new() } else { format!(" ({})", syms.join(", ")) };
                out.push(format!("{ver} from {lib} in {}{s}", e.member));
            }
        }
    }
    out
}

/// `2.36` -> (2, 36).
fn parse_pair(v: &str) -> Option<(u32, u32)> {
    let mut it = v.trim().split('.');
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}
