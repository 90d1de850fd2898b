//! `lock check`: prove that a consumer's pyproject.toml, uv.lock and
//! Dockerfiles agree with pins.toml (or, under `--no-pins`, with the
//! pyproject's own intent) for every architecture.
//!
//! Reading is split by file (`pyproject`, `uvlock`: each yields
//! [`Reference`]s with file:line and the architectures they apply to, using
//! `marker`), judging lives in `rules`. Parsing uses the serde `toml` crate
//! (fast path); `toml_edit` is for `pin set` only. Every file of the project
//! is read through its [`Tree`] (a link out of it is refused, exit 2); the
//! check returns a [`Report`], which the command renders and prints.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use pep508_rs::PackageName;
use serde::Serialize;

use forge_model::findings::{self, Finding, Severity};
use forge_model::pins::{Arch, Pins};
use forge_os::error::Failure;
use forge_os::fs::Tree;
use forge_os::line::Line;

pub mod causes;
pub mod dockerfile;
pub mod evidence;
pub mod index;
pub mod patches;
pub mod pyproject;
pub mod revision;
pub mod rules;
pub mod uvlock;

/// Version of the JSON document `lock check --format json` prints.
/// 2: `causes` (each with its findings and one fix); findings carry `cause` and `column`.
pub const REPORT_SCHEMA: u32 = 2;

/// `--project DIR` and `--pins FILE` / `--no-pins` as plain data: the consumer
/// project and the pins it is held to (`pin set`, `pin recover`).
#[derive(Debug, Clone)]
pub struct ProjectPlace {
    /// The consumer project (holds pyproject.toml and, if locked, uv.lock).
    pub project: PathBuf,
    /// The pins file (`pins.toml` unless given).
    pub pins: PathBuf,
    /// No pins.toml: the consumer's pyproject.toml is the intent.
    pub no_pins: bool,
}

/// A `deepep-forge pin set` command line as the tool prints it (a `lock check`
/// fix, `pin set`'s rerun hint): the one renderer, so a printed pin bump
/// carries every flag of the request it stands for, each value shell-quoted.
#[derive(Debug, Clone, Default)]
pub struct PinSetLine<'a> {
    pub rev: &'a str,
    pub source: Option<&'a str>,
    pub arch: Option<Arch>,
    /// `--project` (left out when `.`).
    pub project: Option<&'a Path>,
    /// `--pins FILE` (left out when the default), or `None` for `--no-pins`.
    pub pins: Option<&'a Path>,
    pub cache_dir: Option<&'a Path>,
    /// `--index URL --variant NAME`.
    pub index: Option<(&'a str, &'a str)>,
    pub git: bool,
    pub patch: &'a [PathBuf],
    pub drop_patch: &'a [String],
    pub relock: bool,
}

impl PinSetLine<'_> {
    pub fn render(&self) -> String {
        let w = |s: &str| forge_os::printer::shell_word(s);
        let p = |p: &Path| w(&p.display().to_string());
        let mut c = format!("deepep-forge pin set {}", w(self.rev));
        if let Some((url, variant)) = self.index {
            c.push_str(&format!(" --index {} --variant {}", w(url), w(variant)));
        }
        if let Some(s) = self.source {
            c.push_str(&format!(" --source {}", w(s)));
        }
        if let Some(a) = self.arch {
            c.push_str(&format!(" --arch {a}"));
        }
        if let Some(d) = self.project.filter(|d| *d != Path::new(".")) {
            c.push_str(&format!(" --project {}", p(d)));
        }
        match self.pins {
            None => c.push_str(" --no-pins"),
            Some(f) if f != Path::new(forge_model::pins::DEFAULT_PATH) => c.push_str(&format!(" --pins {}", p(f))),
            Some(_) => {}
        }
        if let Some(d) = self.cache_dir {
            c.push_str(&format!(" --cache-dir {}", p(d)));
        }
        if self.git {
            c.push_str(" --git");
        }
        for f in self.patch {
            c.push_str(&format!(" --patch {}", p(f)));
        }
        for n in self.drop_patch {
            c.push_str(&format!(" --drop-patch {}", w(n)));
        }
        if self.relock {
            c.push_str(" --relock");
        }
        c
    }
}

