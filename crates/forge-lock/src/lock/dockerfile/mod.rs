//! Dockerfile scanning for `lock check` (`lock::dockerfile`): ARG/ENV defaults that carry a DeepEP
//! rev, an arch list, the multinode flag, the transport, RDMA_CORE_HOME or the
//! rdma-core ref, compared with pins.toml. Reads Dockerfiles through
//! [`forge_model::dockerfile`]; must not run docker or read anything but the
//! Dockerfiles it is given.
//!
//! What is detected (values are the defaults written in the file; a
//! `--build-arg` given at build time is not visible here):
//! - a DeepEP rev: a variable whose name mentions DEEPEP/DEEP_EP and ends in
//!   REV/REF/COMMIT/SHA; any ARG/ENV value or RUN line holding a
//!   `.../DeepEP.git@<rev>` URL; `git checkout <rev>` / `git reset --hard <rev>`
//!   in a RUN that mentions DeepEP;
//! - the build configuration of each stage (and of global ARGs no stage uses):
//!   TORCH_CUDA_ARCH_LIST (else any `*CUDA_ARCH_LIST`), HYBRID_EP_MULTINODE,
//!   USE_NIXL, RDMA_CORE_HOME, checked *together* against the variants of
//!   pins.toml (arch lists as sets). A stage that names its variant
//!   (VARIANT/DEEPEP_VARIANT ARG) gets one finding per differing setting; any
//!   other build no variant declares gets `dockerfile-build-undeclared`, whose
//!   fix is a ready-to-paste `[[variant]]` per platform (never a narrowed build);
//! - the rdma-core ref (`RDMA_CORE_REF`, `*RDMA_CORE*_TAG|VERSION`) against `[rdma_core] ref`.
//!
//! Split by concern: [`parse`] (instructions), [`expand`] (ARG/ENV values and
//! sh parameter expansion), [`model`] (stages and scopes), [`rules`] (one
//! function per rule id), [`needs`] (the variant a stage builds).
mod needs;
mod rules;
pub mod tokens;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::Result;

use forge_model::dockerfile::model::Model;
use forge_model::findings::Finding;
use forge_model::pins::{Arch, Pins};
use forge_os::error::Failure;
use forge_os::fs::{Kind, Resolved, Tree, Walk};
use rules::Checker;
use tokens::PlaceKind;

pub use needs::{needs, Need};

/// One Dockerfile `lock check` reads and `pin set` may move, read once.
#[derive(Debug, Clone)]
pub struct Dockerfile {
    /// As messages and findings name it: the project's path joined with the
    /// name it was found at, or the path given to `--dockerfile`.
    pub path: PathBuf,
    /// Its file inside the project (links followed, never out of it), for
    /// `pin set` to write; `None` for a `--dockerfile` outside the project.
    pub rel: Option<PathBuf>,
    pub text: String,
}

/// Whether a name is a Dockerfile's (`Dockerfile`, `Dockerfile.cuda`, not `.dockerignore`).
fn is_dockerfile(name: &std::ffi::OsStr) -> bool {
    name.to_str().is_some_and(|n| n.starts_with("Dockerfile") && !n.ends_with(".dockerignore"))
}

