//! Whether a plan's environment fits what setup.py at the revision really
//! does: one function per rule, each over the [`Interface`] and the
//! environment the plan gives the build. Refusals (the build would not do
//! what the plan says, or would stop) and notes (the plan says so).
use std::collections::BTreeMap;

use super::{Interface, Must, PLAN_OWNED};

/// Why a plan is refused at this revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `file:line` in the source (or the file) that decides it.
    pub at: String,
    pub message: String,
    pub hint: String,
}

type Env = BTreeMap<String, String>;

/// A flag as DeepEP's setup.py reads it (`1`, `true`, `on`, ...; a non-zero int).
pub fn on(env: &Env, name: &str) -> bool {
    env.get(name).is_some_and(|v| {
        let v = v.trim().to_ascii_lowercase();
        ["1", "true", "t", "yes", "y", "on"].contains(&v.as_str()) || v.parse::<i64>().is_ok_and(|n| n != 0)
    })
}

impl Interface {
    /// The variant key that sets `name` at this revision, if any.
    fn key_of(&self, name: &str) -> Option<&str> {
        self.knob(name).and_then(|k| k.key.as_deref())
    }

    fn shown(&self, env: &Env, name: &str) -> String {
        match (env.get(name), self.key_of(name)) {
            (Some(v), Some(key)) => format!("{name}={v} (from the variant's `{key}`)"),
            (Some(v), None) => format!("{name}={v}"),
            (None, _) => format!("{name} unset"),
        }
    }

    /// The first reason the plan's knob environment `env` cannot build what it says here.
    pub fn refusal(&self, env: &Env) -> Option<Refusal> {
        asserted_by_setup_py(self, env)
            .or_else(|| switched_by_file(self, env))
            .or_else(|| submodule_missing(self, env))
            .or_else(|| assigned_by_setup_py(self, env))
            .or_else(|| variant_key_unread(self, env))
    }

    /// What the plan must say about the build with its whole environment `env`.
    pub fn notes(&self, env: &Env) -> Vec<String> {
        let mut out = assigned_conditionally(self, env);
        out.extend(none_used_as_string(self, env));
        out.extend(unknown_switch(self));
        out
    }
}

/// What a plan's build compiles against: (version, where it was read) for torch and NVSHMEM.
#[derive(Debug, Clone, Copy, Default)]
pub struct Built<'a> {
    pub torch: Option<(&'a str, &'a str)>,
    pub nvshmem: Option<(&'a str, &'a str)>,
}

impl Interface {
    /// The first minimum the revision states (README, docs/nvshmem.md) that the build's
    /// torch or NVSHMEM is below; a version not read is no refusal (the plan says so).
    pub fn below_stated(&self, b: &Built) -> Option<Refusal> {
        torch_below_stated(self, b).or_else(|| nvshmem_below_stated(self, b))
    }
}

/// The build's torch is older than the torch the revision states it needs.
fn torch_below_stated(i: &Interface, b: &Built) -> Option<Refusal> {
    let min = i.runtime.torch_min.as_ref()?;
    let (v, from) = b.torch?;
    super::runtime::below(v, &min.version)?.then(|| Refusal {
        at: min.at.clone(),
        message: format!(
            "{} states \"{}\", and the build compiles against torch {v} (read from {from})",
            min.at, min.text
        ),
        hint: format!(
            "build against torch {} or newer: set [toolchain] torch in pins.toml (--toolchain registry) or install it into the build Python (--toolchain system); or pin a revision whose requirements allow torch {v}",
            min.version
        ),
    })
}

/// The NVSHMEM the build links is older than the NVSHMEM the revision states it needs.
fn nvshmem_below_stated(i: &Interface, b: &Built) -> Option<Refusal> {
    let min = i.runtime.nvshmem_min.as_ref()?;
    let (v, from) = b.nvshmem?;
    super::runtime::below(v, &min.version)?.then(|| Refusal {
        at: min.at.clone(),
        message: format!(
            "{} states \"{}\", and the build links NVSHMEM {v} (read from {from})",
            min.at, min.text
        ),
        hint: format!(
            "build with NVSHMEM {} or newer: set [toolchain] nvshmem in pins.toml (--toolchain registry), or the variant's nvshmem_dir (or the build Python's nvidia-nvshmem-cu* package) to an NVSHMEM {} or newer",
            min.version, min.version
        ),
    })
}

/// An unconditional `assert` of setup.py the plan's environment fails.
fn asserted_by_setup_py(i: &Interface, env: &Env) -> Option<Refusal> {
    i.requires.iter().filter(|r| !PLAN_OWNED.contains(&r.name.as_str())).find_map(|r| {
        let said = if r.message.is_empty() { String::new() } else { format!(": {:?}", r.message) };
        let (fails, message, hint) = match r.must {
            Must::Set => (
                env.get(&r.name).is_none_or(|v| v.is_empty()),
                format!("{} asserts {} is set{said}, and the plan leaves it unset", r.at, r.name),
                match i.key_of(&r.name) {
                    Some(key) => format!("set `{key}` in the variant"),
                    None => format!("set env = {{ {} = \"...\" }} in the variant", r.name),
                },
            ),
            Must::Off if r.name == "HYBRID_EP_MULTINODE" => (
                on(env, &r.name),
                format!("DeepEP at this revision refuses multinode builds: {} asserts multinode is off{said}", r.at),
                "make the variant single-node (multinode = false), or pin a hybrid-ep revision that builds multinode (its setup.py has no such assert)".to_string(),
            ),
            Must::Off => (
                on(env, &r.name),
                format!("{} asserts {} is off{said}, and the plan sets {}", r.at, r.name, i.shown(env, &r.name)),
                format!("leave {} off in the variant", r.name),
            ),
            Must::Absent => (
                env.contains_key(&r.name),
                format!("{} asserts {} is not set{said}, and the plan sets {}", r.at, r.name, i.shown(env, &r.name)),
                format!("remove {} from the variant", r.name),
            ),
        };
        fails.then(|| Refusal { at: r.at.clone(), message, hint })
    })
}