/// What `lock check` checks, as plain data (no clap type): made from the flags
/// by the CLI, or by `pin set --relock` for the project it just changed. The
/// project itself is read through the [`Tree`] the command opened.
#[derive(Debug, Clone)]
pub struct CheckRequest {
    /// The project as messages name it.
    pub project: PathBuf,
    /// The pins file; `None` under --no-pins (the project's own intent).
    pub pins: Option<PathBuf>,
    pub dockerfiles: Vec<PathBuf>,
    /// `--index-manifest`: files, URLs or `index`.
    pub index_manifests: Vec<String>,
    /// `--trusted-key`s (added to the environment's and the user config's).
    pub trusted_keys: Vec<String>,
    pub recipes: Vec<PathBuf>,
    /// `--source`: DeepEP's repository to read the revisions from.
    pub source: Option<String>,
    /// The cache folder whose mirror is read when no `--source` is given.
    pub cache_dir: Option<PathBuf>,
    /// `--require-evidence`: the kind every locked wheel needs, and the folders to read.
    pub require_evidence: Option<forge_model::ladder::Kind>,
    pub evidence: Vec<PathBuf>,
    /// Whether pins.toml's `[evidence]` table is applied (`lock check`; not `pin set --relock`).
    pub evidence_policy: bool,
}

impl CheckRequest {
    /// The project and its pins, nothing else.
    pub fn new(project: &Path, pins: Option<&Path>) -> CheckRequest {
        CheckRequest {
            project: project.to_path_buf(),
            pins: pins.map(Path::to_path_buf),
            dockerfiles: Vec::new(),
            index_manifests: Vec::new(),
            trusted_keys: Vec::new(),
            recipes: Vec::new(),
            source: None,
            cache_dir: forge_store::cache::resolve_dir(None).ok(),
            require_evidence: None,
            evidence: Vec::new(),
            evidence_policy: false,
        }
    }

    /// The pins file as messages name it (the default under --no-pins).
    fn pins_path(&self) -> &Path {
        self.pins.as_deref().unwrap_or(Path::new(forge_model::pins::DEFAULT_PATH))
    }
}

/// Where a DeepEP reference sits, which decides the rule that judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A PEP 508 requirement in pyproject.toml (dependencies, extras, groups, overrides, constraints).
    Requirement,
    /// `tool.uv.sources` entry.
    Source,
    /// `[[tool.uv.dependency-metadata]]` version: the static label.
    Label,
    /// uv.lock `[manifest] overrides` / `constraints`.
    LockManifest,
    /// uv.lock `[[manifest.dependency-metadata]]` version.
    LockLabel,
    /// uv.lock `[[package]] name = "deep-ep"`.
    LockPackage,
    /// uv.lock: another package's dependency entry on a locked deep-ep.
    LockDependent,
    /// uv.lock: `requires-dist` of one of the project's own packages.
    LockRequiresDist,
    /// uv.lock: `requires-dist` of a third-party package (its own DeepEP pin).
    LockTransitive,
}

impl Kind {
    pub fn in_lock(self) -> bool {
        !matches!(self, Kind::Requirement | Kind::Source | Kind::Label)
    }
}

/// A git reference as a requirement, source or lock entry writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRef {
    /// Repository URL without `git+`, rev, query or fragment.
    pub repo: String,
    /// The requested rev/tag/branch (`@REV`, `?rev=`, `rev =`), if any.
    pub rev: Option<String>,
    /// The commit uv resolved it to (`#<sha>` in uv.lock).
    pub commit: Option<String>,
}

impl GitRef {
    /// `git+https://host/repo.git@REV#subdirectory=x` (PEP 508 direct reference).
    pub fn from_pep508_url(url: &str) -> Option<GitRef> {
        let rest = url.strip_prefix("git+")?;
        let rest = rest.split('#').next().unwrap_or(rest);
        let rest = rest.split('?').next().unwrap_or(rest);
        let slash = rest.rfind('/').unwrap_or(0);
        match rest[slash..].rfind('@') {
            Some(at) => Some(GitRef {
                repo: rest[..slash + at].to_string(),
                rev: Some(rest[slash + at + 1..].to_string()),
                commit: None,
            }),
            None => Some(GitRef { repo: rest.to_string(), rev: None, commit: None }),
        }
    }

