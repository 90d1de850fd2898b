//! `diff` and `verify`: the commands that check a wheel's reproducibility.
//! `diff` tells where two wheels differ (`wheel::diff`); `verify` rebuilds a
//! wheel from its own provenance (in a private temporary folder, a
//! [`TempTree`], unless `--out` names one) and compares. Returns what was
//! found (the command prints it and picks the exit code); must not build or
//! compare by itself.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use forge_os::error::Exit;
use forge_os::fs::{Kind, TempTree};
use forge_wheel::wheel::diff;

/// Version of `diff --format json` and `verify --format json`.
pub const SCHEMA: u32 = 1;

/// What a wheel's provenance says was built: `exact, unpatched`, `patched: N patches (...)`,
/// or that it carries none (not built by deepep-forge).
fn what_was_built(wheel: &std::path::Path) -> String {
    match forge_wheel::wheel::read::provenance(wheel) {
        Ok(p) => forge_model::patches::describe(&p.source.patches),
        Err(_) => "unknown: no readable deepep-forge provenance".into(),
    }
}

/// `diff A.whl B.whl`.
#[derive(Debug, Clone)]
pub struct DiffRequest {
    pub a: PathBuf,
    pub b: PathBuf,
}

/// What `diff` found: where the wheels differ and what each provenance says was built.
#[derive(Debug)]
pub struct Diffed {
    pub diff: diff::WheelDiff,
    pub a: String,
    pub b: String,
}

impl Diffed {
    /// The JSON document (`--format json`).
    pub fn doc(&self) -> serde_json::Value {
        serde_json::json!({ "schema": SCHEMA, "diff": self.diff, "built": { "a": self.a, "b": self.b } })
    }
    /// The human report.
    pub fn render(&self) -> String {
        format!("{}A  is {}\nB  is {}\n", diff::render(&self.diff), self.a, self.b)
    }
}

/// `deepep-forge diff A.whl B.whl`.
pub fn diff(args: &DiffRequest) -> Result<Diffed> {
    let d = diff::diff(&args.a, &args.b)?;
    Ok(Diffed { diff: d, a: what_was_built(&args.a), b: what_was_built(&args.b) })
}

/// `verify WHEEL|URL`: what to rebuild and how.
#[derive(Debug, Clone)]
pub struct VerifyRequest {
    /// A wheel file, a wheel's URL in a publish index, or an index URL.
    pub wheel: PathBuf,
    /// `--trusted-key`s for an index's signed manifest.
    pub trusted_keys: Vec<String>,
    pub run: crate::builder::request::RunOptions,
    /// The pins file whose `[source] repo` is trusted (given, else ./pins.toml when present).
    pub pins: Option<PathBuf>,
    /// The toolchain; `None`: the one the provenance names.
    pub toolchain: Option<crate::builder::registry::Kind>,
    /// Keep the rebuilt wheel here; `None`: a temporary folder.
    pub out: Option<PathBuf>,
    /// For an index URL: only this wheel.
    pub only_wheel: Option<String>,
}

/// One wheel verified: whether the rebuild is identical, its JSON document
/// and its human lines.
#[derive(Debug)]
pub struct Verified {
    pub ok: bool,
    pub doc: serde_json::Value,
    pub human: String,
}

/// What `verify` found in all: every wheel identical, the JSON document, and
/// for an index URL the last human line.
#[derive(Debug)]
pub struct VerifyOutcome {
    pub ok: bool,
    pub doc: serde_json::Value,
    pub summary: Option<String>,
}

