//! The rules of `lock check` (docs/design.md, "Pinning and lockfiles"): per architecture one revision
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
use forge_model::findings::{Finding, Severity};
use forge_model::pins::{is_full_sha, Arch, Pins};

pub mod closure;
pub mod environment;

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
    /// What each revision is, read from its source (`lock::revision`; empty until read).
    pub revisions: super::revision::Revisions,
    /// The user's own `--source` and `--cache-dir`, carried into every printed `pin set`.
    pub source: Option<String>,
    pub cache_dir: Option<PathBuf>,
}

/// The repository pyproject.toml takes DeepEP at `rev` from.
fn git_of(py: &Pyproject, rev: &str) -> Option<String> {
    py.refs.iter().filter(|r| git_rev(r) == Some(rev)).find_map(|r| r.git.as_ref().map(|g| g.repo.clone()))
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
        Context {
            project,
            pins,
            pins_path,
            py,
            lock,
            pyproject_path: pyproject_path.to_path_buf(),
            intent,
            base,
            revisions: Default::default(),
            source: None,
            cache_dir: None,
        }
    }

    /// `deepep-forge pin set REV ...` that makes the project agree with the intent,
    /// runnable as printed: a name or short sha (only under --no-pins) becomes the
    /// commit uv.lock resolved it to, else it is resolved through `--source`.
    fn pin_set(&self, rev: &str, arch: Option<Arch>, relock: bool) -> String {
        self.pin_set_line(rev, arch, None, relock)
    }

    /// [`Context::pin_set`], to the index `(URL, variant)` when given.
    fn pin_set_line(&self, rev: &str, arch: Option<Arch>, index: Option<(&str, &str)>, relock: bool) -> String {
        let (rev, source) = self.runnable_rev(rev, arch);
        // The user's own --source resolves the revision as it did for this check.
        let source = self.source.clone().or(source);
        crate::lock::PinSetLine {
            rev: &rev,
            source: source.as_deref(),
            arch,
            project: Some(self.project),
            pins: self.pins.map(|_| self.pins_path),
            cache_dir: self.cache_dir.as_deref(),
            index,
            relock,
            ..Default::default()
        }
        .render()
    }

    /// `rev` as `pin set` takes it without guessing: a full sha as it is; else the
    /// commit uv.lock records for it (on `arch`, or any architecture), else `rev`
    /// with the repository the project names as `--source`.
    fn runnable_rev(&self, rev: &str, arch: Option<Arch>) -> (String, Option<String>) {
        if is_full_sha(rev) {
            return (rev.to_string(), None);
        }
        let archs: Vec<Arch> = arch.map(|a| vec![a]).unwrap_or_else(|| self.intent.keys().copied().collect());
        if let Some(c) = archs.iter().find_map(|a| self.locked_commit(*a, rev)) {
            return (c.to_string(), None);
        }
        let repo = git_of(self.py, rev)
            .filter(|r| forge_os::process::git::check_file_url(r).is_ok())
            .unwrap_or_else(|| "<DeepEP's git URL>".into());
        (rev.to_string(), Some(repo))
    }

    /// The full commit uv.lock resolved `rev` to on `arch` (`?rev=<rev>#<commit>` of its deep-ep package).
    fn locked_commit(&self, arch: Arch, rev: &str) -> Option<&str> {
        self.lock?
            .refs
            .iter()
            .filter(|r| r.kind == Kind::LockPackage && r.archs.contains(&arch))
            .filter_map(|r| r.git.as_ref())
            .find(|g| g.rev.as_deref() == Some(rev))
            .and_then(|g| g.commit.as_deref())
            .filter(|c| is_full_sha(c))
    }

    /// The fix for `arch`: one command for both architectures when the intent is one revision;
    /// `--relock` whenever the project has a lock (a rewritten pyproject.toml leaves it out of date).
    fn fix_for(&self, arch: Arch, relock: bool) -> Option<String> {
        let rev = self.intent.get(&arch)?;
        let unified = self.intent.values().all(|r| r == rev);
        Some(self.pin_set(rev, (!unified).then_some(arch), relock || self.lock.is_some()))
    }

    /// The used architectures are pinned to different revisions.
    fn split(&self, used: &[Arch]) -> bool {
        let mut revs = self.intent.iter().filter(|(a, _)| used.contains(a)).map(|(_, r)| r);
        revs.next().is_some_and(|first| revs.any(|r| r != first))
    }

    /// How to leave a split: one revision for both (the first architecture's), or no static label.
    fn unify_fix(&self) -> String {
        let rev = self.intent.values().next().map(String::as_str).unwrap_or("<40-hex sha>");
        self.pin_set(rev, None, self.lock.is_some())
    }

    fn label_for(&self, arch: Arch) -> Option<String> {
        self.label_of(self.intent.get(&arch)?)
    }

    /// The label a build of `rev` gets (`<base>+<short sha>`), for a full sha: the base read
    /// from the source at `rev` (`lock::revision`), else pins.toml's `base_version` (or the
    /// labels' under --no-pins) for an intended revision only; another revision's is not known.
    fn label_of(&self, rev: &str) -> Option<String> {
        let base = match self.revisions.get(rev) {
            Some(i) => &i.base_version,
            None if self.intent.values().any(|r| r == rev) => self.base.as_ref()?,
            None => return None,
        };
        Some(forge_model::patches::label(base, rev.get(..7).filter(|_| is_full_sha(rev))?, &[]))
    }

    /// Every label a wheel of the intended revision for `arch` may carry: the exact
    /// build's, then each pins.toml variant's pinned at that revision whose patches
    /// relabel it (`<base>+<short>.p<hash>`, `patches::label`), `variant`'s first.
    /// A wheel under any of them is pins.toml's revision, never another's.
    fn labels_for(&self, arch: Arch, variant: Option<&str>) -> Vec<String> {
        let Some(exact) = self.label_for(arch) else { return Vec::new() };
        let mut out = vec![exact.clone()];
        let (Some(pins), Some(rev)) = (self.pins, self.intent.get(&arch)) else { return out };
        let base = exact.split('+').next().unwrap_or(&exact);
        // A variant pinned at the same revision (of any architecture: a requirement without a
        // marker names one label for both) relabels that revision, never another.
        let same_rev = |v: &&forge_model::pins::Variant| pins.pins.get(&v.arch).is_some_and(|p| &p.rev == rev);
        let mut variants: Vec<&forge_model::pins::Variant> = pins.variants.iter().filter(same_rev).collect();
        variants.sort_by_key(|v| Some(v.name.as_str()) != variant);
        for v in variants {
            let Ok(patches) = forge_store::patch::for_variant(pins, v) else { continue };
            let l = forge_model::patches::label(base, &rev[..7], &patches);
            if !out.contains(&l) {
                match Some(v.name.as_str()) == variant && !patches.is_empty() {
                    true => out.insert(0, l),
                    false => out.push(l),
                }
            }
        }
        out
    }

    /// The revision pyproject.toml makes uv install for `arch` (its override, else its most common pin).
    pub fn project_rev(&self, arch: Arch) -> Option<String> {
        pyproject_intent(self.py, arch)
    }

    /// The architectures whose pyproject.toml revision differs from the intent (pins.toml not adopted).
    pub fn moved(&self) -> Vec<Arch> {
        self.intent
            .iter()
            .filter(|(a, want)| self.project_rev(**a).is_some_and(|r| &r != *want))
            .map(|(a, _)| *a)
            .collect()
    }

    /// The intent names one revision for every pinned architecture.
    pub fn unified(&self) -> bool {
        let mut revs = self.intent.values();
        revs.next().is_some_and(|first| revs.all(|r| r == first))
    }

    /// `deepep-forge pin set` for `arch` (or both when the intent is unified), relocking when there is a lock.
    pub fn adopt_fix(&self, arch: Arch) -> Option<String> {
        self.fix_for(arch, self.lock.is_some())
    }

    /// `uv lock` for the project.
    pub fn relock_fix(&self) -> String {
        format!("uv lock --project {}", self.project.display())
    }

    /// How to leave a split: see `unify_fix`.
    pub fn split_fix(&self) -> String {
        self.unify_fix()
    }

    /// pyproject.toml gives DeepEP a static version (`[[tool.uv.dependency-metadata]]`).
    pub fn has_static_label(&self) -> bool {
        self.py.refs.iter().any(|r| r.kind == Kind::Label)
    }

    /// The revision uv.lock locks deep-ep at for `arch` (its `[[package]]` source).
    fn locked_rev(&self, arch: Arch) -> Option<&str> {
        self.lock?
            .refs
            .iter()
            .find(|r| r.kind == Kind::LockPackage && r.archs.contains(&arch))
            .and_then(|r| r.git.as_ref()?.rev.as_deref())
    }

    /// The used architectures (see `check`) are pinned to different revisions.
    pub fn is_split(&self) -> bool {
        self.split(&used_archs(self.py))
    }
}