/// Dockerfiles of a project: `Dockerfile*` at the root and `docker/**/Dockerfile*`
/// (each group sorted), then `extra` in the order given (a missing one is a usage error).
/// Everything is read through the project's tree: a link (`docker/` itself, a
/// Dockerfile, a folder below `docker/`) that leads out of the project is
/// refused (exit 2, naming it); one that stays inside is followed for a
/// Dockerfile and not walked for a folder; a FIFO or device is not a Dockerfile.
/// `shown` is the project as messages name it.
pub fn discover(project: &Tree, shown: &Path, extra: &[PathBuf]) -> Result<Vec<Dockerfile>> {
    let mut out = Vec::new();
    for e in project.list(".", forge_os::fs::MAX_NAMES)?.entries {
        if is_dockerfile(&e.name) {
            out.extend(found(project, shown, Path::new(&e.name), e.kind)?);
        }
    }
    let (docker, walked) = match project.kind("docker")? {
        Kind::Dir => (PathBuf::from("docker"), true),
        Kind::Link => match inside(project, shown, Path::new("docker"))? {
            r if project.is_dir(&r) => (r, true),
            _ => (PathBuf::new(), false),
        },
        _ => (PathBuf::new(), false),
    };
    if walked {
        // Bounded: a hostile tree cannot make discovery walk forever (links are reported, not followed).
        for w in project.walk(&docker, Walk { max_entries: 100_000, max_depth: 16 })? {
            let name = PathBuf::from("docker").join(w.rel.strip_prefix(&docker).unwrap_or(&w.rel));
            match w.kind {
                Kind::Link if !w.rel.file_name().is_some_and(is_dockerfile) => {
                    // A folder or file link below docker/: never walked, but never one out of the project.
                    inside(project, shown, &w.rel)?;
                }
                kind if w.rel.file_name().is_some_and(is_dockerfile) => {
                    out.extend(
                        found(project, shown, &w.rel, kind)?.map(|d| Dockerfile { path: shown.join(&name), ..d }),
                    );
                }
                _ => {}
            }
        }
    }
    for p in extra {
        let same = |d: &Dockerfile| absolute(&d.path) == absolute(p);
        if out.iter().any(same) {
            continue;
        }
        let text =
            forge_os::fs::named::read_text_opt(p, "Dockerfile", forge_os::input::cap::TEXT)?.ok_or_else(|| {
                Failure::usage(format!("Dockerfile not found: {}", p.display()))
                    .hint("check the path given to --dockerfile")
            })?;
        out.push(Dockerfile { path: p.clone(), rel: None, text });
    }
    Ok(out)
}

/// The Dockerfile at `rel` (of kind `kind`), read: a regular file, or a link
/// to one inside the project; `None` for anything else (a FIFO, a folder, a
/// dangling link: not a Dockerfile).
fn found(project: &Tree, shown: &Path, rel: &Path, kind: Kind) -> Result<Option<Dockerfile>> {
    let file = match kind {
        Kind::File { .. } => rel.to_path_buf(),
        Kind::Link => inside(project, shown, rel)?,
        _ => return Ok(None),
    };
    if !matches!(project.kind(&file)?, Kind::File { .. }) {
        return Ok(None);
    }
    let text = project.read_text(&file, forge_os::input::cap::TEXT)?;
    Ok(Some(Dockerfile { path: shown.join(rel), rel: Some(file), text }))
}

/// Where the link at `rel` leads inside the project; one that leads out is
/// refused (exit 2), naming it and where it leads.
fn inside(project: &Tree, shown: &Path, rel: &Path) -> Result<PathBuf> {
    match project.resolve(rel)? {
        Resolved::Inside(r) => Ok(r),
        Resolved::Outside { link, target } => Err(outside(shown, &link, &target)),
    }
}

/// A link out of the project: exit 2, naming the link and its target.
pub fn outside(shown: &Path, link: &Path, target: &Path) -> anyhow::Error {
    Failure::usage(format!(
        "{} is a symlink to {}, outside the project {}: deepep-forge reads and writes only the project's own files, never through a link out of it; nothing was read or changed",
        shown.join(link).display(),
        target.display(),
        shown.display()
    ))
    .hint("replace the link with the files themselves (or a link inside the project)")
    .into()
}

/// `p` as an absolute path with `.` and `..` taken away as written (no file system asked).
fn absolute(p: &Path) -> PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// Check Dockerfiles. `revs` is the intended revision per architecture (from
/// pins.toml, or from pyproject.toml under --no-pins); `pins` is None under
/// --no-pins (then only revisions are checked).
pub fn check(files: &[Dockerfile], pins: Option<&Pins>, revs: &BTreeMap<Arch, String>) -> Vec<Finding> {
    files.iter().flat_map(|f| check_text(&f.text, &f.path, pins, revs)).collect()
}