/// `deepep-forge verify WHEEL|URL`: a wheel file, a wheel's URL in a publish
/// index, or an index URL (every wheel its signed manifest lists, or `--wheel NAME`).
/// `each` hears of every wheel as its rebuild is compared (the command prints it).
pub fn verify(args: VerifyRequest, mut each: impl FnMut(&Verified)) -> Result<VerifyOutcome> {
    let _coop = forge_os::error::Cooperative::enter();
    if let Some(out) = &args.out {
        if !matches!(forge_os::fs::named::kind_through(out), Kind::Missing | Kind::Dir) {
            return Err(forge_os::error::Failure::usage(format!("--out {}: a file, not a folder", out.display()))
                .hint("pass a folder for the rebuilt wheel (it is created when absent), or none")
                .into());
        }
    }
    let single = |v: Verified, each: &mut dyn FnMut(&Verified)| {
        each(&v);
        VerifyOutcome { ok: v.ok, doc: v.doc, summary: None }
    };
    let Some(url) = args.wheel.to_str().filter(|s| forge_store::index::manifest::is_index_url(s)).map(String::from)
    else {
        if args.only_wheel.is_some() {
            return Err(forge_os::error::Failure::usage("--wheel NAME picks a wheel of an index URL").into());
        }
        return Ok(single(verify_file(&args, &args.wheel, None)?, &mut each));
    };
    let trusted = forge_store::cache::config::trusted_keys(&args.trusted_keys)?;
    if forge_store::index::fetch::index_urls(&url)?.is_none() {
        let (_dir, path) = forge_store::index::fetch::wheel(&url, &trusted)?;
        return Ok(single(verify_file(&args, &path, Some((&url, false)))?, &mut each));
    }
    let urls = forge_store::index::fetch::index_wheels(&url, args.only_wheel.as_deref(), &trusted)?;
    let (mut all_ok, mut docs) = (true, Vec::new());
    for (i, w) in urls.iter().enumerate() {
        forge_os::note!("verify {}/{}: {}", i + 1, urls.len(), forge_os::http::redact(w));
        // A wheel changed on the server is reported and the others still checked.
        match forge_store::index::fetch::wheel(w, &trusted) {
            Ok((_dir, path)) => {
                let v = verify_file(&args, &path, Some((w, true)))?;
                each(&v);
                all_ok &= v.ok;
                docs.push(v.doc);
            }
            Err(e) if forge_os::error::exit_of(&e) == Exit::Problems => {
                forge_os::alert!("error: {e:#}");
                all_ok = false;
                docs.push(
                    serde_json::json!({ "url": forge_os::http::redact(w), "verified": false, "error": format!("{e:#}") }),
                );
            }
            Err(e) => return Err(e),
        }
    }
    let shown = forge_os::http::redact(&url);
    let doc = serde_json::json!({ "schema": SCHEMA, "index": shown, "verified": all_ok, "wheels": docs });
    let summary = format!("{}: {}", shown, if all_ok { "every wheel verified" } else { "NOT verified (see above)" });
    Ok(VerifyOutcome { ok: all_ok, doc, summary: Some(summary) })
}