/// Architectures the project installs DeepEP for.
fn used_archs(py: &Pyproject) -> Vec<Arch> {
    let mut used: Vec<Arch> = py
        .refs
        .iter()
        .filter(|r| matches!(r.kind, Kind::Requirement | Kind::Source))
        .flat_map(|r| r.archs.clone())
        .collect();
    used.sort();
    used.dedup();
    used
}

/// Root-cause kinds a rule can see (grouped by `lock::causes`).
pub const ADOPT: &str = "pin-not-adopted";
pub const BRANCH: &str = "branch-pin";
pub const SPLIT: &str = "label-split";
pub const RELOCK: &str = "lock-out-of-date";
pub const LABEL: &str = "label-wrong";

/// What a wrong label does in uv (measured, tests/it/uv_claims.rs).
const WRONG_LABEL_EFFECT: &str =
    "uv.lock records that version without building, `uv sync` installs the real one anyway, \
     and because the two differ every later `uv sync` uninstalls and reinstalls deep-ep (`uv lock --check` and \
     `uv sync --locked` do not notice)";

/// What a lock that disagrees with pyproject.toml does in uv (measured, tests/it/uv_claims.rs).
const STALE_LOCK_EFFECT: &str =
    "the lock is out of date: `uv sync --locked` fails (\"The lockfile at `uv.lock` needs to be updated\")";

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

/// Where in the files a rule looks; `check` walks the phases in this order
/// (the order findings are reported in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Each requirement or source in pyproject.toml.
    Requirements,
    /// pins.toml against the whole pyproject.toml.
    Pins,
    /// Each static label in pyproject.toml.
    Labels,
    /// The static label against every architecture at once.
    Split,
    /// Each DeepEP entry of uv.lock.
    LockEntries,
    /// uv.lock as a whole.
    Lock,
}

const PHASES: [Phase; 6] =
    [Phase::Requirements, Phase::Pins, Phase::Labels, Phase::Split, Phase::LockEntries, Phase::Lock];

/// How a rule is called: once per reference, once per reference and architecture, or once.
#[derive(Clone, Copy)]
enum Judge {
    Ref(fn(&Judging, &Reference, &mut Vec<Finding>)),
    RefArch(fn(&Judging, &Reference, Arch, &mut Vec<Finding>)),
    Once(fn(&Judging, &mut Vec<Finding>)),
}

/// A lock-check rule: its id (docs/findings.md), where it looks, the function named after it.
struct Rule {
    id: &'static str,
    phase: Phase,
    judge: Judge,
}

/// Every lock-check rule, in report order within each phase. `no-deepep` stops
/// the check before these run; `merge` then joins repeated findings.
const RULES: &[Rule] = &[
    Rule { id: "unpinned", phase: Phase::Requirements, judge: Judge::Ref(unpinned) },
    Rule { id: "source-repo", phase: Phase::Requirements, judge: Judge::Ref(source_repo) },
    Rule { id: "fork-pin", phase: Phase::Requirements, judge: Judge::Ref(fork_pin) },
    Rule { id: "branch-pin", phase: Phase::Requirements, judge: Judge::Ref(branch_pin) },
    Rule { id: "rev-not-full-sha", phase: Phase::Requirements, judge: Judge::Ref(rev_not_full_sha) },
    Rule { id: "rev-mismatch", phase: Phase::Requirements, judge: Judge::RefArch(rev_mismatch) },
    Rule { id: "rev-inconsistent", phase: Phase::Requirements, judge: Judge::RefArch(rev_inconsistent) },
    Rule { id: "arch-unpinned", phase: Phase::Requirements, judge: Judge::RefArch(arch_unpinned) },
    Rule { id: "arch-not-referenced", phase: Phase::Pins, judge: Judge::Once(arch_not_referenced) },
    Rule { id: "label-invalid", phase: Phase::Labels, judge: Judge::Ref(label_invalid) },
    Rule { id: "stale-label", phase: Phase::Labels, judge: Judge::Ref(stale_label) },
    Rule { id: "label-split", phase: Phase::Split, judge: Judge::Once(label_split) },
    Rule { id: "lock-stale", phase: Phase::LockEntries, judge: Judge::RefArch(lock_stale) },
    Rule { id: "fragment-mismatch", phase: Phase::LockEntries, judge: Judge::RefArch(fragment_mismatch) },
    Rule { id: "transitive-pin", phase: Phase::LockEntries, judge: Judge::RefArch(transitive_pin) },
    Rule { id: "label-invalid", phase: Phase::LockEntries, judge: Judge::Ref(label_invalid) },
    Rule { id: "lock-label", phase: Phase::LockEntries, judge: Judge::Ref(lock_label) },
    Rule { id: "lock-stale", phase: Phase::Lock, judge: Judge::Once(lock_stale_unlocked_arch) },
    Rule { id: "lock-torch", phase: Phase::Lock, judge: Judge::Once(environment::lock_torch) },
    Rule { id: "lock-nvshmem", phase: Phase::Lock, judge: Judge::Once(environment::lock_nvshmem) },
    Rule { id: "lock-nccl", phase: Phase::Lock, judge: Judge::Once(environment::lock_nccl) },
    Rule { id: "lock-torch-min", phase: Phase::Lock, judge: Judge::Once(environment::lock_torch_min) },
    Rule { id: "lock-nvshmem-min", phase: Phase::Lock, judge: Judge::Once(environment::lock_nvshmem_min) },
];