/// Check one Dockerfile's text; `file` is used in findings.
pub fn check_text(text: &str, file: &Path, pins: Option<&Pins>, revs: &BTreeMap<Arch, String>) -> Vec<Finding> {
    let model = Model::read(text);
    let mut c = Checker::new(file, pins, revs);
    for d in &model.defs {
        c.def(d, model.platform_of(d));
    }
    for u in &model.unverifiable {
        c.unverifiable_def(u);
    }
    for r in &model.runs {
        c.run(r, model.stages[r.stage].platform);
    }
    for (cfg, platform) in model.configs() {
        c.config(&cfg, platform);
    }
    // The intended revision written where the reader cannot read it as the pin.
    for rev in revs.values().collect::<BTreeSet<_>>() {
        match tokens::places(text, rev) {
            None => c.unread("the Dockerfile", rev, "written in too many places to read", 1),
            Some(places) => {
                for p in places {
                    if let PlaceKind::Unread(why) = p.kind {
                        c.unread(&format!("line {}", p.line), &tokens::line_text(text, p.at.start), why, p.line);
                    }
                }
            }
        }
    }
    c.out
}

/// One Dockerfile's text with its DeepEP pin moved from `old` to `new` (the intended
/// revision per architecture before and after `pin set`), for `pin set` to write:
/// `Ok(None)` when the file pins nothing that moves (or was already out of step
/// with `old`: then it is `lock check`'s to report, not `pin set`'s to change).
/// Only the pin's own tokens move ([`tokens`]: the bytes the reader reads as
/// DeepEP's revision); a place that holds a moving revision in a form the
/// reader cannot read as the pin (a command substitution, the revision joined
/// with other text), or a pin that cannot be moved so (a short sha, a branch,
/// a value made at build time), is refused, naming its line, before anything
/// is written. A comment, an image digest or a longer word that contains the
/// revision is left as it is.
pub fn moved(
    text: &str,
    file: &Path,
    pins: Option<&Pins>,
    old: &BTreeMap<Arch, String>,
    new: &BTreeMap<Arch, String>,
) -> Result<Option<String>> {
    let mut edits: Vec<(Range<usize>, &str)> = Vec::new();
    let moving: BTreeSet<&str> =
        old.iter().filter(|(a, from)| new.get(a).is_some_and(|to| to != *from)).map(|(_, f)| f.as_str()).collect();
    for from in moving {
        let Some(places) = tokens::places(text, from) else {
            return Err(unread(file, 1, "", from, "written in more places than deepep-forge reads"));
        };
        for p in places {
            match p.kind {
                PlaceKind::Unread(why) => {
                    return Err(unread(file, p.line, &tokens::line_text(text, p.at.start), from, why))
                }
                PlaceKind::Other => {}
                PlaceKind::Pin => {
                    // A stage of one platform moves with that architecture's pin; any other with every moving one.
                    let arches: Vec<Arch> = match p.platform {
                        Some(a) => vec![a],
                        None => old.keys().copied().collect(),
                    };
                    let to = arches
                        .iter()
                        .filter(|a| old.get(a).map(String::as_str) == Some(from))
                        .find_map(|a| new.get(a).filter(|to| to.as_str() != from));
                    if let Some(to) = to {
                        edits.push((p.at, to.as_str()));
                    }
                }
            }
        }
    }
    let revs = |f: &[Finding]| f.iter().filter(|f| f.rule == "dockerfile-rev").count();
    if edits.is_empty() || revs(&check_text(text, file, pins, old)) > 0 {
        return Ok(None);
    }
    edits.sort_by_key(|(at, _)| at.start);
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (at, to) in &edits {
        out.push_str(&text[last..at.start]);
        out.push_str(to);
        last = at.end;
    }
    out.push_str(&text[last..]);
    let left = check_text(&out, file, pins, new);
    if let Some(f) = left.iter().find(|f| f.rule == "dockerfile-rev") {
        let at = f.line.map(|l| format!("{}:{l}", file.display())).unwrap_or_else(|| file.display().to_string());
        return Err(Failure::usage(format!(
            "{at} pins DeepEP in a form pin set cannot move ({}); nothing was changed",
            f.message
        ))
        .hint(format!(
            "write the pin there as a plain full sha (`ARG DEEPEP_REV=<full sha>`), then run pin set again; or move it by hand at {at}"
        ))
        .into());
    }
    Ok(Some(out))
}