/// Rebuild one wheel file from its provenance and compare: whether it is
/// identical, its JSON document and its human lines. `fetched`: the URL the
/// wheel was downloaded from (what the lines name, not the temporary copy),
/// and whether it is one of an index's wheels, rebuilt into `<out>/<variant>/`
/// (variants of one architecture have wheels of one file name).
fn verify_file(args: &VerifyRequest, wheel: &Path, fetched: Option<(&str, bool)>) -> Result<Verified> {
    let several = fetched.is_some_and(|(_, s)| s);
    let named = match fetched {
        Some((url, _)) => forge_os::http::redact(url),
        None => wheel.display().to_string(),
    };
    let prov = crate::builder::deliver::read_provenance(wheel).map_err(|e| {
        forge_os::error::Failure::usage(format!("{e:#}")).hint("verify needs a wheel built by deepep-forge build-wheel")
    })?;
    if prov.schema < 2 {
        return Err(forge_os::error::Failure::usage(format!(
            "{} carries a provenance of schema {}: wheels of that deepep-forge held their build times and machine paths, so no rebuild can match them",
            wheel.display(),
            prov.schema
        ))
        .hint("rebuild it with this deepep-forge (build-wheel), then verify that wheel")
        .into());
    }
    let name = forge_wheel::wheel::WheelName::parse(&wheel.file_name().unwrap_or_default().to_string_lossy())
        .ok_or_else(|| forge_os::error::Failure::usage(format!("{} is not a wheel file name", wheel.display())))?;
    names_hold(wheel, &name, &prov)?;
    // Before anything is fetched: the repository whose setup.py the rebuild runs is one the user chose.
    let source = match (&args.run.source, prov.source.repo.strip_prefix("local:")) {
        (Some(s), _) => Some(s.clone()),
        (None, Some(folder)) => {
            return Err(forge_os::error::Failure::usage(format!(
                "{}: built from a local source (`{}`), which its provenance names without a path",
                wheel.display(),
                forge_os::input::excerpt(folder, 80)
            ))
            .hint(format!("pass --source PATH to that repository or folder (commit {})", prov.source.rev))
            .into())
        }
        (None, None) => {
            trust::check(wheel, &prov.source.repo, &prov.source.rev, args.pins.as_deref())?;
            None
        }
    };
    let work = TempTree::new("deepep-forge-verify-")?;
    // The pins the provenance describes, parsed in memory; messages about them name the wheel.
    let shown = PathBuf::from(format!("the provenance of {}", wheel.display()));
    let mut pins =
        forge_model::pins::Pins::parse(&pins_of(&prov, &name)?, &shown).map_err(|e| about_wheel(e, &shown, wheel))?;
    with_patch_texts(&mut pins, &prov);
    let toolchain = args.toolchain.unwrap_or(match prov.toolchain.kind.as_str() {
        "registry" => crate::builder::registry::Kind::Registry,
        _ => crate::builder::registry::Kind::System,
    });
    let out = match &args.out {
        Some(o) if several => o.join(&prov.variant.name),
        Some(o) => o.clone(),
        None => work.path().join("out"),
    };
    let same_dir =
        |a: &Path, b: &Path| match (forge_os::fs::named::canonical_opt(a), forge_os::fs::named::canonical_opt(b)) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        };
    if args.wheel.parent().is_some_and(|p| same_dir(if p.as_os_str().is_empty() { Path::new(".") } else { p }, &out)) {
        return Err(forge_os::error::Failure::usage(format!(
            "--out {} is the folder of the wheel being verified: the rebuild would replace it",
            out.display()
        ))
        .hint("pass another --out, or none (a temporary folder)")
        .into());
    }
    // The request the provenance makes: its pins, its variant, no wheel cache.
    let req = crate::builder::BuildRequest {
        pins,
        variants: crate::builder::Variants::Named(vec![prov.variant.name.clone()]),
        source,
        python: args.run.python.clone(),
        toolchain,
        match_project: None,
        out: out.clone(),
        cache_dir: args.run.cache_dir.clone(),
        no_cache: true,
        compiler_cache: args.run.compiler_cache.clone(),
        // A verification compiles everything, NCCL too: never the stored NCCL output.
        nccl_reuse: false,
        jobs: args.run.jobs,
        serial_extensions: args.run.serial_extensions,
        // A fork's merge base as the wheel records it: the upstream is never fetched.
        recorded_fork: prov.source.fork.clone(),
        remote: None,
    };
    let built = crate::builder::run::build(&req, None, |_| {}).map_err(|e| about_wheel(e, &shown, wheel))?;
    let mut outcome = built.results.into_iter().next().context("the rebuild produced no wheel")?;
    if let Some(label) = &name.variant {
        // A PEP 825 variant wheel is its build plus `variant.json` (publish --variant-wheels):
        // the rebuild gets the published wheel's (checked) variant.json the same way.
        let vj = forge_store::index::variants::read_wheel_variant_json(wheel)?;
        let file = outcome.wheel.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let labelled = work.path().join(forge_store::index::variants::wheel_name(file, label)?);
        forge_store::index::variants::add_variant_json(&outcome.wheel, &labelled, vj)?;
        outcome.wheel = labelled;
    }
    let d = diff::diff(wheel, &outcome.wheel)?;
    let mut doc = serde_json::json!({ "schema": SCHEMA, "verified": d.identical, "rebuilt": outcome, "diff": d });
    if fetched.is_some() {
        doc["url"] = serde_json::Value::String(named.clone());
    }
    let human = if d.identical {
        format!(
            "verified: {} is what its provenance says: rebuilt {} @ {} ({}; {}) gives the same sha256 {}\n",
            named,
            prov.variant.name,
            &prov.source.rev[..prov.source.rev.len().min(12)],
            outcome.status,
            forge_model::patches::describe(&prov.source.patches),
            d.a.sha256
        )
    } else {
        format!(
            "NOT verified: the rebuild from the wheel's provenance differs\n{}",
            diff::render(&d).replace(&outcome.wheel.display().to_string(), "(rebuilt)")
        )
    };
    Ok(Verified { ok: d.identical, doc, human })
}