/// The rule ids `lock check` can report (docs/findings.md lists each).
pub fn rule_ids() -> Vec<&'static str> {
    let mut ids: Vec<&'static str> = Vec::new();
    for id in std::iter::once("no-deepep").chain(RULES.iter().map(|r| r.id)) {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

/// What every rule judges against: the context and what `check` derived from it once.
pub struct Judging<'c, 'a> {
    ctx: &'c Context<'a>,
    /// Architectures the project installs DeepEP for.
    used: Vec<Arch>,
    /// Architectures whose pyproject.toml revision differs from the intent.
    moved: Vec<Arch>,
    /// Some pyproject.toml rule found an error (set before the lock phases).
    py_wrong: bool,
}

/// Judge all references; findings come merged (one per rule, file, arch and value, with every line named).
pub fn check(ctx: &Context) -> Vec<Finding> {
    if ctx.py.refs.is_empty() {
        return vec![no_deepep(ctx)];
    }
    let mut j = Judging { ctx, used: used_archs(ctx.py), moved: ctx.moved(), py_wrong: false };
    let mut out = Vec::new();
    for phase in PHASES {
        if phase == Phase::LockEntries {
            j.py_wrong = out.iter().any(|f: &Finding| f.severity == Severity::Error);
        }
        let rules: Vec<&Rule> = RULES.iter().filter(|r| r.phase == phase).collect();
        match phase {
            Phase::Requirements => {
                let refs = ctx.py.refs.iter().filter(|r| matches!(r.kind, Kind::Requirement | Kind::Source));
                refs.for_each(|r| judge_ref(&j, &rules, r, &r.archs, &mut out));
            }
            Phase::Labels => {
                let labels = ctx.py.refs.iter().filter(|r| r.kind == Kind::Label);
                labels.for_each(|r| judge_ref(&j, &rules, r, &[], &mut out));
            }
            Phase::LockEntries => {
                let refs = ctx.lock.map(|l| l.refs.as_slice()).unwrap_or_default();
                refs.iter().for_each(|r| judge_ref(&j, &rules, r, &r.archs, &mut out));
            }
            Phase::Lock if ctx.lock.is_none() => {}
            Phase::Pins | Phase::Split | Phase::Lock => {
                for rule in &rules {
                    if let Judge::Once(f) = rule.judge {
                        f(&j, &mut out);
                    }
                }
            }
        }
    }
    merge(out)
}

/// Run a phase's rules on one reference: per-architecture rules for each of
/// `archs` first (in architecture order), then the per-reference rules.
fn judge_ref(j: &Judging, rules: &[&Rule], r: &Reference, archs: &[Arch], out: &mut Vec<Finding>) {
    // Requirements report per reference first, then per architecture; lock entries the other way round.
    let arch_first = r.kind.in_lock();
    let per_ref = |out: &mut Vec<Finding>| {
        rules.iter().filter_map(|x| if let Judge::Ref(f) = x.judge { Some(f) } else { None }).for_each(|f| f(j, r, out))
    };
    if !arch_first {
        per_ref(out);
    }
    for &a in archs {
        for rule in rules {
            if let Judge::RefArch(f) = rule.judge {
                f(j, r, a, out);
            }
        }
    }
    if arch_first {
        per_ref(out);
    }
}

fn no_deepep(ctx: &Context) -> Finding {
    Finding::new("no-deepep", Severity::Error, &ctx.pyproject_path, "pyproject.toml does not reference DeepEP anywhere")
        .fix("check --project (the folder that holds the consumer's pyproject.toml) or the source name in pins.toml")
}

fn unpinned(j: &Judging, r: &Reference, out: &mut Vec<Finding>) {
    if r.git.is_some() {
        return;
    }
    let (ctx, py) = (j.ctx, &j.ctx.py.refs);
    for &a in &r.archs {
        let pinned = py.iter().any(|o| {
            o.archs.contains(&a)
                && git_rev(o).is_some()
                && (o.kind == Kind::Source || o.place == "tool.uv.override-dependencies")
        });
        if !pinned {
            out.push(
                Finding::new("unpinned", Severity::Error, &r.file, format!("{} requires DeepEP for {a} without a git revision, and no tool.uv.sources or override pins one", r.place))
                    .at(r.line, r.col)
                    .arch(a)
                    .fix(ctx.fix_for(a, false).unwrap_or_else(|| "pin DeepEP with `deep_ep @ git+<repo>@<40-hex sha>`".into())),
            );
        }
    }
}

/// `source-repo`: the project takes DeepEP from another repository than pins.toml's (a team
/// that moved pins.toml from a fork to upstream, or back, and a project not yet moved). It
/// says whether the commit is the one pins.toml pins (only the repository moved), and its fix
/// is the `pin set --git` that takes that commit from pins.toml's repository.
fn source_repo(j: &Judging, r: &Reference, out: &mut Vec<Finding>) {
    let (Some(g), Some(p)) = (&r.git, j.ctx.pins) else { return };
    if same_repo(&g.repo, &p.source.repo) {
        return;
    }
    let intended = r.archs.iter().find_map(|a| j.ctx.intent.get(a));
    let same_commit = intended.is_some_and(|i| g.rev.as_deref() == Some(i.as_str()));
    let what = match (same_commit, intended) {
        (true, Some(i)) => format!(
            ": the commit {} pins.toml pins, from {} where pins.toml now names {} (only the repository moved)",
            &i[..i.len().min(7)],
            g.repo,
            p.source.repo
        ),
        _ => String::new(),
    };
    let mut f = Finding::new(
        "source-repo",
        Severity::Warning,
        &r.file,
        format!("{} takes DeepEP from another repository than pins.toml{what}", r.place),
    )
    .at(r.line, r.col)
    .expected_found(&p.source.repo, &g.repo);
    if let Some(rev) = intended {
        f = f.fix(format!("{} --git", j.ctx.pin_set(rev, None, j.ctx.lock.is_some())));
    }
    out.push(f);
}

/// DeepEP's own repository: the upstream of a fork when pins.toml names none.
pub const DEEPEP_UPSTREAM: &str = "https://github.com/deepseek-ai/DeepEP";

/// `fork-pin` (a note): the consumer pins DeepEP from a fork. pins.toml names
/// a fork (`[source] upstream`): a reference to that fork says so, with the
/// upstream; otherwise a reference to a repository of DeepEP's name under
/// another owner than pins.toml's repository (without pins.toml, than
/// deepseek-ai's) is called a fork of it.
fn fork_pin(j: &Judging, r: &Reference, out: &mut Vec<Finding>) {
    let Some(g) = &r.git else { return };
    let message = match j.ctx.pins {
        Some(p) => match &p.source.upstream {
            Some(u) if same_repo(&g.repo, &p.source.repo) => format!(
                "{} pins DeepEP from the fork {} (pins.toml's source), whose upstream is {}@{}",
                r.place, g.repo, u.repo, u.branch
            ),
            Some(u) if !same_repo(&g.repo, &u.repo) => format!(
                "{} pins DeepEP from {}, which is neither pins.toml's fork {} nor its upstream {}@{}",
                r.place, g.repo, p.source.repo, u.repo, u.branch
            ),
            Some(_) => return,
            // pins.toml names the other repository: `source-repo` says so and how to follow it.
            None if looks_like_fork(&g.repo, &p.source.repo) => format!(
                "{} pins DeepEP from the fork {} of pins.toml's {} (pins.toml names no upstream; if the fork is not intended, see source-repo)",
                r.place, g.repo, p.source.repo
            ),
            None => return,
        },
        None if looks_like_fork(&g.repo, DEEPEP_UPSTREAM) => {
            format!("{} pins DeepEP from the fork {} of upstream {DEEPEP_UPSTREAM}", r.place, g.repo)
        }
        None => return,
    };
    out.push(
        Finding::new("fork-pin", Severity::Note, &r.file, message)
            .at(r.line, r.col)
            .fix("nothing to change if the fork is intended; to record where it stands on upstream, set [source] upstream and upstream_branch in pins.toml (`plan` then shows its merge base and how many commits it carries)"),
    );
}

/// `repo` is `of`'s repository name on the same host under another owner
/// (`github.com/sgl-project/DeepEP` of `github.com/deepseek-ai/DeepEP`).
fn looks_like_fork(repo: &str, of: &str) -> bool {
    fn parts(u: &str) -> Option<(String, String, String)> {
        let u = u.trim().trim_end_matches('/');
        let u = u.strip_suffix(".git").unwrap_or(u);
        let u = u.split_once("://").map(|(_, r)| r).unwrap_or(u);
        let u = u.split_once('@').filter(|(user, _)| !user.contains('/')).map(|(_, r)| r).unwrap_or(u);
        let (host, path) = u.split_once(['/', ':'])?;
        let (owner, name) = path.rsplit_once('/')?;
        Some((host.to_ascii_lowercase(), owner.to_ascii_lowercase(), name.to_ascii_lowercase()))
    }
    match (parts(repo), parts(of)) {
        (Some((h, o, n)), Some((h2, o2, n2))) => h == h2 && n == n2 && o != o2,
        _ => false,
    }
}

fn rev_not_full_sha(j: &Judging, r: &Reference, out: &mut Vec<Finding>) {
    let Some(g) = &r.git else { return };
    let rev = g.rev.as_deref().unwrap_or("");
    if is_full_sha(rev) || is_name(rev) {
        return;
    }
    let what = if rev.is_empty() {
        "names no revision (it follows the default branch)".to_string()
    } else {
        format!("names `{}`, not a full commit", forge_os::input::excerpt(rev, 80))
    };
    let mut f = Finding::new(
        "rev-not-full-sha",
        Severity::Error,
        &r.file,
        format!("{} {what}: pins must be 40-hex commits", r.place),
    )
    .at(r.line, r.col);
    if let Some(fix) = r.archs.first().and_then(|a| j.ctx.fix_for(*a, false)) {
        // Under --no-pins the short sha is the intent itself: nothing to adopt, its own cause.
        f = f.fix(fix);
        if j.ctx.pins.is_some() {
            f = f.cause_kind(ADOPT);
        }
    }
    out.push(f);
}

/// A branch or tag name (not empty, not a hex sha or prefix of one): it moves under the project.
pub fn is_name(rev: &str) -> bool {
    let sha_or_prefix = (4..=40).contains(&rev.len()) && rev.bytes().all(|b| b.is_ascii_hexdigit());
    !rev.is_empty() && !sha_or_prefix
}

/// A requirement pins DeepEP to a branch or tag: pyproject.toml records a name, uv.lock the commit it
/// resolved to when it was locked; relocking moves it to wherever the name points then.
fn branch_pin(j: &Judging, r: &Reference, out: &mut Vec<Finding>) {
    let Some(name) = git_rev(r).filter(|rev| is_name(rev)) else { return };
    let ctx = j.ctx;
    let locked = r.archs.iter().find_map(|a| ctx.locked_commit(*a, name));
    let name_shown = forge_os::input::excerpt(name, 80);
    let lock = match locked {
        Some(c) => format!("uv.lock records the commit it resolved to when it was locked, {}", short(c)),
        None => "no uv.lock records which commit it resolved to".to_string(),
    };
    let mut f = Finding::new(
        "branch-pin",
        Severity::Error,
        &r.file,
        format!(
            "{} pins DeepEP to `{name_shown}`, a branch or tag name, not a commit: {lock}; \
             `uv lock --upgrade` moves it to wherever `{name_shown}` points then, with no change to pyproject.toml",
            r.place
        ),
    )
    .at(r.line, r.col)
    .expected_found("a full 40-hex commit", name);
    if let Some(fix) = r.archs.first().and_then(|a| ctx.fix_for(*a, false)) {
        f = f.fix(fix).cause_kind(if ctx.pins.is_some() { ADOPT } else { BRANCH });
    }
    out.push(f);
}

/// A requirement pins another revision than pins.toml.
fn rev_mismatch(j: &Judging, r: &Reference, a: Arch, out: &mut Vec<Finding>) {
    if j.ctx.pins.is_some() {
        rev_differs(j, r, a, "rev-mismatch", "pins.toml", out)
    }
}

/// Under --no-pins, a requirement pins another revision than the pyproject's own intent.
fn rev_inconsistent(j: &Judging, r: &Reference, a: Arch, out: &mut Vec<Finding>) {
    if j.ctx.pins.is_none() {
        rev_differs(j, r, a, "rev-inconsistent", "the pyproject's intent (--no-pins)", out)
    }
}

/// `r` pins DeepEP for `a` to another revision than the intent (`rule`, named `pins_name`).
fn rev_differs(j: &Judging, r: &Reference, a: Arch, rule: &str, pins_name: &str, out: &mut Vec<Finding>) {
    let ctx = j.ctx;
    let Some(g) = &r.git else { return };
    let rev = g.rev.as_deref().unwrap_or("");
    let Some(want) = ctx.intent.get(&a).filter(|w| *w != rev) else { return };
    out.push(
        Finding::new(
            rule,
            Severity::Error,
            &r.file,
            format!("{} pins DeepEP for {a} to {}, {pins_name} to {}", r.place, short(rev), short(want)),
        )
        .at(r.line, r.col)
        .arch(a)
        .expected_found(want, rev)
        .fix(ctx.fix_for(a, false).expect("intent exists"))
        .cause_kind(ADOPT),
    );
}

fn arch_unpinned(j: &Judging, r: &Reference, a: Arch, out: &mut Vec<Finding>) {
    if r.git.is_none() || j.ctx.pins.is_none() || j.ctx.intent.contains_key(&a) {
        return;
    }
    out.push(
        Finding::new(
            "arch-unpinned",
            Severity::Warning,
            &r.file,
            format!("{} installs DeepEP on {a}, which pins.toml does not pin", r.place),
        )
        .at(r.line, r.col)
        .arch(a)
        .fix(arch_unpinned_fix(j, r, a)),
    );
}

/// `pin set` with the revision the project installs on `a` (into pins.toml): for `a`
/// alone, unless the project installs that revision on every architecture.
fn arch_unpinned_fix(j: &Judging, r: &Reference, a: Arch) -> String {
    let Some(rev) = git_rev(r).filter(|r| !r.is_empty()) else {
        return format!("deepep-forge pin set <40-hex sha> --arch {a}");
    };
    let everywhere = j.used.iter().all(|u| j.ctx.project_rev(*u).as_deref() == Some(rev));
    j.ctx.pin_set(rev, (!everywhere).then_some(a), false)
}

fn arch_not_referenced(j: &Judging, out: &mut Vec<Finding>) {
    let Some(p) = j.ctx.pins else { return };
    for a in p.pins.keys().filter(|a| !j.used.contains(a)) {
        out.push(
            Finding::new(
                "arch-not-referenced",
                Severity::Warning,
                &j.ctx.pyproject_path,
                format!("pins.toml pins {a}, but pyproject.toml installs DeepEP on {a} nowhere"),
            )
            .arch(*a)
            .fix(j.ctx.fix_for(*a, false).expect("pinned")),
        );
    }
}

/// A label (pyproject's static version, or uv.lock's) that is not a PEP 440 version.
fn label_invalid(j: &Judging, r: &Reference, out: &mut Vec<Finding>) {
    let labelled = matches!(r.kind, Kind::Label | Kind::LockLabel) || (r.kind == Kind::LockPackage && r.git.is_some());
    if !labelled {
        return;
    }
    let found = r.version.as_deref().unwrap_or_default();
    if Version::from_str(found).is_err() {
        out.push(
            Finding::new(
                "label-invalid",
                Severity::Error,
                &r.file,
                format!("{} `{found}` is not a PEP 440 version", r.place),
            )
            .at(r.line, r.col)
            .fix(j.used.first().and_then(|a| j.ctx.fix_for(*a, false)).unwrap_or_default()),
        );
    }
}

/// pyproject.toml's static dependency-metadata version is not the pin's label.
fn stale_label(j: &Judging, r: &Reference, out: &mut Vec<Finding>) {
    label_rule(j, r, "stale-label", &j.used, out)
}

/// uv.lock's dependency-metadata or deep-ep package version is not the pin's label.
fn lock_label(j: &Judging, r: &Reference, out: &mut Vec<Finding>) {
    match r.kind {
        Kind::LockLabel => label_rule(j, r, "lock-label", &j.used, out),
        Kind::LockPackage if r.git.is_some() => label_rule(j, r, "lock-label", &r.archs, out),
        _ => {}
    }
}

/// The label rule, shared by pyproject and uv.lock (a label that is not PEP 440 is `label-invalid`'s).
fn label_rule(j: &Judging, r: &Reference, rule: &str, archs: &[Arch], out: &mut Vec<Finding>) {
    let ctx = j.ctx;
    let found = r.version.as_deref().unwrap_or_default();
    if Version::from_str(found).is_err() {
        return;
    }
    for &a in archs {
        let Some(want) = ctx.label_for(a) else { continue };
        if same_version(found, &want) {
            continue;
        }
        let relock = r.kind.in_lock();
        let (msg, stale) = label_message(ctx, r, found, a, &want);
        // With two revisions no per-architecture fix can make one static label right.
        let split = ctx.split(&j.used);
        let fix = if split { ctx.unify_fix() } else { ctx.fix_for(a, relock).expect("intent exists") };
        let kind = if j.moved.contains(&a) {
            ADOPT
        } else if stale {
            RELOCK
        } else if split {
            SPLIT
        } else {
            LABEL
        };
        out.push(
            Finding::new(rule, Severity::Error, &r.file, msg)
                .at(r.line, r.col)
                .arch(a)
                .expected_found(want, found)
                .fix(fix)
                .cause_kind(kind),
        );
    }
}

/// One static label, two revisions.
fn label_split(j: &Judging, out: &mut Vec<Finding>) {
    let ctx = j.ctx;
    let label = ctx.py.refs.iter().find(|r| r.kind == Kind::Label);
    let revs: Vec<(&Arch, &String)> = ctx.intent.iter().filter(|(a, _)| j.used.contains(a)).collect();
    let (Some(label), [(a1, r1), (a2, r2), ..]) = (label, revs.as_slice()) else { return };
    if !ctx.split(&j.used) {
        return;
    }
    let l = |a: &Arch| ctx.label_for(*a).unwrap_or_else(|| format!("a label for {}", short(&ctx.intent[a])));
    out.push(
        Finding::new(
            "label-split",
            Severity::Error,
            &label.file,
            format!(
                "{a1} is pinned to {} (builds {}) and {a2} to {} (builds {}), but [[tool.uv.dependency-metadata]] gives every architecture one static version: \
                 on the architecture it does not match, uv.lock records a version no build produces and every `uv sync` reinstalls deep-ep",
                short(r1),
                l(a1),
                short(r2),
                l(a2)
            ),
        )
        .at(label.line, label.col)
        .expected_found("one revision for every architecture", format!("{a1} {}, {a2} {}", short(r1), short(r2)))
        .fix(ctx.unify_fix())
        .cause_kind(SPLIT),
    );
}

/// The fix for a stale lock entry on `a`: `pin set` when pyproject.toml is wrong too, else `uv lock`.
fn lock_fix(j: &Judging, a: Arch) -> String {
    if j.py_wrong {
        j.ctx.fix_for(a, true).unwrap_or_default()
    } else {
        format!("uv lock --project {}", j.ctx.project.display())
    }
}

/// The cause kind of a stale lock entry: the pin moved, or only the lock is behind.
fn lock_kind(j: &Judging, a: Arch) -> &'static str {
    if j.moved.contains(&a) {
        ADOPT
    } else {
        RELOCK
    }
}