    /// `https://host/repo.git?rev=REV#<sha>` (uv.lock).
    pub fn from_lock_url(url: &str) -> GitRef {
        let (base, commit) = match url.split_once('#') {
            Some((b, c)) => (b, Some(c.to_string())),
            None => (url, None),
        };
        let (repo, query) = base.split_once('?').unwrap_or((base, ""));
        let rev = query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| matches!(*k, "rev" | "tag" | "branch"))
            .map(|(_, v)| v.to_string());
        GitRef { repo: repo.to_string(), rev, commit }
    }
}

/// Two repository URLs name the same repository (scheme, host case, `.git`, trailing `/` aside).
pub fn same_repo(a: &str, b: &str) -> bool {
    fn norm(u: &str) -> String {
        let u = u.trim().trim_end_matches('/');
        let u = u.strip_suffix(".git").unwrap_or(u);
        let u = u.split_once("://").map(|(_, r)| r).unwrap_or(u);
        u.to_ascii_lowercase()
    }
    norm(a) == norm(b)
}

/// One DeepEP reference found in a consumer file.
#[derive(Debug, Clone)]
pub struct Reference {
    pub kind: Kind,
    pub file: PathBuf,
    pub line: usize,
    /// 1-based column (in characters) where the value starts.
    pub col: usize,
    /// Where, in words (`project.optional-dependencies.vllm`).
    pub place: String,
    /// Architectures some choice of extras/Python version makes it apply to.
    pub archs: Vec<Arch>,
    pub git: Option<GitRef>,
    /// A version as written (labels, locked package versions).
    pub version: Option<String>,
    /// Package that carries it (uv.lock dependents and requires-dist).
    pub owner: Option<String>,
}

/// Byte offset → 1-based line, for many lookups in one text.
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub fn new(text: &str) -> LineIndex {
        let mut starts = vec![0];
        starts.extend(memchr::memchr_iter(b'\n', text.as_bytes()).map(|i| i + 1));
        LineIndex { starts }
    }
    pub fn line(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset)
    }
    /// 1-based column (in characters) of `offset` in `text` (the text this index was made from).
    pub fn col(&self, text: &str, offset: usize) -> usize {
        let start = self.starts[self.line(offset) - 1];
        text.get(start..offset.min(text.len())).map(|t| t.chars().count()).unwrap_or(0) + 1
    }
}

/// A TOML syntax or shape error as a usage failure naming file:line:column.
pub(crate) fn toml_error(path: &Path, text: &str, e: toml::de::Error, what: &str) -> anyhow::Error {
    let (line, col) = e.span().map(|s| forge_model::pins::line_col(text, s.start)).unwrap_or((0, 0));
    Failure::usage(format!("{}:{line}:{col}: {}", path.display(), e.message().trim()))
        .hint(format!("fix the {what} at that line; nothing was checked"))
        .into()
}

/// What `lock check` looked at.
#[derive(Debug, Serialize)]
pub struct Checked {
    #[serde(serialize_with = "forge_os::output::path_lossy")]
    pub pyproject: PathBuf,
    /// `null` when the project has no uv.lock (then only pyproject.toml was checked).
    #[serde(serialize_with = "forge_os::output::opt_path_lossy")]
    pub uv_lock: Option<PathBuf>,
    #[serde(serialize_with = "forge_os::output::paths_lossy")]
    pub dockerfiles: Vec<PathBuf>,
}

/// The JSON document of `lock check --format json`.
#[derive(Debug, Serialize)]
pub struct Report {
    pub schema: u32,
    #[serde(serialize_with = "forge_os::output::path_lossy")]
    pub project: PathBuf,
    /// The pins file, or `null` under --no-pins.
    #[serde(serialize_with = "forge_os::output::opt_path_lossy")]
    pub pins: Option<PathBuf>,
    /// Intended revision per architecture (from pins.toml, or from pyproject.toml under --no-pins).
    pub intent: BTreeMap<Arch, String>,
    pub checked: Checked,
    /// Root causes, worst first: each with its one fix and the findings it explains.
    pub causes: Vec<findings::Cause>,
    /// Every finding (the same as under `causes`), in check order.
    pub findings: Vec<Finding>,
    pub errors: usize,
    pub warnings: usize,
    pub notes: usize,
}