/// The wheel's name before any rebuild: its tag set judged against its members
/// (`manylinux::judge`, as every path that accepts a wheel) and its version label the
/// one the provenance gives (`patches::label`): a renamed wheel is never verified.
fn names_hold(
    wheel: &Path,
    name: &forge_wheel::wheel::WheelName,
    prov: &forge_wheel::provenance::Provenance,
) -> Result<()> {
    let j = forge_wheel::manylinux::judge::wheel(wheel, None)?;
    let mut why: Vec<String> = j.refusal().into_iter().collect();
    let base = name.version.split('+').next().unwrap_or(&name.version);
    let want = forge_model::patches::label(base, &prov.source.short, &prov.source.patches);
    if forge_model::patches::local_of(&name.version) != forge_model::patches::local_of(&want) {
        why.push(format!("its version {} is not the label its provenance gives ({want})", name.version));
    }
    if why.is_empty() {
        return Ok(());
    }
    Err(forge_os::error::Failure::problems(format!(
        "NOT verified: {} does not hold what its name says:\n  {}",
        wheel.display(),
        why.join("\n  ")
    ))
    .hint("never rename a wheel by hand; rebuild it (deepep-forge build-wheel) under the name it earns")
    .into())
}

/// An error of the rebuild as the user can act on it: the pins generated from
/// the provenance (parsed in memory, named `pins`) are named as what they are,
/// the wheel's provenance, without line:column positions in text nobody sees.
fn about_wheel(e: anyhow::Error, pins: &std::path::Path, wheel: &std::path::Path) -> anyhow::Error {
    let tmp = pins.display().to_string();
    let text = format!("{e:#}");
    let hint = e.chain().find_map(|c| c.downcast_ref::<forge_os::error::Failure>().and_then(|f| f.hint.clone()));
    if !text.contains(&tmp) && !hint.as_ref().is_some_and(|h| h.contains(&tmp)) {
        return e;
    }
    let shown = format!("the provenance of {}", wheel.display());
    let fix = |s: &str| -> String {
        // `<tmp>:LINE:COL` points into a file the user never sees: drop the position.
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find(&tmp) {
            out.push_str(&rest[..i]);
            out.push_str(&shown);
            rest = &rest[i + tmp.len()..];
            for _ in 0..2 {
                let digits =
                    rest.strip_prefix(':').map(|r| r.len() - r.trim_start_matches(|c: char| c.is_ascii_digit()).len());
                match digits {
                    Some(n) if n > 0 => rest = &rest[1 + n..],
                    _ => break,
                }
            }
        }
        out.push_str(rest);
        out
    };
    let mut f = forge_os::error::Failure::new(forge_os::error::exit_of(&e), fix(&text));
    if let Some(h) = hint {
        f = f.hint(fix(&h));
    }
    f.into()
}

/// The provenance's patch texts on the pins made from it: the rebuild applies
/// what the wheel carries (its sha256 is checked again when the plan loads it).
fn with_patch_texts(pins: &mut forge_model::pins::Pins, prov: &forge_wheel::provenance::Provenance) {
    for pin in pins.pins.values_mut() {
        for (e, p) in pin.patches.iter_mut().zip(&prov.source.patches) {
            e.text = Some(p.text.clone());
        }
    }
}