/// A uv.lock entry (manifest override, package source, requires-dist, a dependent's source) names another revision.
fn lock_stale(j: &Judging, r: &Reference, a: Arch, out: &mut Vec<Finding>) {
    let ctx = j.ctx;
    if matches!(r.kind, Kind::LockLabel | Kind::LockTransitive) {
        return;
    }
    let (Some(g), Some(want)) = (&r.git, ctx.intent.get(&a)) else { return };
    let rev = g.rev.as_deref().unwrap_or("");
    if rev == want {
        return;
    }
    let msg = match ctx.project_rev(a).as_deref() {
        Some(p) if p == rev => format!(
            "uv.lock {} has DeepEP {} for {a}, as pyproject.toml does; {pins} pins {}",
            r.place,
            short(rev),
            short(want),
            pins = if ctx.pins.is_some() { "pins.toml" } else { "the intent" },
        ),
        Some(p) => format!(
            "uv.lock {} has DeepEP {} for {a}, pyproject.toml {}: {STALE_LOCK_EFFECT}",
            r.place,
            short(rev),
            short(p)
        ),
        None => format!("uv.lock {} has DeepEP {} for {a}; the intent is {}", r.place, short(rev), short(want)),
    };
    out.push(
        Finding::new("lock-stale", Severity::Error, &r.file, msg)
            .at(r.line, r.col)
            .arch(a)
            .expected_found(want, rev)
            .fix(lock_fix(j, a))
            .cause_kind(lock_kind(j, a)),
    );
}

