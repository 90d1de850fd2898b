//! The rules of `lock check` (DOMAIN.md §3): per architecture one revision
//! everywhere and equal to the intent; full shas only; label = base version +
//! short sha (PEP 440) in pyproject, the lock's manifest and every package;
//! different revisions per architecture under one static label is an error;
//! a third party's own DeepEP pin that an override replaces is a note.
//! Pure: turns references into findings, reads and prints nothing.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use pep440_rs::Version;

use super::pyproject::Pyproject;
use super::uvlock::UvLock;
use super::{same_repo, Kind, Reference};
use crate::findings::{Finding, Severity};
use crate::pins::{is_full_sha, Arch, Pins};

/// Everything the rules judge against.
pub struct Context<'a> {
    pub project: &'a Path,
    pub pins: Option<&'a Pins>,
    pub pins_path: &'a Path,
    pub py: &'a Pyproject,
    pub lock: Option<&'a UvLock>,
    pub pyproject_path: PathBuf,
    /// Intended revision per architecture.
    pub intent: BTreeMap<Arch, String>,
    /// Base version of the label (`1.2.1`), where known.
    pub base: Option<String>,
}

fn git_rev(r: &Reference) -> Option<&str> {
    r.git.as_ref().and_then(|g| g.rev.as_deref())
}

impl<'a> Context<'a> {
    pub fn new(
        project: &'a Path,
        pins: Option<&'a Pins>,
        pins_path: &'a Path,
        py: &'a Pyproject,
        lock: Option<&'a UvLock>,
        pyproject_path: &Path,
    ) -> Self {
        let intent: BTreeMap<Arch, String> = match pins {
            Some(p) => p.pins.iter().map(|(a, pin)| (*a, pin.rev.clone())).collect(),
            None => Arch::ALL.into_iter().filter_map(|a| pyproject_intent(py, a).map(|r| (a, r))).collect(),
        };
        let base = match pins {
            Some(p) => Some(p.source.base_version.clone()),
            None => py
                .refs
                .iter()
                .chain(lock.map(|l| l.refs.as_slice()).unwrap_or_default())
                .filter(|r| matches!(r.kind, Kind::Label | Kind::LockPackage))
                .find_map(|r| Version::from_str(r.version.as_deref()?).ok())
                .map(|v| v.without_local().to_string()),
        };
        Context { project, pins, pins_path, py, lock, pyproject_path: pyproject_path.to_path_buf(), intent, base }
    }

    /// `deepep-forge pin set REV ...` that makes the project agree with the intent.
    fn pin_set(&self, rev: &str, arch: Option<Arch>, relock: bool) -> String {
        let mut c = format!("deepep-forge pin set {rev}");
        if let Some(a) = arch {
            c.push_str(&format!(" --arch {a}"));
        }
        if self.project != Path::new(".") {
            c.push_str(&format!(" --project {}", self.project.display()));
        }
        match self.pins {
            None => c.push_str(" --no-pins"),
            Some(_) if self.pins_path != Path::new(crate::pins::DEFAULT_PATH) => {
                c.push_str(&format!(" --pins {}", self.pins_path.display()))
            }
            Some(_) => {}
        }
        if relock {
            c.push_str(" --relock");
        }
        c
    }

    /// The fix for `arch`: one command for both architectures when the intent is one revision.
    fn fix_for(&self, arch: Arch, relock: bool) -> Option<String> {
        let rev = self.intent.get(&arch)?;
        let unified = self.intent.values().all(|r| r == rev);
        Some(self.pin_set(rev, (!unified).then_some(arch), relock))
    }

    /// The used architectures are pinned to different revisions.
    fn split(&self, used: &[Arch]) -> bool {
        let mut revs = self.intent.iter().filter(|(a, _)| used.contains(a)).map(|(_, r)| r);
        revs.next().is_some_and(|first| revs.any(|r| r != first))
    }

    /// How to leave a split: one revision for both (the first architecture's), or no static label.
    fn unify_fix(&self) -> String {
        let rev = self.intent.values().next().map(String::as_str).unwrap_or("<40-hex sha>");
        format!(
            "pin one revision for both: {} (or drop `version` from the dependency-metadata entry so uv builds to learn it)",
            self.pin_set(rev, None, self.lock.is_some())
        )
    }

    fn label_for(&self, arch: Arch) -> Option<String> {
        let rev = self.intent.get(&arch)?;
        Some(format!("{}+{}", self.base.as_ref()?, rev.get(..7).filter(|_| is_full_sha(rev))?))
    }
}