/// A pins file that names exactly what the provenance says (values serialised by
/// `toml`, never spliced into text; `Pins::parse` validates them again).
fn pins_of(p: &forge_wheel::provenance::Provenance, name: &forge_wheel::wheel::WheelName) -> Result<String> {
    use toml::Value;
    let version = name.version.split('+').next().unwrap_or(&name.version).to_string();
    let mut source = toml::Table::new();
    source.insert("name".into(), Value::String(name.dist.clone()));
    // A local source is fetched from --source (required then); pins files name remote
    // repositories only, so it stands there under a reserved, never-fetched host.
    let repo = match p.source.repo.strip_prefix("local:") {
        Some(name) => format!(
            "https://local.invalid/{}",
            name.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_' && c != '.', "_")
        ),
        None => p.source.repo.clone(),
    };
    source.insert("repo".into(), Value::String(repo));
    if let Some(b) = &p.source.branch {
        source.insert("branch".into(), Value::String(b.clone()));
    }
    // A fork's upstream (its merge base is taken as recorded: `recorded_fork`).
    if let Some(f) = &p.source.fork {
        source.insert("upstream".into(), Value::String(f.upstream.clone()));
        source.insert("upstream_branch".into(), Value::String(f.upstream_branch.clone()));
    }
    source.insert("base_version".into(), Value::String(version));
    let mut pin = toml::Table::new();
    let mut arch_pin: toml::Table = [("rev".to_string(), Value::String(p.source.rev.clone()))].into_iter().collect();
    // The source patches, by name and sha256 (their text is put back by `with_patch_texts`).
    if !p.source.patches.is_empty() {
        let list = p.source.patches.iter().map(|x| {
            let e: toml::Table = [("path", &x.name), ("sha256", &x.sha256)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), Value::String(v.clone())))
                .collect();
            Value::Table(e)
        });
        arch_pin.insert("patches".into(), Value::Array(list.collect()));
    }
    pin.insert(p.variant.arch.clone(), Value::Table(arch_pin));
    let v = &p.variant;
    let mut variant = toml::Table::new();
    variant.insert("name".into(), Value::String(v.name.clone()));
    variant.insert("arch".into(), Value::String(v.arch.clone()));
    variant.insert("cuda_arch_list".into(), Value::String(v.cuda_arch_list.clone()));
    variant.insert("multinode".into(), Value::Boolean(v.multinode));
    if let Some(t) = &v.transport {
        variant.insert("transport".into(), Value::String(t.clone()));
    }
    if let Some(r) = &v.rdma_core_home {
        variant.insert("rdma_core_home".into(), Value::String(r.clone()));
    }
    if let Some(n) = p.env.get("NVSHMEM_DIR") {
        variant.insert("nvshmem_dir".into(), Value::String(n.clone()));
    }
    // `runtime_requires = false` as the provenance records it: METADATA left as built.
    if p.toolchain.environment.as_ref().and_then(|e| e.requires.as_ref()).is_some_and(|r| !r.enabled) {
        variant.insert("runtime_requires".into(), Value::Boolean(false));
    }
    // The knobs the variant set itself (pins.toml `env`): part of the build, so of the rebuild.
    if !v.env.is_empty() {
        let env: toml::Table = v.env.iter().map(|(k, val)| (k.clone(), Value::String(val.clone()))).collect();
        variant.insert("env".into(), Value::Table(env));
    }
    let mut doc = toml::Table::new();
    doc.insert("schema".into(), Value::Integer(forge_model::pins::SCHEMA));
    doc.insert("source".into(), Value::Table(source));
    doc.insert("pin".into(), Value::Table(pin));
    if let (Some(torch), Some(cuda)) = (&p.toolchain.torch, &p.toolchain.cuda) {
        let mut tc = toml::Table::new();
        tc.insert("torch".into(), Value::String(torch.split('+').next().unwrap_or(torch).to_string()));
        tc.insert("cuda".into(), Value::String(cuda.clone()));
        if let Some(py) = &p.toolchain.python {
            let minor: Vec<&str> = py.split('.').take(2).collect();
            tc.insert("python".into(), Value::String(minor.join(".")));
        }
        doc.insert("toolchain".into(), Value::Table(tc));
    }
    doc.insert("variant".into(), Value::Array(vec![Value::Table(variant)]));
    Ok(toml::to_string(&doc)?)
}