/// uv.lock requests the pinned revision but records another commit for it.
fn fragment_mismatch(j: &Judging, r: &Reference, a: Arch, out: &mut Vec<Finding>) {
    if matches!(r.kind, Kind::LockLabel | Kind::LockTransitive) {
        return;
    }
    let (Some(g), Some(want)) = (&r.git, j.ctx.intent.get(&a)) else { return };
    if g.rev.as_deref().unwrap_or("") != want {
        return;
    }
    let Some(c) = g.commit.as_deref().filter(|c| c != want && is_full_sha(want)) else { return };
    // pyproject.toml asks for the pin: only uv.lock is wrong (edited, or written for another
    // commit), a cause of its own; else it follows from pyproject.toml's change.
    let follows = j.py_wrong || j.moved.contains(&a);
    let why = if follows {
        ""
    } else {
        ": uv.lock was changed after uv wrote it (pyproject.toml asks for the pin); uv refuses to read a lock whose exact revision and commit differ, so it is written anew"
    };
    // uv cannot update a lock it refuses to parse: only a new one is a fix that runs.
    let fix = if follows {
        lock_fix(j, a)
    } else {
        let w = |p: &Path| forge_os::printer::shell_word(&p.display().to_string());
        format!("rm {} && uv lock --project {}", w(&r.file), w(j.ctx.project))
    };
    let f = Finding::new(
        "fragment-mismatch",
        Severity::Error,
        &r.file,
        format!("uv.lock {} requests {} but records commit {}{why}", r.place, short(want), short(c)),
    )
    .at(r.line, r.col)
    .arch(a)
    .expected_found(want, c)
    .fix(fix);
    out.push(if follows { f.cause_kind(lock_kind(j, a)) } else { f });
}

/// Another package pins its own DeepEP: a note when the project's override replaces it, else a warning.
fn transitive_pin(j: &Judging, r: &Reference, a: Arch, out: &mut Vec<Finding>) {
    let (ctx, Some(lock)) = (j.ctx, j.ctx.lock) else { return };
    if r.kind != Kind::LockTransitive {
        return;
    }
    let (Some(want), Some(rev)) = (ctx.intent.get(&a), git_rev(r)) else { return };
    if want == rev {
        return;
    }
    let owner = r.owner.as_deref().unwrap_or("a dependency");
    // The revision the override really installs on `a` (uv.lock [manifest] overrides).
    let replacement = lock
        .refs
        .iter()
        .find(|o| o.kind == Kind::LockManifest && o.place == "[manifest] overrides" && o.archs.contains(&a))
        .and_then(git_rev);
    let (sev, msg) = if lock.overridden.contains(&a) {
        let with = match replacement {
            Some(o) if o == want => format!("with {}", short(o)),
            Some(o) => format!(
                "with {} ({} pins {})",
                short(o),
                if ctx.pins.is_some() { "pins.toml" } else { "the intent" },
                short(want)
            ),
            None => "with its own pin".to_string(),
        };
        (
            Severity::Note,
            format!("{owner} pins DeepEP {} for {a} itself; the project's override replaces it {with}", short(rev)),
        )
    } else {
        (Severity::Warning, format!("{owner} pins DeepEP {} for {a} itself and no override replaces it", short(rev)))
    };
    let mut f = Finding::new("transitive-pin", sev, &r.file, msg).at(r.line, r.col).arch(a).expected_found(want, rev);
    if sev == Severity::Warning {
        let repo =
            ctx.pins.map(|p| p.source.repo.clone()).or_else(|| git_of(ctx.py, want)).unwrap_or_else(|| "<repo>".into());
        f = f.fix(format!("add \"deep_ep @ git+{repo}@{want}\" to [tool.uv] override-dependencies"));
    }
    out.push(f);
}

/// uv.lock locks no deep-ep package for an architecture pyproject.toml installs it on.
fn lock_stale_unlocked_arch(j: &Judging, out: &mut Vec<Finding>) {
    let (ctx, Some(lock)) = (j.ctx, j.ctx.lock) else { return };
    for &a in j.used.iter().filter(|a| ctx.intent.contains_key(a)) {
        if !lock.refs.iter().any(|r| r.kind == Kind::LockPackage && r.archs.contains(&a)) {
            out.push(
                Finding::new(
                    "lock-stale",
                    Severity::Error,
                    ctx.pyproject_path.with_file_name("uv.lock"),
                    format!("uv.lock locks no deep-ep package for {a}, which pyproject.toml installs there: {STALE_LOCK_EFFECT}"),
                )
                .arch(a)
                .expected_found(&ctx.intent[&a], "none")
                .fix(lock_fix(j, a))
                .cause_kind(lock_kind(j, a)),
            );
        }
    }
}

/// What a wrong label at `r` means for `arch`, in uv's real terms.
/// Returns the message and whether the finding only says the lock is out of date.
fn label_message(ctx: &Context, r: &Reference, found: &str, arch: Arch, want: &str) -> (String, bool) {
    let want_short = short(&ctx.intent[&arch]);
    let project = ctx.project_rev(arch);
    if r.kind.in_lock() {
        // A lock entry for another revision than pyproject's, or with another label: the lock is stale.
        let locked = match r.kind {
            Kind::LockLabel => ctx.locked_rev(arch),
            _ => r.git.as_ref().and_then(|g| g.rev.as_deref()),
        };
        if let (Some(rev), Some(p)) = (locked, project.as_deref()) {
            if rev != p {
                let msg = format!(
                    "{} says {found} for the {} uv.lock locks on {arch}, pyproject.toml installs {}: {STALE_LOCK_EFFECT}",
                    r.place,
                    short(rev),
                    short(p)
                );
                return (msg, true);
            }
        }
        let py_label = ctx.py.refs.iter().find(|p| p.kind == Kind::Label).and_then(|p| p.version.as_deref());
        if let Some(py_label) = py_label.filter(|l| !same_version(l, found)) {
            let msg = format!(
                "{} says {found}, pyproject.toml's dependency-metadata says {py_label}: {STALE_LOCK_EFFECT}",
                r.place
            );
            return (msg, true);
        }
    }
    let built = project.as_deref().and_then(|rev| ctx.label_of(rev).map(|l| (rev, l)));
    let lock_label =
        ctx.lock.and_then(|l| l.refs.iter().find(|x| x.kind == Kind::LockLabel)).and_then(|x| x.version.as_deref());
    let msg = match built {
        Some((rev, real)) if same_version(found, &real) => format!(
            "{} says {found}, right for the {} the project installs on {arch} today; adopting {}'s {want_short} makes it {want}",
            r.place,
            short(rev),
            if ctx.pins.is_some() { "pins.toml" } else { "the intent" },
        ),
        Some((rev, real)) => match lock_label.filter(|l| r.kind == Kind::Label && !same_version(l, found)) {
            // pyproject.toml's label changed but the lock was not regenerated.
            Some(l) => format!(
                "{} says {found}, but a build of {} for {arch} is {real}; uv.lock still records {l}, so {STALE_LOCK_EFFECT} \
                 (relocked as it is, uv.lock would record {found} and every `uv sync` would reinstall deep-ep)",
                r.place,
                short(rev)
            ),
            None => format!(
                "{} says {found}, but a build of {} for {arch} is {real}: {WRONG_LABEL_EFFECT}",
                r.place,
                short(rev)
            ),
        },
        None => format!("{} says {found}, but a build of {want_short} for {arch} is {want}: {WRONG_LABEL_EFFECT}", r.place),
    };
    (msg, false)
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
                f.message.push(format!(
                    " (also at line{} {})",
                    if more.len() > 1 { "s" } else { "" },
                    lines.join(", ")
                ));
            }
            f
        })
        .collect()
}