/// The pyproject's own intent for `arch` (--no-pins): the override-dependencies
/// entry (it wins in uv), else the revision most references name.
fn pyproject_intent(py: &Pyproject, arch: Arch) -> Option<String> {
    let candidates: Vec<&Reference> = py
        .refs
        .iter()
        .filter(|r| {
            matches!(r.kind, Kind::Requirement | Kind::Source) && r.archs.contains(&arch) && git_rev(r).is_some()
        })
        .collect();
    if let Some(o) = candidates.iter().find(|r| r.place == "tool.uv.override-dependencies") {
        return git_rev(o).map(str::to_string);
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &candidates {
        *counts.entry(git_rev(r).expect("filtered")).or_default() += 1;
    }
    counts.into_iter().max_by_key(|(_, n)| *n).map(|(r, _)| r.to_string())
}

fn short(rev: &str) -> &str {
    if is_full_sha(rev) {
        &rev[..7]
    } else {
        rev
    }
}

fn same_version(a: &str, b: &str) -> bool {
    matches!((Version::from_str(a), Version::from_str(b)), (Ok(x), Ok(y)) if x == y)
}

/// Judge all references; findings come merged (one per rule, file, arch and value, with every line named).
pub fn check(ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    let py = &ctx.py.refs;
    if py.is_empty() {
        out.push(
            Finding::new(
                "no-deepep",
                Severity::Error,
                &ctx.pyproject_path,
                "pyproject.toml does not reference DeepEP anywhere",
            )
            .fix(
                "check --project (the folder that holds the consumer's pyproject.toml) or the source name in pins.toml",
            ),
        );
        return out;
    }
    // Architectures the project installs DeepEP for.
    let mut used: Vec<Arch> = py
        .iter()
        .filter(|r| matches!(r.kind, Kind::Requirement | Kind::Source))
        .flat_map(|r| r.archs.clone())
        .collect();
    used.sort();
    used.dedup();
    let pins_name = if ctx.pins.is_some() { "pins.toml" } else { "the pyproject's intent (--no-pins)" };

    for r in py.iter().filter(|r| matches!(r.kind, Kind::Requirement | Kind::Source)) {
        let Some(g) = &r.git else {
            for &a in &r.archs {
                let pinned = py.iter().any(|o| {
                    o.archs.contains(&a)
                        && git_rev(o).is_some()
                        && (o.kind == Kind::Source || o.place == "tool.uv.override-dependencies")
                });
                if !pinned {
                    out.push(
                        Finding::new("unpinned", Severity::Error, &r.file, format!("{} requires DeepEP for {a} without a git revision, and no tool.uv.sources or override pins one", r.place))
                            .line(r.line)
                            .arch(a)
                            .fix(ctx.fix_for(a, false).unwrap_or_else(|| "pin DeepEP with `deep_ep @ git+<repo>@<40-hex sha>`".into())),
                    );
                }
            }
            continue;
        };
        if let Some(p) = ctx.pins {
            if !same_repo(&g.repo, &p.source.repo) {
                out.push(
                    Finding::new(
                        "source-repo",
                        Severity::Warning,
                        &r.file,
                        format!("{} takes DeepEP from another repository than pins.toml", r.place),
                    )
                    .line(r.line)
                    .expected_found(&p.source.repo, &g.repo),
                );
            }
        }
        let rev = g.rev.as_deref().unwrap_or("");
        if !is_full_sha(rev) {
            let what = if rev.is_empty() {
                "names no revision (it follows the default branch)".to_string()
            } else {
                format!("names `{}`, not a full commit", crate::input::excerpt(rev, 80))
            };
            let mut f = Finding::new(
                "rev-not-full-sha",
                Severity::Error,
                &r.file,
                format!("{} {what}: pins must be 40-hex commits", r.place),
            )
            .line(r.line);
            if let Some(fix) = r.archs.first().and_then(|a| ctx.fix_for(*a, false)) {
                f = f.fix(fix);
            }
            out.push(f);
        }
        for &a in &r.archs {
            match ctx.intent.get(&a) {
                Some(want) if want != rev => {
                    let rule = if ctx.pins.is_some() { "rev-mismatch" } else { "rev-inconsistent" };
                    out.push(
                        Finding::new(
                            rule,
                            Severity::Error,
                            &r.file,
                            format!(
                                "{} pins DeepEP for {a} to {}, {pins_name} to {}",
                                r.place,
                                short(rev),
                                short(want)
                            ),
                        )
                        .line(r.line)
                        .arch(a)
                        .expected_found(want, rev)
                        .fix(ctx.fix_for(a, false).expect("intent exists")),
                    );
                }
                Some(_) => {}
                None if ctx.pins.is_some() => out.push(
                    Finding::new(
                        "arch-unpinned",
                        Severity::Warning,
                        &r.file,
                        format!("{} installs DeepEP on {a}, which pins.toml does not pin", r.place),
                    )
                    .line(r.line)
                    .arch(a)
                    .fix(format!("deepep-forge pin set <40-hex sha> --arch {a}")),
                ),
                None => {}
            }
        }
    }
    if let Some(p) = ctx.pins {
        for a in p.pins.keys().filter(|a| !used.contains(a)) {
            out.push(
                Finding::new(
                    "arch-not-referenced",
                    Severity::Warning,
                    &ctx.pyproject_path,
                    format!("pins.toml pins {a}, but pyproject.toml installs DeepEP on {a} nowhere"),
                )
                .arch(*a)
                .fix(ctx.fix_for(*a, false).expect("pinned")),
            );
        }
    }

    // Labels: pyproject's static dependency-metadata version.
    let labels = |r: &Reference, rule: &str, archs: &[Arch], out: &mut Vec<Finding>| {
        let found = r.version.as_deref().unwrap_or_default();
        if Version::from_str(found).is_err() {
            out.push(
                Finding::new(
                    "label-invalid",
                    Severity::Error,
                    &r.file,
                    format!("{} `{found}` is not a PEP 440 version", r.place),
                )
                .line(r.line)
                .fix(used.first().and_then(|a| ctx.fix_for(*a, false)).unwrap_or_default()),
            );
            return;
        }
        for &a in archs {
            let Some(want) = ctx.label_for(a) else { continue };
            if !same_version(found, &want) {
                let relock = r.kind.in_lock();
                let msg = if relock {
                    format!(
                        "{} says {found}, but a fresh {a} build of {} is {want}: `uv sync --locked` rejects it",
                        r.place,
                        short(&ctx.intent[&a])
                    )
                } else {
                    format!("{} says {found}, but building {} for {a} gives {want}: uv trusts the label, a fresh build fails", r.place, short(&ctx.intent[&a]))
                };
                // With two revisions no per-architecture fix can make one static label right.
                let fix =
                    if ctx.split(&used) { ctx.unify_fix() } else { ctx.fix_for(a, relock).expect("intent exists") };
                out.push(
                    Finding::new(rule, Severity::Error, &r.file, msg)
                        .line(r.line)
                        .arch(a)
                        .expected_found(want, found)
                        .fix(fix),
                );
            }
        }
    };
    let static_labels: Vec<&Reference> = py.iter().filter(|r| r.kind == Kind::Label).collect();
    for r in &static_labels {
        labels(r, "stale-label", &used, &mut out);
    }

    // One static label, two revisions.
    let revs: Vec<(&Arch, &String)> = ctx.intent.iter().filter(|(a, _)| used.contains(a)).collect();
    if let (Some(label), [(a1, r1), (a2, r2), ..]) = (static_labels.first(), revs.as_slice()) {
        if ctx.split(&used) {
            let l = |a: &Arch| ctx.label_for(*a).unwrap_or_else(|| format!("a label for {}", short(&ctx.intent[a])));
            out.push(
                Finding::new(
                    "label-split",
                    Severity::Error,
                    &label.file,
                    format!(
                        "{a1} is pinned to {} (builds {}) and {a2} to {} (builds {}), but [[tool.uv.dependency-metadata]] gives every architecture one static version: \
                         whichever architecture it does not match fails `uv sync --locked` on a fresh build",
                        short(r1),
                        l(a1),
                        short(r2),
                        l(a2)
                    ),
                )
                .line(label.line)
                .expected_found("one revision for every architecture", format!("{a1} {}, {a2} {}", short(r1), short(r2)))
                .fix(ctx.unify_fix()),
            );
        }
    }

    if let Some(lock) = ctx.lock {
        lock_rules(ctx, lock, &used, &labels, &mut out);
    }
    merge(out)
}

/// The label rule, shared by pyproject and uv.lock: (reference, rule id, architectures, findings).
type LabelRule<'a> = dyn Fn(&Reference, &str, &[Arch], &mut Vec<Finding>) + 'a;

fn lock_rules(ctx: &Context, lock: &UvLock, used: &[Arch], labels: &LabelRule, out: &mut Vec<Finding>) {
    let py_wrong = out.iter().any(|f| f.severity == Severity::Error);
    let lock_fix = |a: Arch| {
        if py_wrong {
            ctx.fix_for(a, true).unwrap_or_default()
        } else {
            format!("uv lock --project {}", ctx.project.display())
        }
    };
    for r in &lock.refs {
        match r.kind {
            Kind::LockLabel => labels(r, "lock-label", used, out),
            Kind::LockTransitive => {
                for &a in &r.archs {
                    let (Some(want), Some(rev)) = (ctx.intent.get(&a), git_rev(r)) else { continue };
                    if want == rev {
                        continue;
                    }
                    let owner = r.owner.as_deref().unwrap_or("a dependency");
                    let (sev, msg) = if lock.overridden.contains(&a) {
                        (
                            Severity::Note,
                            format!(
                                "{owner} pins DeepEP {} for {a} itself; the project's override replaces it with {}",
                                short(rev),
                                short(want)
                            ),
                        )
                    } else {
                        (
                            Severity::Warning,
                            format!("{owner} pins DeepEP {} for {a} itself and no override replaces it", short(rev)),
                        )
                    };
                    let mut f = Finding::new("transitive-pin", sev, &r.file, msg)
                        .line(r.line)
                        .arch(a)
                        .expected_found(want, rev);
                    if sev == Severity::Warning {
                        f = f.fix(format!("add \"deep_ep @ git+<repo>@{want}\" to [tool.uv] override-dependencies"));
                    }
                    out.push(f);
                }
            }
            _ => {
                let Some(g) = &r.git else { continue };
                for &a in &r.archs {
                    let Some(want) = ctx.intent.get(&a) else { continue };
                    let rev = g.rev.as_deref().unwrap_or("");
                    if rev != want {
                        out.push(
                            Finding::new(
                                "lock-stale",
                                Severity::Error,
                                &r.file,
                                format!(
                                    "uv.lock {} has DeepEP {} for {a}; the intent is {}",
                                    r.place,
                                    short(rev),
                                    short(want)
                                ),
                            )
                            .line(r.line)
                            .arch(a)
                            .expected_found(want, rev)
                            .fix(lock_fix(a)),
                        );
                    } else if let Some(c) = g.commit.as_deref().filter(|c| *c != want && is_full_sha(want)) {
                        out.push(
                            Finding::new(
                                "fragment-mismatch",
                                Severity::Error,
                                &r.file,
                                format!("uv.lock {} requests {} but records commit {}", r.place, short(want), short(c)),
                            )
                            .line(r.line)
                            .arch(a)
                            .expected_found(want, c)
                            .fix(lock_fix(a)),
                        );
                    }
                }
                if r.kind == Kind::LockPackage {
                    labels(r, "lock-label", &r.archs, out);
                }
            }
        }
    }
    for &a in used.iter().filter(|a| ctx.intent.contains_key(a)) {
        if !lock.refs.iter().any(|r| r.kind == Kind::LockPackage && r.archs.contains(&a)) {
            out.push(
                Finding::new(
                    "lock-stale",
                    Severity::Error,
                    ctx.pyproject_path.with_file_name("uv.lock"),
                    format!("uv.lock locks no deep-ep package for {a}"),
                )
                .arch(a)
                .expected_found(&ctx.intent[&a], "none")
                .fix(lock_fix(a)),
            );
        }
    }
}

/// One finding per (rule, file, arch, expected, found): later places become "also at lines ...".
fn merge(findings: Vec<Finding>) -> Vec<Finding> {
    let mut out: Vec<(Finding, Vec<usize>)> = Vec::new();
    for f in findings {
        match out.iter_mut().find(|(o, _)| {
            o.rule == f.rule
                && o.file == f.file
                && o.arch == f.arch
                && o.expected == f.expected
                && o.found == f.found
                && o.severity == f.severity
        }) {
            Some((_, more)) => more.extend(f.line),
            None => out.push((f, Vec::new())),
        }
    }
    out.into_iter()
        .map(|(mut f, mut more)| {
            more.sort_unstable();
            more.dedup();
            if !more.is_empty() {
                let lines: Vec<String> = more.iter().map(|l| l.to_string()).collect();
                f.message.push_str(&format!(
                    " (also at line{} {})",
                    if more.len() > 1 { "s" } else { "" },
                    lines.join(", ")
                ));
            }
            f
        })
        .collect()
}