/// Display a path as the user gave it (`./x` shown as `x`).
pub(crate) fn shown(p: &Path) -> PathBuf {
    p.strip_prefix(".").map(Path::to_path_buf).unwrap_or_else(|_| p.to_path_buf())
}

/// What the intended revisions (and those pyproject.toml and the lock name) are, read from their source.
fn read_revisions(req: &CheckRequest, pins: Option<&Pins>, ctx: &rules::Context) -> Result<revision::Revisions> {
    let locked = ctx.lock.into_iter().flat_map(|l| &l.refs).filter_map(|r| r.git.as_ref()?.commit.as_deref());
    let py = ctx.py.refs.iter().filter_map(|r| r.git.as_ref()?.rev.as_deref());
    let revs = ctx.intent.values().map(String::as_str).chain(locked).chain(py);
    revision::read(pins, req.source.as_deref(), req.cache_dir.clone(), revs)
}

/// Run the whole check and build the report (no printing). `project` is the
/// project folder (`req.project`) opened as a tree.
pub fn run_check(req: &CheckRequest, project: &Tree) -> Result<Report> {
    let pins = req.pins.as_deref().map(Pins::load).transpose()?;
    let name = match &pins {
        Some(p) => PackageName::new(p.source.name.clone())
            .map_err(|e| Failure::usage(format!("{}: source.name `{}`: {e}", p.path.display(), p.source.name)))?,
        None => PackageName::new("deep_ep".to_string()).expect("valid name"),
    };
    let py_path = shown(&req.project.join("pyproject.toml"));
    let Some(py_text) = project.read_text_opt("pyproject.toml", forge_os::input::cap::TEXT)? else {
        return Err(Failure::usage(format!("cannot read {}: not found", py_path.display()))
            .hint("--project must name a folder with a pyproject.toml")
            .into());
    };
    let py = pyproject::read(&py_path, &py_text, &name)?;

    let lock_path = shown(&req.project.join("uv.lock"));
    let lock_text = project.read_text_opt("uv.lock", forge_os::input::cap::LOCK)?;
    let lock = match &lock_text {
        Some(text) => Some(uvlock::read(&lock_path, text, &name, py.project_name.as_deref())?),
        None => None,
    };

    let mut ctx = rules::Context::new(&req.project, pins.as_ref(), req.pins_path(), &py, lock.as_ref(), &py_path);
    ctx.source = req.source.clone();
    // Carried only when given on the command line: the default and $DEEPEP_FORGE_CACHE_DIR reach the fix by themselves.
    let inherited = forge_os::environ::var_os("DEEPEP_FORGE_CACHE_DIR")
        .map(PathBuf::from)
        .or(forge_store::cache::resolve_dir(None).ok());
    ctx.cache_dir = req.cache_dir.clone().filter(|d| inherited.as_ref() != Some(d));
    ctx.revisions = read_revisions(req, pins.as_ref(), &ctx)?;
    let dockerfiles = dockerfile::discover(project, &req.project, &req.dockerfiles)?;
    let lock_file: LockFile = (&lock_path, lock_text.as_deref());
    let mut found = match index::source(&py_path, &py_text, &name)? {
        Some(src) => index_rules(req, &ctx, &src, lock_file, &name, &dockerfiles)?,
        None => rules::check(&ctx),
    };
    if lock.is_none() {
        found.push(
            Finding::new(
                "lock-not-checked",
                Severity::Note,
                &lock_path,
                "no uv.lock in the project: only pyproject.toml was checked",
            )
            .fix(format!("uv lock --project {}", req.project.display())),
        );
    }

    found.extend(dockerfile::check(&dockerfiles, pins.as_ref(), &ctx.intent));
    found.extend(patches::check(&dockerfiles, project, &req.project)?);
    let table = pins.as_ref().and_then(|p| p.evidence.as_ref()).filter(|_| req.evidence_policy);
    if req.require_evidence.is_some() || table.is_some() {
        let gate = evidence::Gate { flag: req.require_evidence, table, pins: pins.as_ref() };
        found.extend(required_evidence(req, &gate, &py_path, &py_text, lock_file, &name)?);
    } else if !req.evidence.is_empty() {
        return Err(Failure::usage("--evidence is read only when evidence is required")
            .hint("add --require-evidence KIND, or an [evidence] table to pins.toml (docs/evidence.md)")
            .into());
    }

    let causes = causes::group(&ctx, found);
    let found: Vec<Finding> = causes.iter().flat_map(|c| c.findings.iter().cloned()).collect();
    let count = |s: Severity| found.iter().filter(|f| f.severity == s).count();
    Ok(Report {
        schema: REPORT_SCHEMA,
        project: req.project.clone(),
        pins: pins.as_ref().map(|p| p.path.clone()),
        intent: ctx.intent.clone(),
        checked: Checked {
            pyproject: py_path,
            uv_lock: lock.map(|_| lock_path),
            dockerfiles: dockerfiles.into_iter().map(|d| d.path).collect(),
        },
        causes,
        errors: count(Severity::Error),
        warnings: count(Severity::Warning),
        notes: count(Severity::Note),
        findings: found,
    })
}