/// An index-sourced DeepEP and what vouches for its wheels: the consumer's
/// index source, the deep-ep wheels uv.lock pins, and the index manifests
/// (signature already verified against the reader's trusted keys).
pub struct IndexChain<'a> {
    pub source: &'a super::index::IndexSource,
    pub wheels: &'a [super::index::LockedWheel],
    pub manifests: &'a [forge_store::index::manifest::Manifest],
    pub lock_path: &'a Path,
    /// The variants the project's Dockerfiles build DeepEP for.
    pub needs: &'a [crate::lock::dockerfile::Need],
    /// uv.lock's `requires-python`: the Pythons the lock must serve.
    pub requires_python: Option<&'a str>,
    /// The manifest next to the index URL, read because a key is trusted, that
    /// could not be read or verified: its URL and why (`index-not-verified`).
    pub unread: Option<(String, String)>,
}

/// Publish the consumer's variant at pins.toml's revision, then relock: every value the
/// tool knows filled in (the variant the index URL names, the pins file, the signing key's
/// file where DEEPEP_FORGE_SIGNING_KEY_FILE names it); the rest in the `<...>` form.
fn republish(ctx: &Context, chain: &IndexChain) -> String {
    let w = |s: &str| forge_os::printer::shell_word(s);
    let variant = chain.source.variant.as_deref().map_or_else(|| "'<VARIANT>'".to_string(), w);
    let pins = match ctx.pins_path != Path::new(forge_model::pins::DEFAULT_PATH) {
        true => format!(" --pins {}", w(&ctx.pins_path.display().to_string())),
        false => String::new(),
    };
    let key = forge_store::cache::cmd::signing_key_file_word().unwrap_or_else(|| "'<KEY_FILE>'".into());
    format!("deepep-forge publish{pins} --variant {variant} --signing-key {key} --out '<OUT_DIR>' (pins.toml's revision), then `uv lock --refresh-package deep-ep`")
}

/// The Pythons pins.toml's `[toolchain] python` lists (a list, the matrix), as minors;
/// empty for a single version, which names only the registry toolchain's default.
fn pins_pythons(ctx: &Context) -> Vec<String> {
    let tc = ctx.pins.and_then(|p| p.toolchain.as_ref()).filter(|t| t.python_matrix);
    let listed = tc.map(|t| t.pythons.as_slice()).unwrap_or_default();
    listed.iter().map(|v| v.split('.').take(2).collect::<Vec<_>>().join(".")).collect()
}

/// Whether uv.lock's `requires-python` admits Python `minor` (unparsable: admitted,
/// uv itself refuses such a lock).
fn admits(requires_python: Option<&str>, minor: &str) -> bool {
    use std::str::FromStr;
    let Some(spec) = requires_python.and_then(|r| pep440_rs::VersionSpecifiers::from_str(r).ok()) else {
        return true;
    };
    // A minor is admitted when some release of it is: its first, or a later one under an upper bound.
    ["0", "99"]
        .iter()
        .any(|patch| pep440_rs::Version::from_str(&format!("{minor}.{patch}")).is_ok_and(|v| spec.contains(&v)))
}

/// `lock-python-missing`: for each architecture uv.lock pins deep-ep wheels for,
/// every Python pins.toml builds that the lock's `requires-python` admits needs
/// its `cpXY` wheel in the lock; without it `uv sync` on that Python finds no
/// deep-ep to install.
pub fn lock_python_missing(ctx: &Context, chain: &IndexChain) -> Vec<Finding> {
    let pythons = pins_pythons(ctx);
    let mut out = Vec::new();
    for arch in Arch::ALL {
        let here: Vec<&super::index::LockedWheel> =
            chain.wheels.iter().filter(|w| w.arch.as_deref() == Some(arch.as_str())).collect();
        let Some(first) = here.first() else { continue };
        for py in pythons.iter().filter(|py| admits(chain.requires_python, py)) {
            if here.iter().any(|w| w.python.as_deref() == Some(py.as_str())) {
                continue;
            }
            let has: Vec<&str> = here.iter().filter_map(|w| w.python.as_deref()).collect();
            let msg = format!(
                "uv.lock pins deep-ep wheels for {arch} on Python {} but none for Python {py}, which pins.toml's [toolchain] python builds and the lock's requires-python `{}` admits: `uv sync` on {py} ({arch}) finds no deep-ep",
                if has.is_empty() { "-".to_string() } else { has.join(", ") },
                chain.requires_python.unwrap_or("(none)")
            );
            out.push(
                Finding::new("lock-python-missing", Severity::Error, chain.lock_path, msg)
                    .at(first.line, 1)
                    .arch(arch)
                    .fix(format!("publish the Python {py} wheel (deepep-forge publish with pins.toml's Python list, --toolchain registry), then `uv lock --refresh-package deep-ep`")),
            );
        }
    }
    out
}

/// `lock-python-uncovered`: the lock's `requires-python` admits a Python below
/// the highest one pins.toml's list holds that the list lacks (`>=3.10` with
/// `["3.11", ...]`). uv locks such a project without complaint (exit 0, no
/// `cp310` wheel in the lock) and `uv sync` on that Python finds no deep-ep.
/// A warning: the project may never run there. Above the list's highest
/// Python an open `requires-python` (`>=3.11`) is the norm and not reported.
pub fn lock_python_uncovered(ctx: &Context, chain: &IndexChain) -> Vec<Finding> {
    let pythons = pins_pythons(ctx);
    let minor = |p: &str| p.split_once('.').and_then(|(_, m)| m.parse::<u32>().ok());
    let Some(top) = pythons.iter().filter_map(|p| minor(p)).max() else { return Vec::new() };
    let Some(first) = chain.wheels.first() else { return Vec::new() };
    let uncovered: Vec<String> = (0..top)
        .map(|m| format!("3.{m}"))
        .filter(|py| !pythons.contains(py) && admits(chain.requires_python, py) && chain.requires_python.is_some())
        .collect();
    if uncovered.is_empty() {
        return Vec::new();
    }
    let msg = format!(
        "uv.lock's requires-python `{}` admits Python {}, which pins.toml's [toolchain] python ({}) does not build: uv locks without a deep-ep wheel for {} and `uv sync` there finds none",
        chain.requires_python.unwrap_or_default(),
        uncovered.join(", "),
        pythons.join(", "),
        if uncovered.len() == 1 { "it" } else { "them" }
    );
    vec![Finding::new("lock-python-uncovered", Severity::Warning, chain.lock_path, msg)
        .at(first.line, 1)
        .fix(format!("raise the project's requires-python to >={} (then `uv lock`), or add the Pythons to [toolchain] python and publish their wheels", pythons.first().cloned().unwrap_or_default()))]
}