/// A file committed at the revision that turns a flag on that the plan has off.
fn switched_by_file(i: &Interface, env: &Env) -> Option<Refusal> {
    i.switches.iter().find_map(|s| {
        let flag = s.turns_on.as_deref()?;
        let applies = s.when_on.iter().all(|w| on(env, w)) && !on(env, flag);
        applies.then(|| Refusal {
            at: s.at.clone(),
            message: format!(
                "the tree at this revision has `{}`, which {} checks: with {} it turns {flag} on, but the plan has {}",
                s.file,
                s.at,
                if s.when_on.is_empty() { "every build".to_string() } else { s.when_on.join(" and ") + " on" },
                i.shown(env, flag)
            ),
            hint: if flag == "USE_NIXL" {
                format!("build this revision with transport = \"nixl\", or pin a revision without `{}`", s.file)
            } else {
                format!("set {flag} on in the variant, or pin a revision without `{}`", s.file)
            },
        })
    })
}

/// A submodule the build needs for this environment that the revision lacks.
fn submodule_missing(i: &Interface, env: &Env) -> Option<Refusal> {
    i.missing_submodules.iter().find_map(|m| {
        let needed = m.when == "always"
            || (m.when == "doca-multinode" && on(env, "HYBRID_EP_MULTINODE") && !on(env, "USE_NIXL"));
        needed.then(|| Refusal {
            at: ".gitmodules".into(),
            message: format!(
                "the `{}` build needs the submodule {} ({}): this revision {}",
                i.branch.as_str(),
                m.path,
                if m.when == "always" { "every build" } else { "DOCA multinode builds" },
                m.why
            ),
            hint: "pin a revision that carries it, or build a variant that does not need it".into(),
        })
    })
}

/// setup.py assigns a variable the plan sets, unconditionally, to another value.
fn assigned_by_setup_py(i: &Interface, env: &Env) -> Option<Refusal> {
    i.assigns.iter().filter(|a| a.when.is_none()).find_map(|a| {
        let ours = env.get(&a.name)?;
        if a.literal.as_deref().is_some_and(|l| l.trim() == ours.trim()) {
            return None;
        }
        Some(Refusal {
            at: a.at.clone(),
            message: format!(
                "{} sets {} = {} itself, so the plan's {} would be ignored",
                a.at,
                a.name,
                a.value,
                i.shown(env, &a.name)
            ),
            hint: match (i.key_of(&a.name), &a.literal) {
                (Some(key), Some(l)) => format!(
                    "set `{key}` = \"{l}\" (what this revision builds), or pin a revision whose setup.py reads {}",
                    a.name
                ),
                _ => format!("remove {} from the variant, or pin a revision whose setup.py reads it", a.name),
            },
        })
    })
}

/// A variant key sets a knob (to anything but off) that setup.py at this
/// revision does not read: the variant's value would be silently ignored.
fn variant_key_unread(i: &Interface, env: &Env) -> Option<Refusal> {
    i.knobs.iter().filter(|k| k.key.is_some() && k.read_at.is_empty()).find_map(|k| {
        let v = env.get(&k.name).filter(|v| !matches!(v.trim(), "" | "0"))?;
        // setup.py sets it itself to the very value: what the variant says is built.
        let same = |a: &super::Assign| a.when.is_none() && a.literal.as_deref().map(str::trim) == Some(v.trim());
        if i.assigns.iter().any(|a| a.name == k.name && same(a)) {
            return None;
        }
        let key = k.key.as_deref().unwrap_or("?");
        Some(Refusal {
            at: "setup.py".into(),
            message: format!(
                "the variant's `{key}` sets {}={v}, which the build at this revision does not read (the files it scans: {}): the value would be ignored",
                k.name,
                i.scanned.join(", ")
            ),
            hint: format!("remove `{key}` from the variant (or set it off), or pin a revision that reads {}", k.name),
        })
    })
}

/// setup.py assigns a variable the plan sets, under a condition.
fn assigned_conditionally(i: &Interface, env: &Env) -> Vec<String> {
    i.assigns
        .iter()
        .filter(|a| env.contains_key(&a.name))
        .filter_map(|a| {
            let when = a.when.as_deref()?;
            Some(format!(
                "{} sets {} = {} under `{when}`: where that holds, the plan's {} is replaced",
                a.at,
                a.name,
                a.value,
                i.shown(env, &a.name)
            ))
        })
        .collect()
}

/// A variable read with default None and used as a string, left unset by the plan.
fn none_used_as_string(i: &Interface, env: &Env) -> Vec<String> {
    i.none_uses
        .iter()
        .filter(|u| !env.contains_key(&u.name))
        .map(|u| {
            format!(
                "the build will fail: {} reads {} with default None and {} uses it as a string (`{}`), but the plan leaves {} unset (a TypeError at that line)",
                u.read_at, u.name, u.used_at, u.usage, u.name
            )
        })
        .collect()
}

/// A committed file setup.py checks whose effect deepep-forge cannot tell.
fn unknown_switch(i: &Interface) -> Vec<String> {
    i.switches
        .iter()
        .filter(|s| s.turns_on.is_none())
        .map(|s| format!("the tree at this revision has `{}`, which {} checks: its effect on the build is not known to deepep-forge", s.file, s.at))
        .collect()
}