/// uv.lock as messages name it, and its text when the project has one.
type LockFile<'a> = (&'a Path, Option<&'a str>);

/// The rules of an index-sourced DeepEP (the git rules do not apply to it).
fn index_rules(
    req: &CheckRequest,
    ctx: &rules::Context,
    src: &index::IndexSource,
    (lock_path, lock_text): LockFile,
    name: &PackageName,
    dockerfiles: &[dockerfile::Dockerfile],
) -> Result<Vec<Finding>> {
    let trusted = forge_store::cache::config::trusted_keys(&req.trusted_keys)?;
    let mut manifests = Vec::new();
    for f in &req.index_manifests {
        let at = match f.as_str() {
            "index" => src.url.as_deref().and_then(index::manifest_url).ok_or_else(|| {
                Failure::usage(format!(
                    "--index-manifest index: {} names no `<base>/<variant>/simple` URL for index `{}`",
                    ctx.pyproject_path.display(),
                    src.name
                ))
            })?,
            other => other.to_string(),
        };
        manifests.push(forge_store::index::manifest::load_verified_any(&at, &trusted)?.0);
    }
    // With none given and a key trusted (the flag, DEEPEP_FORGE_TRUSTED_KEYS or the user
    // config: what the pre-commit hook and the action pass), the manifest next to the
    // index URL; one that cannot be read or verified is an error finding, not a crash.
    let mut unread = None;
    if let Some(at) = src
        .url
        .as_deref()
        .and_then(index::manifest_url)
        .filter(|_| req.index_manifests.is_empty() && !trusted.is_empty())
    {
        match forge_store::index::manifest::load_verified_any(&at, &trusted) {
            Ok((m, _)) => manifests.push(m),
            Err(e) => unread = Some((forge_os::http::redact(&at), format!("{e:#}"))),
        }
    }
    let locked = match lock_text {
        Some(text) => index::locked_wheels(lock_path, text, name)?,
        None => index::LockedWheels::default(),
    };
    let wheels = locked.wheels;
    let mut needs = Vec::new();
    if let Some(p) = ctx.pins {
        needs = dockerfile::needs(dockerfiles, p);
        for r in &req.recipes {
            needs.extend(recipe_need(r, p)?);
        }
    }
    let chain = rules::IndexChain {
        source: src,
        wheels: &wheels,
        manifests: &manifests,
        lock_path,
        needs: &needs,
        requires_python: locked.requires_python.as_deref(),
        unread,
    };
    let mut found = rules::index_label(ctx, &chain);
    found.extend(rules::lock_wheel_unattested(ctx, &chain));
    found.extend(rules::lock_python_missing(ctx, &chain));
    found.extend(rules::lock_python_unlisted(ctx, &chain));
    found.extend(rules::lock_python_uncovered(ctx, &chain));
    found.extend(rules::index_variant_mismatch(ctx, &chain));
    found.extend(rules::index_not_verified(&chain));
    found.extend(rules::lock_variant_unknown(ctx, &chain));
    if let Some(text) = lock_text {
        found.extend(wheel_requires(src, lock_path, text, ctx.py.project_name.as_deref(), &wheels, &manifests)?);
    }
    Ok(found)
}