/// `lock-python-unlisted`: a locked deep-ep wheel for a Python pins.toml's
/// `[toolchain] python` does not list is a build pins.toml does not describe.
pub fn lock_python_unlisted(ctx: &Context, chain: &IndexChain) -> Vec<Finding> {
    let pythons = pins_pythons(ctx);
    if pythons.is_empty() {
        return Vec::new();
    }
    chain
        .wheels
        .iter()
        .filter_map(|w| w.python.as_deref().filter(|py| !pythons.iter().any(|p| p == py)).map(|py| (w, py)))
        .map(|(w, py)| {
            let msg = format!(
                "uv.lock pins the deep-ep wheel {} for Python {py}, which pins.toml's [toolchain] python ({}) does not list",
                w.file,
                pythons.join(", ")
            );
            Finding::new("lock-python-unlisted", Severity::Error, chain.lock_path, msg)
                .at(w.line, 1)
                .fix(format!("add \"{py}\" to [toolchain] python in pins.toml and publish its wheel, or narrow the project's requires-python and `uv lock`"))
        })
        .collect()
}

/// `lock-wheel-unattested`: every deep-ep wheel uv.lock pins must be listed,
/// by sha256, in a signed manifest, and that manifest's provenance must be
/// pins.toml's revision for the wheel's architecture and the consumer's variant.
pub fn lock_wheel_unattested(ctx: &Context, chain: &IndexChain) -> Vec<Finding> {
    let mut out = Vec::new();
    let rule = |msg: String, line: usize| {
        Finding::new("lock-wheel-unattested", Severity::Error, chain.lock_path, msg)
            .at(line, 1)
            .fix(republish(ctx, chain))
    };
    for w in chain.wheels {
        let arch = Arch::ALL.into_iter().find(|a| w.arch.as_deref() == Some(a.as_str()));
        let Some(sha) = &w.sha256 else {
            let f = rule(format!("uv.lock pins the deep-ep wheel {} without a sha256 hash", w.file), w.line);
            out.push(f.fix(
                "relock from the index, whose pages give each wheel's sha256: `uv lock --refresh-package deep-ep`",
            ));
            continue;
        };
        let Some(entry) = chain.manifests.iter().find_map(|m| m.by_sha256(sha)) else {
            // No manifest read: the cause is that (`index-not-verified`), not the lock.
            if !chain.manifests.is_empty() {
                out.push(not_in_manifest(w, sha, chain));
            }
            continue;
        };
        let p = &entry.provenance;
        let want = arch.and_then(|a| ctx.intent.get(&a));
        if want.is_some_and(|r| *r != p.rev) {
            let f = rule(
                format!(
                    "the deep-ep wheel {} was built from revision {}, not pins.toml's {}",
                    w.file,
                    short(&p.rev),
                    short(want.unwrap())
                ),
                w.line,
            );
            out.push(match arch {
                Some(a) => f.arch(a).expected_found(want.unwrap().clone(), p.rev.clone()),
                None => f,
            });
        }
        let want = match variant_index(chain) {
            // In the variant index the wheel's own label says which variant it is.
            true => label_variant(ctx, &w.file),
            false => chain.source.variant.as_deref().map(|v| variant_for(ctx, v, &p.arch)),
        };
        if let Some(want) = want {
            if want != p.variant {
                let f = rule(
                    format!(
                        "the deep-ep wheel {} is variant {}'s build, the consumer installs variant {want}",
                        w.file, p.variant
                    ),
                    w.line,
                );
                // The index of that variant beside the one pyproject.toml names; the revision pins.toml's.
                let base = chain.source.url.as_deref().and_then(|u| {
                    let u = u.trim_end_matches('/').strip_suffix("/simple")?;
                    Some(u.rsplit_once('/')?.0.to_string())
                });
                let rev = arch.and_then(|a| ctx.intent.get(&a)).cloned().unwrap_or_else(|| p.rev.clone());
                let index = (base.as_deref().unwrap_or("<URL>"), p.variant.as_str());
                let fix = ctx.pin_set_line(&rev, None, Some(index), true);
                out.push(f.fix(format!("point the consumer at variant {}'s index: {fix}", p.variant)));
            }
        }
    }
    out
}

/// A locked wheel whose sha256 no signed manifest lists. Either the manifest
/// lists a wheel of that name with other bytes (the server's file changed, or
/// uv.lock was locked before the index was published again), or it lists no
/// wheel of that name (the manifest given is another index's, or uv.lock was
/// locked from another index): each with the fix of its cause.
fn not_in_manifest(w: &super::index::LockedWheel, sha: &str, chain: &IndexChain) -> Finding {
    let named = chain.manifests.iter().flat_map(|m| &m.wheels).find(|e| e.wheel == w.file);
    let norm = |u: &str| u.trim_end_matches('/').to_string();
    let moved = match (&w.registry, &chain.source.url) {
        (Some(locked), Some(now)) if norm(locked) != norm(now) => Some((locked.clone(), now.clone())),
        _ => None,
    };
    // `verify` takes the variant's folder (`.../demo/`), pyproject.toml names its `simple/` page.
    let index = chain
        .source
        .url
        .as_deref()
        .map(|u| u.trim_end_matches('/'))
        .map(|u| format!("{}/", u.strip_suffix("/simple").unwrap_or(u)))
        .unwrap_or_else(|| "<index URL>".into());
    let (msg, fix) = match (named, moved) {
        (_, Some((locked, now))) => (
            format!(
                "uv.lock is stale: it pins the deep-ep wheel {} (sha256 {sha}) from {locked}, and pyproject.toml now installs DeepEP from {now} (moved by `pin set --index`, not relocked yet); nothing says a server file was changed",
                w.file
            ),
            "relock from the index pyproject.toml names: `uv lock --refresh-package deep-ep`".to_string(),
        ),
        (Some(e), None) => (
            format!(
                "uv.lock pins the deep-ep wheel {} with sha256 {sha}, the signed manifest lists it with sha256 {}: the file uv.lock recorded is not the one published (the server's copy was changed, or uv.lock was locked from an earlier publish at this URL)",
                w.file, e.sha256
            ),
            format!("find which: `deepep-forge verify {index}{}` names a changed server file (publish the index again into an empty --out and serve that); if it verifies, relock: `uv lock --refresh-package deep-ep`", trusted_key_flag()),
        ),
        (None, None) => (
            format!(
                "the deep-ep wheel {} (sha256 {sha}) that uv.lock pins is in no signed manifest given: that manifest is another index's, or uv.lock was locked from another index",
                w.file
            ),
            format!(
                "pass the manifest of the index pyproject.toml names (`--index-manifest index` fetches {}), and relock from that index: `uv lock --refresh-package deep-ep`",
                chain.source.url.as_deref().and_then(super::index::manifest_url).unwrap_or_else(|| "<variant>/index.json next to it".into())
            ),
        ),
    };
    Finding::new("lock-wheel-unattested", Severity::Error, chain.lock_path, msg).at(w.line, 1).fix(fix)
}

/// ` --trusted-key '<NAME:BASE64>'` for a printed command, unless the reader
/// already trusts keys (DEEPEP_FORGE_TRUSTED_KEYS, the user config), which
/// every command reads by itself.
fn trusted_key_flag() -> &'static str {
    match forge_store::cache::config::trusted_keys(&[]).is_ok_and(|k| !k.is_empty()) {
        true => "",
        false => " --trusted-key '<NAME:BASE64>'",
    }
}

/// The variant whose `arch` wheels index `index` serves: the member of that
/// architecture (pins.toml `index`), else the index's own name.
fn variant_for(ctx: &Context, index: &str, arch: &str) -> String {
    let members = ctx.pins.map(|p| p.index_members(index)).unwrap_or_default();
    members.iter().find(|v| v.arch.as_str() == arch).map_or(index.to_string(), |v| v.name.clone())
}