/// Which repositories the user trusts `verify` to fetch and build.
mod trust {
    use std::path::Path;

    use anyhow::Result;

    use forge_os::error::Failure;

    /// Repositories trusted in the environment (separated by spaces, commas or newlines).
    pub const ENV: &str = "DEEPEP_FORGE_TRUSTED_REPOS";

    /// One spelling per repository: no trailing `/` or `.git`.
    fn norm(url: &str) -> &str {
        let u = url.trim_end_matches('/');
        u.strip_suffix(".git").unwrap_or(u)
    }

    /// Refuse (exit 2, before any fetch) a repository the user has not named or
    /// trusted: `--pins` (default ./pins.toml when present) `[source] repo`,
    /// `DEEPEP_FORGE_TRUSTED_REPOS`, `[verify] trusted-repos` in the user config.
    pub fn check(wheel: &Path, repo: &str, rev: &str, pins: Option<&Path>) -> Result<()> {
        let trusted = trusted(pins)?;
        if trusted.iter().any(|t| norm(t) == norm(repo)) {
            return Ok(());
        }
        let config = forge_store::cache::config::config_path()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "~/.config/deepep-forge/config.toml".into());
        Err(Failure::usage(format!(
            "{}: its provenance asks for a rebuild from {} (commit {}), a repository you have not named or trusted; verify would run its setup.py, so nothing was fetched",
            wheel.display(),
            forge_os::input::excerpt(repo, 200),
            forge_os::input::excerpt(rev, 40),
        ))
        .hint(format!(
            "if you trust it: pass --source with it (or a clone of yours), list it in {ENV}, add it to `[verify] trusted-repos` in {config}, or run verify next to the pins.toml (or with --pins FILE) whose [source] repo names it"
        ))
        .into())
    }

    fn trusted(pins: Option<&Path>) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let default = Path::new(forge_model::pins::DEFAULT_PATH);
        match pins {
            Some(p) => out.push(forge_model::pins::Pins::load(p)?.source.repo),
            None if forge_os::fs::named::kind_through(default) != forge_os::fs::Kind::Missing => {
                out.push(forge_model::pins::Pins::load(default)?.source.repo)
            }
            None => {}
        }
        if let Some(v) = forge_os::environ::var_os(ENV) {
            let v = v.to_str().ok_or_else(|| Failure::usage(format!("{ENV} is not UTF-8")))?.to_string();
            out.extend(v.split(|c: char| c.is_whitespace() || c == ',').filter(|s| !s.is_empty()).map(String::from));
        }
        out.extend(from_config()?);
        Ok(out)
    }

    /// `[verify] trusted-repos = ["https://...", ...]` in the user config.
    fn from_config() -> Result<Vec<String>> {
        let Some(path) = forge_store::cache::config::config_path() else { return Ok(Vec::new()) };
        let Some(text) = forge_os::fs::named::read_text_opt(&path, "user config", 1 << 20)? else {
            return Ok(Vec::new());
        };
        let doc: toml::Table =
            text.parse().map_err(|e| Failure::usage(format!("{} is not valid TOML: {e}", path.display())))?;
        let bad = || {
            Failure::usage(format!("{}: [verify] trusted-repos must be a list of repository URLs", path.display()))
                .hint("e.g. [verify]\ntrusted-repos = [\"https://github.com/deepseek-ai/DeepEP.git\"]")
        };
        let Some(v) = doc.get("verify") else { return Ok(Vec::new()) };
        let Some(list) = v.as_table().ok_or_else(bad)?.get("trusted-repos") else { return Ok(Vec::new()) };
        list.as_array()
            .ok_or_else(bad)?
            .iter()
            .map(|x| x.as_str().map(String::from).ok_or_else(|| bad().into()))
            .collect()
    }
}
