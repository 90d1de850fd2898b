//! Group `lock check` findings into root causes: one cause, one fix. A rule
//! marks the kind of cause it saw (`rules::ADOPT`, `SPLIT`, `RELOCK`,
//! `LABEL`); findings that follow from another (a stale label or lock
//! *because* the pin moved) carry the root's kind, so they never form a cause
//! of their own. Findings without a kind group by rule and fix.
//! Pure: findings in, causes out; reads and prints nothing.
use forge_model::findings::{Cause, Finding, Severity};
use forge_model::pins::Arch;
use forge_os::line::Lines;

use super::rules::{self, Context};

/// The key findings group by: a cause kind (with the architecture where the fix names one), or a rule and its fix.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    Kind(&'static str, Option<Arch>),
    Rule(String, Option<Lines>),
}

/// Group findings (in report order) into causes, worst first; sets each finding's `cause`.
pub fn group(ctx: &Context, findings: Vec<Finding>) -> Vec<Cause> {
    let mut groups: Vec<(Key, Vec<Finding>)> = Vec::new();
    for f in findings {
        let key = key(ctx, &f);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(f),
            None => groups.push((key, vec![f])),
        }
    }
    let mut causes: Vec<Cause> = groups.into_iter().map(|(k, fs)| cause(ctx, k, fs)).collect();
    // One cause, one fix: every finding of a cause prints the cause's fix (never another
    // architecture's `pin set` beside the cause's own).
    for c in causes.iter_mut().filter(|c| c.fix.is_some()) {
        for f in &mut c.findings {
            f.fix = c.fix.clone();
        }
    }
    causes.sort_by_key(|c| c.severity);
    // Unique ids: a second cause of one kind gets `-2`, ...
    let mut seen: Vec<String> = Vec::new();
    for c in &mut causes {
        let base = c.id.clone();
        let mut n = 1;
        while seen.contains(&c.id) {
            n += 1;
            c.id = format!("{base}-{n}");
        }
        seen.push(c.id.clone());
        for f in &mut c.findings {
            f.cause = Some(c.id.clone());
        }
    }
    causes
}

fn key(ctx: &Context, f: &Finding) -> Key {
    // Two intended revisions under one static label: the one `pin set` that unifies them also
    // adopts the pin on each architecture and rewrites the label, so that is the root.
    let split = ctx.is_split() && ctx.has_static_label();
    match f.cause_kind {
        Some(k) if split && (k == rules::ADOPT || k == rules::LABEL || k == rules::SPLIT) => {
            Key::Kind(rules::SPLIT, None)
        }
        // One `pin set` adopts a unified intent for every architecture; a split intent needs one per architecture.
        Some(k) if k == rules::ADOPT || k == rules::LABEL => Key::Kind(k, (!ctx.unified()).then_some(f.arch).flatten()),
        Some(k) => Key::Kind(k, None),
        None => Key::Rule(f.rule.to_string(), f.fix.clone()),
    }
}

fn cause(ctx: &Context, key: Key, findings: Vec<Finding>) -> Cause {
    let severity = findings.iter().map(|f| f.severity).min().unwrap_or(Severity::Note);
    let any_arch = findings.iter().find_map(|f| f.arch);
    let (id, summary, fix) = match key {
        Key::Kind(kind, arch) => {
            let a = arch.or(any_arch);
            let id = match arch {
                Some(a) => format!("{kind}-{a}"),
                None => kind.to_string(),
            };
            let fix = match kind {
                k if k == rules::SPLIT => Some(ctx.split_fix()),
                k if k == rules::RELOCK => Some(ctx.relock_fix()),
                _ => a.or_else(|| ctx.intent.keys().next().copied()).and_then(|a| ctx.adopt_fix(a)),
            };
            (id, summary(ctx, kind, arch), fix.map(Lines::from))
        }
        Key::Rule(rule, fix) => {
            let summary = match findings.as_slice() {
                [one] => one.message.to_string(),
                many => rule_summary(&rule).unwrap_or(&many[0].message).to_string(),
            };
            (rule, summary, fix)
        }
    };
    Cause { id, severity, summary: summary.into(), fix, findings }
}