/// `index-variant-mismatch`: the index the consumer points at serves another
/// variant than the one its URL names, or a variant pins.toml does not declare.
pub fn index_variant_mismatch(ctx: &Context, chain: &IndexChain) -> Vec<Finding> {
    let s = chain.source;
    let Some(v) = s.variant.as_deref() else { return Vec::new() };
    let mut out = Vec::new();
    // pins.toml's revision (one for both architectures) and the index's base URL filled in;
    // the variant is the user's choice, in the `<...>` form.
    let revs: std::collections::BTreeSet<&String> = ctx.intent.values().collect();
    let rev = match revs.len() {
        1 => revs.into_iter().next().map_or("<REV>", |r| r.as_str()),
        _ => "<REV>",
    };
    let base = s.url.as_deref().and_then(|u| {
        let u = u.trim_end_matches('/').strip_suffix("/simple")?;
        Some(u.rsplit_once('/')?.0.to_string())
    });
    let fix = format!(
        "{} (the variant your Dockerfiles and recipes need)",
        ctx.pin_set_line(rev, None, Some((base.as_deref().unwrap_or("<URL>"), "<VARIANT>")), true)
    );
    let finding = |msg: String| {
        Finding::new("index-variant-mismatch", Severity::Error, &ctx.pyproject_path, msg).at(s.line, 1).fix(fix.clone())
    };
    if v == forge_store::index::VARIANT_INDEX {
        // One index serves every variant (publish --variant-wheels): the labels are judged per wheel.
        return chain
            .manifests
            .iter()
            .filter(|m| m.variant != v)
            .map(|m| {
                finding(format!(
                    "tool.uv.sources points at the variant index `{}`, but its manifest is variant `{}`'s",
                    s.name, m.variant
                ))
            })
            .collect();
    }
    if let Some(p) = ctx.pins {
        if !p.variants.iter().any(|x| x.name == v) {
            out.push(finding(format!(
                "tool.uv.sources points at the index of variant `{v}`, which {} does not declare",
                p.path.display()
            )));
        }
    }
    for m in chain.manifests.iter().filter(|m| m.variant != v) {
        out.push(finding(format!(
            "tool.uv.sources points at index `{}` for variant `{v}`, but its manifest is variant `{}`'s",
            s.name, m.variant
        )));
    }
    // What the Dockerfiles build: the index must serve one of the variants each build needs.
    let Some(p) = ctx.pins else { return out };
    let served = |n: &String| p.variant(n).is_ok_and(|x| x.index_name() == v);
    for need in chain.needs.iter().filter(|n| !n.variants.iter().any(served)) {
        let at = match need.line {
            0 => need.file.display().to_string(),
            n => format!("{}:{n}", need.file.display()),
        };
        let names: Vec<String> = need.variants.iter().map(|n| format!("`{n}`")).collect();
        let names = if names.is_empty() { "(none declared in pins.toml)".to_string() } else { names.join(" or ") };
        let f = finding(format!(
            "tool.uv.sources points at the index of variant `{v}`, but {at} {} variant {names}: the project would install a wheel its {} does not fit",
            need.what,
            if need.line == 0 { "recipe" } else { "image" }
        ));
        out.push(f.expected_found(need.variants.join(" or "), v.to_string()));
    }
    out
}

/// `index-label`: the `deep_ep==LABEL` requirement of an index-sourced DeepEP
/// (and the version uv.lock resolved) must be the label of pins.toml's
/// revision for each architecture it applies to: the index serves wheels by
/// version, so the label is what selects the revision.
pub fn index_label(ctx: &Context, chain: &IndexChain) -> Vec<Finding> {
    let mut out = Vec::new();
    let variant = chain.source.variant.as_deref().unwrap_or("VARIANT");
    let locked = ctx.lock.map(|l| l.refs.as_slice()).unwrap_or_default();
    let refs = ctx
        .py
        .refs
        .iter()
        .filter(|r| r.kind == Kind::Requirement)
        .chain(locked.iter().filter(|r| r.kind == Kind::LockPackage));
    for r in refs {
        let Some(found) = r.version.as_deref() else { continue };
        for &a in &r.archs {
            let wants = ctx.labels_for(a, chain.source.variant.as_deref());
            let (Some(want), Some(rev)) = (wants.first().cloned(), ctx.intent.get(&a)) else { continue };
            if wants.iter().any(|w| same_version(found, w)) {
                continue;
            }
            let url = chain
                .source
                .url
                .as_deref()
                .and_then(|u| u.strip_suffix(&format!("/{variant}/simple")))
                .unwrap_or("URL");
            // One fix for pyproject.toml and uv.lock alike (pin set says to relock), so both land under one cause.
            let fix = ctx.pin_set_line(rev, None, Some((url, variant)), false);
            out.push(
                Finding::new(
                    "index-label",
                    Severity::Error,
                    &r.file,
                    format!(
                        "{} `{found}` selects another revision's wheel than pins.toml's {} for {a} (label {want})",
                        r.place,
                        short(rev)
                    ),
                )
                .at(r.line, r.col)
                .arch(a)
                .expected_found(want, found)
                .fix(fix),
            );
        }
    }
    out
}

/// Whether the consumer's index is the variant index (`publish --variant-wheels`).
fn variant_index(chain: &IndexChain) -> bool {
    chain.source.variant.as_deref() == Some(forge_store::index::VARIANT_INDEX)
}

/// The pins.toml variant whose PEP 825 label a wheel file name carries.
fn label_variant(ctx: &Context, file: &str) -> Option<String> {
    let label = forge_wheel::wheel::WheelName::parse(file)?.variant?;
    let pins = ctx.pins?;
    pins.variants
        .iter()
        .find(|v| forge_store::index::variants::label(&v.name).is_ok_and(|l| l == label))
        .map(|v| v.name.clone())
}

/// `lock-variant-unknown`: uv.lock names a variant wheel (PEP 825 label in its
/// file name) whose label no variant of pins.toml gives.
pub fn lock_variant_unknown(ctx: &Context, chain: &IndexChain) -> Vec<Finding> {
    let Some(pins) = ctx.pins else { return Vec::new() };
    let mut out = Vec::new();
    for w in chain.wheels {
        let Some(label) = forge_wheel::wheel::WheelName::parse(&w.file).and_then(|n| n.variant) else { continue };
        if label_variant(ctx, &w.file).is_some() {
            continue;
        }
        let known: Vec<String> =
            pins.variants.iter().filter_map(|v| forge_store::index::variants::label(&v.name).ok()).collect();
        out.push(
            Finding::new(
                "lock-variant-unknown",
                Severity::Error,
                chain.lock_path,
                format!(
                    "uv.lock pins the deep-ep variant wheel {} (label `{label}`), which no variant of {} describes (its labels: {})",
                    w.file,
                    pins.path.display(),
                    known.join(", ")
                ),
            )
            .at(w.line, 1)
            .fix("relock against the variant index published from this pins.toml (`uv lock --refresh-package deep-ep`), or declare the variant in pins.toml and publish it with --variant-wheels"),
        );
    }
    out
}

/// `index-not-verified`: an index-sourced DeepEP checked without any manifest.
pub fn index_not_verified(chain: &IndexChain) -> Vec<Finding> {
    if let Some((url, why)) = &chain.unread {
        return vec![Finding::new(
            "index-not-verified",
            Severity::Error,
            chain.lock_path,
            format!(
                "deep-ep comes from index `{}`, and its signed manifest {url} could not be read or verified with the keys trusted here: {why}",
                chain.source.name
            ),
        )
        .fix(format!(
            "serve the index's signed manifest at {url} (or pass --index-manifest FILE with a copy of it), signed by a key trusted here (`[cache] trusted-keys` in {}, or {})",
            forge_store::cache::config::config_path().map_or("$XDG_CONFIG_HOME/deepep-forge/config.toml".into(), |p| p.display().to_string()),
            forge_store::cache::config::TRUSTED_KEYS_ENV
        ))];
    }
    if !chain.manifests.is_empty() || chain.wheels.is_empty() {
        return Vec::new();
    }
    vec![Finding::new(
        "index-not-verified",
        Severity::Warning,
        chain.lock_path,
        format!(
            "deep-ep comes from index `{}`, and no signed manifest was given: its wheels were not checked",
            chain.source.name
        ),
    )
    .fix(format!(
        "trust the index's public key (what `deepep-forge cache keygen` printed for its signing key): `trusted-keys = [\"<NAME:BASE64>\"]` under `[cache]` in {}, or {}; then its <variant>/index.json next to the index URL is read",
        forge_store::cache::config::config_path().map_or("$XDG_CONFIG_HOME/deepep-forge/config.toml".into(), |p| p.display().to_string()),
        forge_store::cache::config::TRUSTED_KEYS_ENV
    ))]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_id_is_documented() {
        let doc = include_str!("../../../../docs/findings.md");
        for id in rule_ids() {
            assert!(doc.contains(&format!("| `{id}` |")), "docs/findings.md has no row for `{id}`");
        }
    }

    #[test]
    fn branch_and_tag_names_are_told_from_shas() {
        for name in ["hybrid-ep", "main", "v1.2.1", "feature/x", "abc"] {
            assert!(is_name(name), "{name}");
        }
        for sha in ["", "17cfb81", "17cfb817bccec3a9c247013360cc550c2bac441e", "ABCD"] {
            assert!(!is_name(sha), "{sha}");
        }
    }
}