/// `lock-requires-unmet`: the locked wheels' own `Requires-Dist` (their PEP 658
/// `.metadata` from the consumer's index, checked against the verified
/// manifests' sha256) against uv.lock's torch/NCCL/NVSHMEM tables. Only with
/// a verified manifest; a `.metadata` that cannot be read is a warning.
fn wheel_requires(
    src: &index::IndexSource,
    lock_path: &Path,
    text: &str,
    project: Option<&str>,
    wheels: &[index::LockedWheel],
    manifests: &[forge_store::index::manifest::Manifest],
) -> Result<Vec<Finding>> {
    let Some(simple) = src.url.as_deref() else { return Ok(Vec::new()) };
    let mut read = Vec::new();
    let mut found = Vec::new();
    for w in wheels {
        let Some(entry) = w.sha256.as_deref().and_then(|s| manifests.iter().find_map(|m| m.by_sha256(s))) else {
            continue;
        };
        match forge_store::index::closure::of_entry(simple, entry) {
            Ok(r) => read.push(r),
            Err(e) => found.push(
                Finding::new(
                    "lock-requires-unmet",
                    forge_model::findings::Severity::Warning,
                    lock_path,
                    format!("cannot read the run-time requirements of {} from the index: {e}", w.file),
                )
                .at(w.line, 1),
            ),
        }
    }
    let env = uvlock::environment(lock_path, text, project)?;
    found.extend(rules::closure::lock_requires_unmet(lock_path, wheels, &read, &env));
    Ok(found)
}

/// `--require-evidence` and pins.toml's `[evidence]`: the locked wheels against
/// the evidence folders. Without a folder or a trusted key nothing could ever
/// count: exit 2 naming what to pass, never a silent pass.
fn required_evidence(
    args: &CheckRequest,
    gate: &evidence::Gate,
    py_path: &Path,
    py_text: &str,
    (lock_path, lock_text): LockFile,
    name: &PackageName,
) -> Result<Vec<Finding>> {
    let asked = gate.asked_by();
    if args.evidence.is_empty() {
        return Err(Failure::usage(format!("{asked} requires evidence, but no evidence folder is given"))
            .hint("pass --evidence DIR (repeatable): the folders `probe --record` and `evidence add --out` wrote")
            .into());
    }
    let trusted = forge_store::cache::config::trusted_keys(&args.trusted_keys)?;
    if trusted.is_empty() {
        return Err(Failure::usage(format!("{asked} requires evidence, but no key is trusted: no statement could count"))
            .hint(format!(
                "pass --trusted-key NAME:BASE64 (the public key that signed the statements, as `cache keygen` prints it), or set {} or `[cache] trusted-keys` in the user config",
                forge_store::cache::config::TRUSTED_KEYS_ENV
            ))
            .into());
    }
    let wheels = match lock_text {
        Some(text) => index::locked_wheels(lock_path, text, name)?.wheels,
        None => Vec::new(),
    };
    let src = index::source(py_path, py_text, name)?;
    let policy = evidence::Policy { gate, dirs: &args.evidence, trusted: &trusted };
    evidence::check(&policy, &wheels, src.as_ref(), lock_path)
}

/// What a recipe needs of the index's variant: an EP group over more than one
/// NVLink domain (D = ceil(EP/R)) with HybridEP needs a multinode build (R as the recipe
/// sets it, else NeMo-RL's default min(EP, 64) where it follows EP); `None`
/// when one domain suffices or EP/R are not known.
fn recipe_need(path: &Path, pins: &Pins) -> Result<Option<dockerfile::Need>> {
    let t = forge_model::topology::recipe::read(path)?;
    let Some(ep) = t.ep.filter(|_| t.dispatcher == "hybridep") else { return Ok(None) };
    let r = match (t.ranks_per_domain, t.defaults_follow_ep) {
        (Some(r), _) => r,
        (None, true) => ep.min(64),
        (None, false) => return Ok(None),
    };
    let domains = ep.div_ceil(r.max(1));
    if domains <= 1 {
        return Ok(None);
    }
    let variants: Vec<String> = pins.variants.iter().filter(|v| v.multinode).map(|v| v.name.clone()).collect();
    Ok(Some(dockerfile::Need {
        variants,
        file: path.to_path_buf(),
        line: 0,
        what: format!(
            "runs HybridEP with EP {ep} over {domains} NVLink domains (R {r}), which needs a multinode build:"
        ),
    }))
}