/// `pin set` refuses a Dockerfile that holds the moving revision where the reader cannot read it as the pin.
fn unread(file: &Path, line: usize, text: &str, rev: &str, why: &str) -> anyhow::Error {
    let at = format!("{}:{line}", file.display());
    let shown = if text.is_empty() { String::new() } else { format!(" `{text}`") };
    Failure::usage(format!(
        "{at}:{shown} holds DeepEP's revision {rev} where pin set cannot read it as the pin ({why}); pin set moves only the pin's own token, so nothing was changed"
    ))
    .hint(format!(
        "write DeepEP's revision there as a plain value (`ARG DEEPEP_REV=<full sha>`, then `${{DEEPEP_REV}}`) and run pin set again, or change {at} by hand"
    ))
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIN: &str = "17cfb817bccec3a9c247013360cc550c2bac441e";
    const OTHER: &str = "29d31c095796f3c8ece47ee9cdcc167051bbeed9";

    fn pins() -> Pins {
        Pins::parse(include_str!("../../../../../pins.toml"), Path::new("pins.toml")).unwrap()
    }

    fn revs(x: &str, a: &str) -> BTreeMap<Arch, String> {
        BTreeMap::from([(Arch::X86_64, x.to_string()), (Arch::Aarch64, a.to_string())])
    }

    fn run(text: &str) -> Vec<Finding> {
        check_text(text, Path::new("Dockerfile"), Some(&pins()), &revs(PIN, PIN))
    }

    fn rules(f: &[Finding]) -> Vec<(String, usize)> {
        f.iter().map(|f| (f.rule.to_string(), f.line.unwrap_or(0))).collect()
    }

    #[test]
    fn a_dockerfile_pin_moves_with_the_pin_or_is_refused() {
        let text = format!("FROM ubuntu\nARG DEEPEP_REV={PIN}\nRUN git clone https://github.com/deepseek-ai/DeepEP.git && git checkout ${{DEEPEP_REV}}\n");
        let f = Path::new("Dockerfile");
        let new = moved(&text, f, Some(&pins()), &revs(PIN, PIN), &revs(OTHER, OTHER)).unwrap().unwrap();
        assert_eq!(new, text.replace(PIN, OTHER));
        assert!(check_text(&new, f, Some(&pins()), &revs(OTHER, OTHER)).iter().all(|f| f.rule != "dockerfile-rev"));
        // Already out of step before: not pin set's to change.
        assert_eq!(moved(&text, f, Some(&pins()), &revs(OTHER, OTHER), &revs(PIN, PIN)).unwrap(), None);
    }

    #[test]
    fn nemo_rl_shape_is_checked_as_one_combination() {
        let text = "FROM base AS wheel\nARG DEEPEP_CUDA_ARCH_LIST=\"9.0 10.0\"\nARG RDMA_CORE_REF=v60.0\nENV HYBRID_EP_MULTINODE=1\nENV RDMA_CORE_HOME=/opt/rdma-core/build\nENV TORCH_CUDA_ARCH_LIST=${DEEPEP_CUDA_ARCH_LIST}\n";
        let f = run(text);
        assert_eq!(rules(&f), vec![("dockerfile-build-undeclared".into(), 2)], "{f:#?}");
        assert!(
            f[0].message.contains("TORCH_CUDA_ARCH_LIST (ENV, line 6, from ARG DEEPEP_CUDA_ARCH_LIST at line 2)"),
            "{}",
            f[0].message
        );
        // never narrowed to the closest variant: the fix declares the build as it is
        let fix = f[0].fix.as_ref().unwrap().to_string();
        assert!(!fix.contains("gb200-multinode") && fix.contains("cuda_arch_list = \"9.0 10.0\""), "{fix}");
        assert!(fix.contains("rdma_core_home = \"/opt/rdma-core/build\""), "{fix}");
        // The same shape for Hopper with the system rdma-core is h100-multinode: clean.
        let good = text.replace("\"9.0 10.0\"", "\"9.0\"").replace("/opt/rdma-core/build", "/usr");
        assert!(run(&good).is_empty(), "{:#?}", run(&good));
    }

    #[test]
    fn global_arg_redeclared_in_a_stage_is_followed() {
        let text = "ARG ARCHS=\"9.0\"\nFROM base\nARG ARCHS\nENV TORCH_CUDA_ARCH_LIST=$ARCHS HYBRID_EP_MULTINODE=0\n";
        assert!(run(text).is_empty(), "{:#?}", run(text));
        let f = run(&text.replace("\"9.0\"", "\"8.0\""));
        assert_eq!(rules(&f), vec![("dockerfile-build-undeclared".into(), 1)], "{f:#?}");
        // Without the re-declaration the global is not visible in the stage.
        let f = run("ARG ARCHS=\"9.0\"\nFROM base\nENV TORCH_CUDA_ARCH_LIST=$ARCHS\n");
        assert!(f.is_empty(), "{f:#?}");
    }

    #[test]
    fn named_variant_and_platform_narrow_the_candidates() {
        let f = run("FROM base\nARG VARIANT=h100-multinode\nENV TORCH_CUDA_ARCH_LIST=10.0 HYBRID_EP_MULTINODE=1 RDMA_CORE_HOME=/usr\n");
        assert_eq!(rules(&f), vec![("dockerfile-arch-list".into(), 3)], "{f:#?}");
        assert!(f[0].message.contains("`h100-multinode`"), "{}", f[0].message);
        let f = run("FROM base\nARG VARIANT=h200\n");
        assert_eq!(rules(&f), vec![("dockerfile-variant".into(), 2)]);
        // 10.0 multinode on arm64 with /usr: closest is gb200-multinode, which wants /opt/rdma-core/build.
        let f = run("FROM --platform=linux/arm64 base\nENV TORCH_CUDA_ARCH_LIST=10.0 HYBRID_EP_MULTINODE=1 RDMA_CORE_HOME=/usr\n");
        assert_eq!(rules(&f), vec![("dockerfile-build-undeclared".into(), 2)], "{f:#?}");
        assert_eq!(f[0].arch, Some(Arch::Aarch64));
        assert!(f[0].fix.as_ref().unwrap().to_string().contains("rdma_core_home = \"/usr\""), "{f:#?}");
        let f = run("FROM --platform=linux/arm64 base\nENV TORCH_CUDA_ARCH_LIST=9.0 HYBRID_EP_MULTINODE=0\n");
        assert_eq!(rules(&f), vec![("dockerfile-build-undeclared".into(), 2)], "{f:#?}");
    }

    #[test]
    fn multinode_flag_and_legacy_env_form() {
        let f = run("FROM base\nENV TORCH_CUDA_ARCH_LIST 10.0\nENV HYBRID_EP_MULTINODE yes\nENV RDMA_CORE_HOME=/usr\nENV USE_NIXL=1\n");
        assert_eq!(rules(&f), vec![("dockerfile-build-undeclared".into(), 2)], "{f:#?}");
        assert!(f[0].fix.as_ref().unwrap().to_string().contains("transport = \"nixl\""), "{f:#?}");
        let f =
            run("FROM base\nENV TORCH_CUDA_ARCH_LIST=\"9.0\"\nENV HYBRID_EP_MULTINODE=1\nENV RDMA_CORE_HOME=/opt/x\n");
        assert_eq!(rules(&f), vec![("dockerfile-build-undeclared".into(), 2)], "{f:#?}");
    }

    #[test]
    fn revs_full_short_branch_and_per_platform() {
        assert!(run(&format!("FROM b\nARG DEEPEP_REV={PIN}\n")).is_empty());
        let f = run("FROM b\nARG DEEPEP_REV=17cfb81\n");
        assert_eq!(rules(&f), vec![("dockerfile-rev".into(), 2)]);
        assert!(f[0].message.contains("full sha required"), "{}", f[0].message);
        assert!(f[0].fix.as_ref().unwrap().to_string().contains(PIN));
        let f = run("FROM b\nARG DEEPEP_REF=hybrid-ep\n");
        assert!(f[0].message.contains("branch or tag"), "{}", f[0].message);
        let url = format!("FROM b\nENV DEEPEP_URL=git+https://github.com/deepseek-ai/DeepEP.git@{OTHER}\n");
        assert_eq!(rules(&run(&url)), vec![("dockerfile-rev".into(), 2)]);
        // Different pins per arch: no platform means it must match both.
        let r = revs(PIN, OTHER);
        let f = check_text(&format!("FROM b\nARG DEEPEP_COMMIT={PIN}\n"), Path::new("D"), None, &r);
        assert_eq!(f.len(), 1);
        assert!(f[0].message.contains("x86_64 pin but not the aarch64"), "{}", f[0].message);
        assert_eq!(f[0].arch, Some(Arch::Aarch64));
        let f =
            check_text(&format!("FROM --platform=linux/amd64 b\nARG DEEPEP_COMMIT={PIN}\n"), Path::new("D"), None, &r);
        assert!(f.is_empty(), "{f:#?}");
    }

    #[test]
    fn run_checkout_is_checked_once_at_the_value() {
        let text = format!("FROM b\nARG DEEPEP_REV={OTHER}\nRUN git clone https://github.com/deepseek-ai/DeepEP && cd DeepEP && git checkout ${{DEEPEP_REV}}\nRUN cd DeepEP && git -C . checkout -q 17cfb81\n");
        let f = run(&text);
        assert_eq!(rules(&f), vec![("dockerfile-rev".into(), 2), ("dockerfile-rev".into(), 4)], "{f:#?}");
        assert!(run("FROM b\nRUN git checkout abc1234\n").is_empty(), "a RUN that does not mention DeepEP is not ours");
        // Any variable spliced into a DeepEP URL is followed to its line.
        let text = format!("FROM b\nARG REV={OTHER}\nRUN uv pip install \"deep_ep @ git+https://github.com/deepseek-ai/DeepEP.git@${{REV}}\"\n");
        let f = run(&text);
        assert_eq!(rules(&f), vec![("dockerfile-rev".into(), 2)], "{f:#?}");
        assert!(f[0].message.starts_with("REV (ARG, line 2)"), "{}", f[0].message);
        let f = run(&format!(
            "FROM b\nRUN pip install git+https://github.com/deepseek-ai/DeepEP.git@{OTHER}#egg=deep_ep\n"
        ));
        assert_eq!(rules(&f), vec![("dockerfile-rev".into(), 2)], "{f:#?}");
    }

    /// Every POSIX parameter-expansion class in a RUN that builds DeepEP is
    /// evaluated as sh does (a changed revision is `dockerfile-rev`), and what
    /// is not POSIX is `dockerfile-unverifiable`, never ok.
    #[test]
    fn shell_expansions_in_run_are_evaluated_or_refused() {
        let url = |e: &str| {
            format!("FROM b\nARG DEEPEP_REV={PIN}\nARG PFX=x{PIN}\nRUN pip install \"git+https://github.com/deepseek-ai/DeepEP.git@{e}\"\n")
        };
        let last = &PIN[39..];
        for (expr, ok) in [
            ("${DEEPEP_REV}", true),
            ("${DEEPEP_REV%?}0", false),                 // shortest suffix
            (&format!("${{DEEPEP_REV%{last}}}"), false), // literal suffix
            ("${DEEPEP_REV%%c*}", false),                // longest suffix
            ("${DEEPEP_REV#?}", false),                  // shortest prefix
            ("${DEEPEP_REV##*7}", false),                // longest prefix
            ("${PFX#x}", true),                          // a prefix removed gives the pin
            ("${PFX#[!0-9]}", true),                     // bracket negation
            ("${PFX#[a-z]}", true),                      // bracket range
            ("${DEEPEP_REV%[0-9]}", true),               // no match: unchanged (the pin ends in e)
            ("${DEEPEP_REV:-main}", true),
            ("${UNSET:-main}", false), // the default is a branch
            ("${UNSET:=main}", false),
            ("${DEEPEP_REV:?unset}", true),
            ("${DEEPEP_REV:+main}", false),
            ("${#DEEPEP_REV}", false), // "40"
        ] {
            let mut f = run(&url(expr));
            if !expr.contains("PFX") {
                // PFX (line 3) holds the pin joined with other text, and nothing reads it here.
                assert!(f.iter().any(|f| f.rule == "dockerfile-unverifiable" && f.line == Some(3)), "{expr}: {f:#?}");
                f.retain(|f| f.line != Some(3));
            }
            if ok {
                assert!(f.is_empty(), "{expr}: {f:#?}");
            } else {
                assert_eq!(rules(&f), vec![("dockerfile-rev".into(), 4)], "{expr}: {f:#?}");
            }
        }
        for expr in [
            "${DEEPEP_REV/17/29}",
            "${DEEPEP_REV//c/d}",
            "${DEEPEP_REV:0:7}",
            "${DEEPEP_REV^^}",
            "${UNSET:-${DEEPEP_REV/1/2}}",
        ] {
            let mut f = run(&url(expr));
            f.retain(|f| f.line != Some(3));
            assert_eq!(rules(&f), vec![("dockerfile-unverifiable".into(), 4)], "{expr}: {f:#?}");
            assert!(f[0].message.starts_with("cannot verify: RUN (line 4)"), "{}", f[0].message);
        }
        // In an ARG/ENV that names DeepEP, too; elsewhere not ours.
        // (and the pin at line 2 is read only through that expansion: not read as the pin either).
        let f = run(&format!("FROM b\nARG R={PIN}\nENV DEEPEP_REV=${{R/1/2}}\n"));
        assert_eq!(
            rules(&f),
            vec![("dockerfile-unverifiable".into(), 3), ("dockerfile-unverifiable".into(), 2)],
            "{f:#?}"
        );
        assert!(run("FROM b\nARG V=3.12.1\nENV PY=${V/./}\nRUN echo ${V/./}\n").is_empty());
        // The checkout form, and a value too long to match is refused, not guessed.
        let f = run(&format!("FROM b\nARG DEEPEP_REV={PIN}\nRUN cd DeepEP && git checkout ${{DEEPEP_REV%??}}\n"));
        assert_eq!(rules(&f), vec![("dockerfile-rev".into(), 3)], "{f:#?}");
        let long = "a".repeat(5000);
        let f = run(&format!("FROM b\nARG X={long}\nRUN cd DeepEP && git checkout ${{X%a}}\n"));
        assert_eq!(rules(&f), vec![("dockerfile-unverifiable".into(), 3)], "{f:#?}");
    }

    #[test]
    fn rdma_core_ref_must_match_pins() {
        assert!(run("FROM b\nARG RDMA_CORE_REF=v60.0\n").is_empty());
        let f = run("FROM b\nARG RDMA_CORE_REF=v59.0\n");
        assert_eq!(rules(&f), vec![("dockerfile-rdma-core-ref".into(), 2)]);
    }

    #[test]
    fn truncated_and_odd_input_never_panics() {
        let text = format!(
            "# escape=\\\nARG A=\"${{B:-x}}\" C='${{D}}'\nFROM --platform=$P b AS s\nENV TORCH_CUDA_ARCH_LIST=\"${{A:+9.0}}\" \\\n  HYBRID_EP_MULTINODE=on\nRUN <<-EOF git checkout {PIN}\n\tDeepEP\n\tEOF\nENV K ${{UNCLOSED\nRUN git -C DeepEP checkout\nARG DEEPEP_REV=é😀\n"
        );
        for (i, _) in text.char_indices() {
            let _ = run(&text[..i]);
        }
    }

    #[test]
    fn build_time_only_values_are_not_judged() {
        assert!(run("FROM b\nARG TORCH_CUDA_ARCH_LIST\nARG HYBRID_EP_MULTINODE\nARG DEEPEP_REV\nENV X=${TORCH_CUDA_ARCH_LIST}\n").is_empty());
    }
}