/// A full sha cut to 7 characters; a branch, tag or short sha shown whole.
fn short(rev: &str) -> &str {
    if forge_model::pins::is_full_sha(rev) {
        &rev[..7]
    } else {
        rev
    }
}

/// One line that names the root cause.
fn summary(ctx: &Context, kind: &str, arch: Option<Arch>) -> String {
    let intent_name = if ctx.pins.is_some() { "pins.toml" } else { "the project's own intent (--no-pins)" };
    let archs: Vec<Arch> = match arch {
        Some(a) => vec![a],
        None => ctx.intent.keys().copied().collect(),
    };
    let list = |f: &dyn Fn(Arch) -> Option<String>| -> String {
        let revs: Vec<(Arch, String)> = archs.iter().filter_map(|a| f(*a).map(|r| (*a, r))).collect();
        match revs.as_slice() {
            [(_, first), rest @ ..] if !rest.is_empty() && rest.iter().all(|(_, r)| r == first) => {
                format!("{} for every architecture", short(first))
            }
            _ => revs.iter().map(|(a, r)| format!("{a} {}", short(r))).collect::<Vec<_>>().join(", "),
        }
    };
    match kind {
        k if k == rules::ADOPT => format!(
            "the project never adopted {intent_name}'s revision: it pins DeepEP {}, {intent_name} {}; \
             the labels and uv.lock findings below follow from that",
            list(&|a| ctx.project_rev(a)),
            list(&|a| ctx.intent.get(&a).cloned())
        ),
        k if k == rules::SPLIT => format!(
            "{intent_name} pins the architectures to different revisions ({}), but pyproject.toml gives DeepEP one static \
             version label: no label can be right for both (the fix pins one revision for both; or drop `version` from \
             the dependency-metadata entry so uv builds to learn it)",
            list(&|a| ctx.intent.get(&a).cloned())
        ),
        k if k == rules::RELOCK => "uv.lock was not regenerated after pyproject.toml changed".into(),
        k if k == rules::BRANCH => format!(
            "pyproject.toml pins DeepEP to a branch or tag name ({}), not a commit: what uv installs moves with it",
            list(&|a| ctx.project_rev(a))
        ),
        _ => format!(
            "the static version label does not match what the pinned revision builds ({})",
            list(&|a| ctx.intent.get(&a).cloned())
        ),
    }
}

/// What a rule means, for a cause that holds several of its findings.
fn rule_summary(rule: &str) -> Option<&'static str> {
    Some(match rule {
        "transitive-pin" => "another package pins its own DeepEP",
        "fragment-mismatch" => "uv.lock records another commit than the revision it requests: uv.lock was changed after uv wrote it (uv refuses to read it)",
        "lock-torch" => "uv.lock installs another torch than DeepEP is built against",
        "lock-nvshmem" => "uv.lock's NVSHMEM is not proven to be the one DeepEP's device code is built with",
        "lock-nccl" => "uv.lock installs an NCCL DeepEP main cannot run with",
        "lock-torch-min" => "uv.lock installs a torch older than the pinned DeepEP states it needs",
        "lock-nvshmem-min" => "uv.lock installs an NVSHMEM older than the pinned DeepEP states it needs",
        "source-repo" => "DeepEP comes from another repository than pins.toml names",
        "unpinned" => "DeepEP is required without a git revision",
        "arch-unpinned" => "DeepEP is installed on an architecture pins.toml does not pin",
        "dockerfile-rev" => "a Dockerfile builds another DeepEP revision",
        "dockerfile-unverifiable" => "a Dockerfile computes a DeepEP setting in a way that cannot be verified",
        "dockerfile-arch-list" | "dockerfile-variant" => {
            "a Dockerfile builds DeepEP in a way pins.toml does not declare"
        }
        _ => return None,
    })
}