/// The GitHub rendering of a report: an annotation per cause, then the human
/// report as a log that cannot plant annotations (the command prints it).
pub fn render_github(report: &Report) -> String {
    let workspace = forge_os::environ::var_os("GITHUB_WORKSPACE").map(PathBuf::from);
    let path = |f: &Path| github_path(f, workspace.as_deref(), &report.project);
    findings::render_github_causes(&report.causes, &path) + &forge_os::output::github_log(&render_human(report))
}

/// The human rendering of a report (the command prints it). Every path and
/// revision in its header is a [`Line`] (a Dockerfile named with a line break
/// cannot start a row of its own).
pub fn render_human(r: &Report) -> String {
    let shown = |p: &Path| Line::new(p.display().to_string());
    let mut out = String::new();
    let intent: Vec<Line> = r.intent.iter().map(|(a, rev)| Line::new(format!("{a} {rev}"))).collect();
    out.push_str(&format!(
        "lock check {} against {}: {}\n",
        shown(&r.project),
        r.pins.as_deref().map(shown).unwrap_or_else(|| Line::new("pyproject.toml (--no-pins)")),
        if intent.is_empty() { Line::new("no intended revision") } else { Line::new(join(&intent)) }
    ));
    let mut files = vec![shown(&r.checked.pyproject)];
    files.push(match &r.checked.uv_lock {
        Some(l) => shown(l),
        None => Line::new("uv.lock not found (lock not checked)"),
    });
    files.extend(r.checked.dockerfiles.iter().map(|d| shown(d)));
    out.push_str(&format!("checked: {}\n", join(&files)));
    out.push_str(&findings::render_human_causes(&r.causes));
    let fixes = r.causes.iter().filter(|c| c.severity == Severity::Error).count();
    out.push_str(&format!(
        "{}: {} error(s), {} warning(s), {} note(s){}\n",
        if r.errors > 0 { "FAILED" } else { "ok" },
        r.errors,
        r.warnings,
        r.notes,
        if fixes > 0 { format!(" from {fixes} cause(s): run each cause's fix") } else { String::new() }
    ));
    out
}

/// Lines joined by `, ` (each already escaped).
fn join(lines: &[Line]) -> String {
    lines.iter().map(Line::as_str).collect::<Vec<_>>().join(", ")
}

/// A finding's file as GitHub annotations want it: relative to `$GITHUB_WORKSPACE` when
/// the file is inside it, else relative to the project folder.
fn github_path(file: &Path, workspace: Option<&Path>, project: &Path) -> PathBuf {
    // As written first, then with links resolved (a workspace reached through a link).
    let real = |p: &Path| forge_os::fs::named::canonical(p, "path").unwrap_or_else(|_| p.to_path_buf());
    let inside = |base: &Path| {
        forge_os::output::relative_to(file, base).or_else(|| forge_os::output::relative_to(&real(file), &real(base)))
    };
    workspace.and_then(inside).or_else(|| inside(project)).unwrap_or_else(|| file.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_urls_split_into_repo_rev_and_commit() {
        let g =
            GitRef::from_pep508_url("git+https://github.com/deepseek-ai/DeepEP.git@29d31c0#subdirectory=x").unwrap();
        assert_eq!((g.repo.as_str(), g.rev.as_deref()), ("https://github.com/deepseek-ai/DeepEP.git", Some("29d31c0")));
        let g = GitRef::from_pep508_url("git+ssh://git@github.com/deepseek-ai/DeepEP.git").unwrap();
        assert_eq!((g.repo.as_str(), g.rev), ("ssh://git@github.com/deepseek-ai/DeepEP.git", None));
        assert!(GitRef::from_pep508_url("https://example.com/deep_ep-1.whl").is_none());
        let g = GitRef::from_lock_url("https://github.com/deepseek-ai/DeepEP.git?rev=abc#def");
        assert_eq!((g.rev.as_deref(), g.commit.as_deref()), (Some("abc"), Some("def")));
        assert!(same_repo("https://github.com/deepseek-ai/DeepEP.git", "https://GitHub.com/deepseek-ai/DeepEP/"));
        assert!(!same_repo("https://github.com/deepseek-ai/DeepEP.git", "https://github.com/fork/DeepEP.git"));
    }

    #[test]
    fn line_index_counts_from_one() {
        let ix = LineIndex::new("a\nbc\n\nd");
        assert_eq!([ix.line(0), ix.line(2), ix.line(3), ix.line(5), ix.line(6)], [1, 2, 2, 3, 4]);
    }
}
