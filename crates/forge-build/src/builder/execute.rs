//! Execute one plan: the wheel from the cache (local, then remote), else
//! preflight, a fresh checkout in the plan's working folder, the plan's one
//! command with exactly its environment, checks (version, extensions),
//! RUNPATH relocation, provenance (derived from the plan) stamped into the
//! wheel, published into the cache. Delivery into `--out` is `deliver`'s,
//! once every variant is ready. Must not decide what to build: every
//! argument, variable and path comes from the [`Plan`].
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::deliver::recorded_patches;
use super::plan::{CompilerCache, Plan};
use super::{preflight, relocate};
use forge_os::error::{check_interrupted, Failure};
use forge_os::fs::Tree;
use forge_store::cache::{self, remote, Cache};
use forge_store::source;
use forge_wheel::provenance::{self, Patch};
use forge_wheel::wheel::{stamp, WheelName};

/// A plan's wheel, ready to deliver, and where it came from.
pub struct Executed {
    pub status: &'static str,
    pub entry: cache::Entry,
    /// The folder holding the wheel: its cache entry, or (`--no-cache`) the staging folder.
    pub dir: PathBuf,
    pub patches: Vec<Patch>,
    pub log: Option<PathBuf>,
    /// An uncached build's staging folder, kept until the run has delivered.
    pub staging: Option<cache::Staging>,
}

/// Where the wheels come from and go.
pub struct Target<'a> {
    pub cache_dir: &'a Path,
    pub no_cache: bool,
    pub remote: Option<&'a remote::Remote>,
}

/// The plan's wheel, from the cache or built (and published into the cache).
pub fn execute(pl: &Plan, t: &Target, notes: &mut Vec<String>) -> Result<Executed> {
    let key = pl.cache_key.as_deref().ok_or_else(|| {
        Failure::env(format!(
            "the plan of `{}` has no cache key: {}",
            pl.variant.name,
            pl.cache_key_unknown.as_deref().unwrap_or("unknown")
        ))
    })?;
    let key = cache::Key::parse(key).map_err(|f| f.with_exit(forge_os::error::Exit::Problems))?;
    match from_cache(pl, &key, t, notes)? {
        Ok(d) => Ok(d),
        // The key's lock (when caching) is held until the fresh build is published.
        Err(_lock) => fresh(pl, &key, t, notes).map_err(|e| with_remote_reason(e, notes)),
    }
}

/// A local build that fails after the remote entry was passed over keeps why
/// it was (notes are printed only with a result): the user sees both reasons.
fn with_remote_reason(e: anyhow::Error, notes: &[String]) -> anyhow::Error {
    let why: Vec<&str> = notes.iter().filter(|n| n.starts_with("remote cache")).map(String::as_str).collect();
    if why.is_empty() {
        return e;
    }
    e.context(format!("the local build failed; it ran because {}", why.join("; ")))
}

/// The wheel from the local cache, else the remote one (signed, its
/// provenance matching the plan), else (after taking the key's lock: one
/// builder per key, the others wait here and then reuse its entry) the local
/// cache again. `Err(lock)`: build it.
fn from_cache(
    pl: &Plan,
    key: &cache::Key,
    t: &Target,
    notes: &mut Vec<String>,
) -> Result<Result<Executed, Option<cache::KeyLock>>> {
    if t.no_cache {
        return Ok(Err(None));
    }
    let store = Cache::at(t.cache_dir);
    let hit = |status, h: cache::Hit| -> Result<Executed> {
        judge_hit(pl, &h.dir.join(&h.entry.wheel), status)?;
        let patches = recorded_patches(&h.dir.join(&h.entry.wheel))?;
        Ok(Executed { status, entry: h.entry, dir: h.dir, patches, log: None, staging: None })
    };
    if let Some(h) = store.lookup(key)? {
        return hit("cache-hit", h).map(Ok);
    }
    if let Some(r) = t.remote {
        let expect = remote::Expect { rev: &pl.source.rev, variant: &pl.variant };
        match store.fetch(r, key, &expect) {
            Ok(remote::Fetched::Hit(h)) => return hit("remote-hit", h).map(Ok),
            Ok(remote::Fetched::Miss) => notes.push("remote cache: miss".into()),
            Ok(remote::Fetched::Rejected(why)) => notes.push(format!("remote cache entry not used: {why}")),
            Err(e) => {
                check_interrupted()?;
                notes.push(format!("remote cache not used: {e:#}"));
            }
        }
    }
    let lock = store.lock(key)?;
    if let Some(h) = store.lookup(key)? {
        notes.push("built by a concurrent builder of the same key".into());
        return hit("cache-hit", h).map(Ok);
    }
    Ok(Err(Some(lock)))
}

/// A cached wheel is judged as a fresh one is (`manylinux::judge`: its tag set against
/// its members, and the plan's floor), so a floor set after it was cached still holds.
fn judge_hit(pl: &Plan, wheel: &Path, status: &str) -> Result<()> {
    let floor = pl.platform.floor.as_deref();
    let j = forge_wheel::manylinux::judge::wheel(wheel, floor)?;
    let Some(why) = j.refusal() else { return Ok(()) };
    let name = wheel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let hint = match floor {
        Some(f)
            if j.audit
                .as_ref()
                .is_some_and(|a| forge_wheel::manylinux::judge::above_floor(a, &j.elves, f).is_some()) =>
        {
            forge_wheel::manylinux::judge::floor_hint(f)
        }
        _ => format!("the cache entry {} does not hold what its name says: remove it and build again", wheel.display()),
    };
    Err(Failure::problems(format!("{name} ({status}) cannot be delivered under its name:\n  {why}")).hint(hint).into())
}

/// A shared compiler cache: probed, its server started with the credentials; a
/// storage that does not answer (now or later) is a note, never a failed build.
/// (the watcher, whether it was off from the start)
/// Without a shared one, the build's sccache server is started here, a child of this
/// command (`servers`: every server this build started, ended when it is dropped).
fn start_compiler_cache(
    pl: &Plan,
    root: &Tree,
    servers: &mut Vec<forge_os::process::Background>,
    notes: &mut Vec<String>,
) -> Result<Option<(Option<super::compiler_cache::Session>, bool)>> {
    let Some(h) = pl.hooks.as_ref() else { return Ok(None) };
    let mut env: std::collections::BTreeMap<String, String> = pl.run.env.clone();
    env.extend(h.env(root.path()).into_iter().map(|(k, v, _)| (k, v)));
    let env: Vec<(String, String)> = env.into_iter().collect();
    let Some(c) = h.compiler_cache.as_ref().filter(|c| matches!(c, CompilerCache::Remote { .. })) else {
        let socket = super::compiler_cache::socket(&env, root.path());
        servers.push(super::compiler_cache::serve(&h.sccache, &socket, &env, &[])?);
        start_later(pl, root, &env, &[], servers)?;
        return Ok(None);
    };
    let before = notes.len();
    let session = super::compiler_cache::start(c, &h.sccache, root, &env, servers, notes);
    let off = notes.len() > before;
    if !off {
        // The later server stores into the same storage (its credentials too: both servers are ours).
        start_later(pl, root, &env, &c.server_env(), servers)?;
    }
    Ok(Some((session, off)))
}

/// The later sccache server at a lower priority and the hook's list of the units that
/// compile first (`unit_order`), when the plan names any.
fn start_later(
    pl: &Plan,
    root: &Tree,
    env: &[(String, String)],
    secret: &[(String, String)],
    servers: &mut Vec<forge_os::process::Background>,
) -> Result<()> {
    use super::unit_order::{FIRST_FILE, LATER_NICE, LATER_SOCKET};
    let (Some(h), Some(s)) = (&pl.hooks, pl.side_by_side.as_ref().filter(|s| !s.first_units.is_empty())) else {
        return Ok(());
    };
    servers.push(super::compiler_cache::serve_at(&h.sccache, &root.join(LATER_SOCKET), env, secret, LATER_NICE)?);
    root.write(Path::new("bin").join(FIRST_FILE), (s.first_units.join("\n") + "\n").as_bytes())
}

/// After the build: the watcher stopped, sccache's statistics noted, its servers stopped.
fn finish_compiler_cache(
    pl: &Plan,
    root: &Tree,
    shared: Option<(Option<super::compiler_cache::Session>, bool)>,
    notes: &mut Vec<String>,
) {
    let Some(h) = &pl.hooks else { return };
    let started_off = shared.as_ref().is_some_and(|(_, off)| *off);
    drop(shared);
    let (stats, later) = h.finish(root);
    if let (Some(l), Some(st)) = (later, &stats) {
        notes.push(format!(
            "unit order: {} compile request(s) on the first server, {} on the later one (nice {})",
            st.requests - l.requests.min(st.requests),
            l.requests,
            super::unit_order::LATER_NICE
        ));
    }
    super::compiler_cache::finish(h.compiler_cache.as_ref(), &h.sccache, root, started_off, notes);
    if let (Some(st), Some(c)) = (stats, &h.compiler_cache) {
        notes.push(format!(
            "compiler cache {}: {} hits, {} misses, {} not cacheable (of {} compile requests)",
            c.describe(),
            st.hits,
            st.misses,
            st.not_cacheable,
            st.requests
        ));
    }
}

/// Preflight, fresh checkout, the plan's command, checks, relocation, stamping, publishing.
fn fresh(pl: &Plan, key: &cache::Key, t: &Target, notes: &mut Vec<String>) -> Result<Executed> {
    let tc =
        pl.toolchain().ok_or_else(|| Failure::env(format!("the plan of `{}` has no toolchain", pl.variant.name)))?;
    let store = Cache::at(t.cache_dir);
    // What the revision needs of the environment (NCCL), before waiting for the build root.
    preflight::environment(pl)?;
    let (root, build) = build_folder(pl, &store)?;
    // The cache's staging folder (the entry is assembled there), and the plan's build folder.
    let staging = Tree::open(build.path(), "staging folder")?;
    let work = root.as_ref().map(|r| &r.tree).unwrap_or(&staging);
    preflight::check(pl, tc, t.cache_dir)?;
    let short = compile(pl, t, (root.as_ref(), work, &staging), notes)?;
    let built = work.join(single_wheel(work, inside(work, &pl.dist())?)?);
    let (file_name, name, members) = check_built(pl, &built, &short)?;
    check_interrupted()?;
    let mut changes = stamp::Changes { epoch: pl.source.source_date_epoch, ..Default::default() };
    let file_name = relabel(&mut changes, &file_name, &name.version, pl)?;
    // Relocate RUNPATHs that point into the build Python's site-packages.
    let under = pl.hooks.as_ref().map(|_| pl.build_dir());
    let patches = relocate_runpaths(tc, under, &built, &members, &staging, &mut changes)?;
    if let Some((member, data)) = requires_dist(pl, &built, &file_name)? {
        changes.replace.insert(member, data);
    }
    let mut prov = pl.provenance(key.as_str(), &short, &patches);
    let file_name = super::retag::retag(&built, &file_name, &mut changes, &mut prov, pl.platform.floor.as_deref())?;
    changes.add_dist_info.insert(provenance::FILE_NAME.into(), serde_json::to_vec_pretty(&prov)?);
    staging.create_dir(ENTRY, 0o755)?;
    let stage = staging.join(ENTRY);
    stamp::stamp(&built, &stage.join(&file_name), &changes)?;
    drop(root);
    check_interrupted()?;
    if let Some(x) = &tc.cross {
        cross_check(x, &stage.join(&file_name), build.path(), notes)?;
    }
    let entry = cache_entry(pl, key, &staging, file_name, &name.version)?;
    // Published: what the cache holds now (ours, or a concurrent publisher's of the same key).
    let (dir, entry, staging) = if t.no_cache {
        (stage, entry, Some(build))
    } else {
        let h = store.publish(&stage, key)?;
        (h.dir, h.entry, None)
    };
    for f in &pl.fixes {
        notes.push(format!("fix applied: {f}"));
    }
    Ok(Executed { status: "built", entry, dir, patches, log: Some(pl.outputs.log.clone()), staging })
}

/// The plan's build folder: this user's build root (checked, waited for, emptied, its links and
/// compiler wrappers installed; the cache entry is staged in the cache), or a locked
/// staging folder of the cache. Removed when dropped. The links exist before the
/// preflight, which looks for tools next to the Python.
fn build_folder(pl: &Plan, store: &Cache) -> Result<(Option<super::canon::BuildRoot>, cache::Staging)> {
    Ok(match &pl.hooks {
        Some(h) => {
            let r = super::canon::BuildRoot::acquire(pl.build_dir())?;
            h.install(&r.tree)?;
            (Some(r), store.stage()?)
        }
        None => (None, store.stage_at(pl.build_dir())?),
    })
}

/// Checkout, source patches, then the plan's command (the compiler cache and
/// NCCL reuse around it); returns the short sha the build tree gives.
/// `folders`: the build root (when the plan has one), the plan's build folder
/// (the root, or the staging folder), the cache's staging folder.
fn compile(
    pl: &Plan,
    t: &Target,
    folders: (Option<&super::canon::BuildRoot>, &Tree, &Tree),
    notes: &mut Vec<String>,
) -> Result<String> {
    let (root, work, staging) = folders;
    // The build's temp folder (TMPDIR), in the build folder: the compiler cache's server uses it too.
    if let Some(scratch) = pl.run.env.get("TMPDIR") {
        work.create_dir_all(inside(work, Path::new(scratch))?)?;
    }
    // Dropped last: every sccache server this build started ends with it, whatever happens.
    let mut servers = Vec::new();
    let shared = match root {
        Some(r) => start_compiler_cache(pl, &r.tree, &mut servers, notes)?,
        None => None,
    };
    let short = source::checkout(&pl.source.mirror, &pl.source.repo, &pl.source.rev, pl.tree(), &pl.source.submodules)?;
    if let Some(n) = read_elsewhere(pl) {
        notes.push(n);
    }
    // Source patches: after checkout and submodules, before anything compiles.
    forge_store::patch::apply(pl.tree(), &pl.source.patches, &staging.join("source-patches"))?;
    check_interrupted()?;
    let checkout = work.sub(inside(work, pl.tree())?, "checkout")?;
    let nccl = super::nccl_reuse::before(pl, &checkout, t.cache_dir, notes);
    work.create_dir_all(inside(work, &pl.dist())?)?;
    Tree::create(pl.outputs.log.parent().context("log dir")?, "log folder")?;
    let argv = super::side_by_side::command(pl)?;
    let ran = forge_os::process::Cmd::exact(
        argv,
        &pl.run.cwd,
        &pl.run.env,
        format!("building {} ({})", pl.variant.name, pl.source.version),
    )?
    .run_logged(&pl.outputs.log, &format!("build {}", pl.variant.name));
    // A shared storage that answered from start to end also keeps the revision's history.
    let mut shared_on = false;
    if let Some(r) = root {
        shared_on = shared.as_ref().is_some_and(|(_, off)| !off) && !r.tree.exists(super::compiler_cache::OFF_MARKER);
        finish_compiler_cache(pl, &r.tree, shared, notes);
    }
    let logs = super::side_by_side::keep_ninja_logs(pl.tree(), &pl.outputs.log);
    ran?;
    if let Some(r) = root {
        let times = super::unit_order::read_logs(&logs, &r.root);
        super::unit_order::keep(pl, t.cache_dir, &times, shared_on, notes);
    }
    super::nccl_reuse::after(pl, &checkout, t.cache_dir, nccl, notes);
    Ok(short)
}

/// The built wheel's file name, parsed name and members, checked: the version
/// the pin must give, every extension the interface builds.
fn check_built(pl: &Plan, built: &Path, short: &str) -> Result<(String, WheelName, Vec<String>)> {
    let file_name = built.file_name().context("wheel file name")?.to_string_lossy().into_owned();
    let name = WheelName::parse(&file_name).context("pip produced a wheel with an unparsable name")?;
    // setup.py labels the tree `<base>+<short>`; a patched build is relabelled `<base>+<short>.p<set>`.
    let exact = forge_model::patches::label(&pl.interface.base_version, short, &[]);
    if !same_version(&name.version, &exact) {
        return Err(Failure::problems(format!(
            "the built wheel's version is {} but the pin {} must give {exact} (git short in the build tree: {short})",
            name.version, pl.source.rev
        ))
        .hint(format!(
            "the `{}` interface takes the label from {} and `git rev-parse --short HEAD`: check that the source builds from its own checkout",
            pl.interface.branch.as_str(),
            pl.interface.version_from
        ))
        .into());
    }
    let members = zip_names(built)?;
    for ext in &pl.interface.extensions {
        let prefix = ext.replace('.', "/");
        if !members.iter().any(|m| m.starts_with(&format!("{prefix}.")) && m.contains(".so")) {
            return Err(Failure::problems(format!(
                "{} has no {ext} extension, which DeepEP's `{}` interface at {} builds",
                name.dist,
                pl.interface.branch.as_str(),
                pl.source.rev
            ))
            .hint("read the build log: setup.py did not build every extension its interface names")
            .into());
        }
    }
    Ok((file_name, name, members))
}

/// Every shared object whose RUNPATH points into the build Python's
/// site-packages, relocated with patchelf (in `patch_dir`) into `changes`.
/// Under a build root the linker recorded the root as the canonical one:
/// planned where it lies, recorded (provenance, what stays) as linked.
fn relocate_runpaths(
    tc: &super::toolchain::Toolchain,
    root: Option<&Path>,
    built: &Path,
    members: &[String],
    staging: &Tree,
    changes: &mut stamp::Changes,
) -> Result<Vec<Patch>> {
    let mut patches = Vec::new();
    for m in members.iter().filter(|m| m.ends_with(".so") || m.contains(".so.")) {
        let data = stamp::read_member(built, m)?;
        let Some(elf) = relocate::ElfDynamic::parse(&data)? else { continue };
        let spelled = |f: fn(&Path, &str) -> String, entries: &[String]| -> Vec<String> {
            entries.iter().map(|e| root.map(|r| f(r, e)).unwrap_or_else(|| e.clone())).collect()
        };
        let seen = relocate::ElfDynamic { runpath: spelled(super::canon::real, &elf.runpath), ..elf.clone() };
        let Some(new) = relocate::planned_runpath(m, &seen, &tc.site_packages) else { continue };
        let new = spelled(super::canon::canonical, &new);
        let patchelf = relocate::require_patchelf(&tc.python, m)?;
        let rel = Path::new("patch").join(patches.len().to_string());
        staging.create_dir_all("patch")?;
        staging.write(&rel, &data)?;
        let (patch, patched) = relocate::apply(&patchelf, m, (staging, &rel), &elf.runpath, &new)?;
        patches.push(patch);
        changes.replace.insert(m.clone(), patched);
        check_interrupted()?;
    }
    Ok(patches)
}

/// A cross-built wheel checked against the aarch64 sysroot (NEEDED resolved, imported under qemu).
fn cross_check(x: &super::toolchain::Sysroot, wheel: &Path, dir: &Path, notes: &mut Vec<String>) -> Result<()> {
    let checked = super::cross::check_wheel(wheel, x, dir)?;
    let n: usize = checked.needed.values().map(|m| m.len()).sum();
    notes.push(format!(
        "cross check: {n} NEEDED of {} extensions resolved in the aarch64 sysroot (libcuda.so.1/libnvidia-ml.so.1: the run machine's driver)",
        checked.needed.len()
    ));
    notes.push(format!("cross check: qemu-aarch64 {}", checked.import));
    check_interrupted()
}

/// The cache entry of the stamped wheel in `stage`, written there.
fn cache_entry(
    pl: &Plan,
    key: &cache::Key,
    staging: &Tree,
    file_name: String,
    built_version: &str,
) -> Result<cache::Entry> {
    let cap = forge_os::input::cap::WHEEL;
    let (wheel, _) = staging.open_file(Path::new(ENTRY).join(&file_name), cap)?;
    let (digest, size) = forge_os::input::sha256_reader(wheel, cap)?;
    let sha256 = hex::encode(digest);
    let now = provenance::now_secs();
    let entry = cache::Entry {
        schema: cache::SCHEMA,
        key: key.as_str().to_string(),
        wheel: file_name,
        sha256,
        size,
        variant: pl.variant.name.clone(),
        version: if pl.source.patches.is_empty() { built_version.to_string() } else { pl.source.version.clone() },
        created: provenance::rfc3339(now),
        created_secs: now,
    };
    cache::write_entry(&staging.join(ENTRY), &entry)?;
    Ok(entry)
}

/// A patched build's new label in `changes` and the wheel's new file name (unchanged when exact).
fn relabel(changes: &mut stamp::Changes, file_name: &str, built: &str, pl: &Plan) -> Result<String> {
    if pl.source.patches.is_empty() {
        return Ok(file_name.to_string());
    }
    let new = pl.source.version.clone();
    let renamed = file_name.replacen(&format!("-{built}-"), &format!("-{new}-"), 1);
    anyhow::ensure!(renamed != file_name, "cannot relabel {file_name} as {new}");
    changes.relabel = Some((built.to_string(), new));
    Ok(renamed)
}

/// The built wheel's METADATA with the plan's run-time requirements (`Requires-Dist`,
/// `closure`) and its `Name:` written as the file name writes it ([`file_name_form`]);
/// None when neither changes it.
fn requires_dist(pl: &Plan, built: &Path, file_name: &str) -> Result<Option<(String, Vec<u8>)>> {
    let reqs = pl.environment.as_ref().and_then(|e| e.requires.as_ref()).map(|r| r.written()).unwrap_or_default();
    let member = format!("{}/METADATA", stamp::dist_info_dir(forge_wheel::wheel::open(built)?.archive())?);
    let old = stamp::read_member(built, &member)?;
    let text = String::from_utf8(old).with_context(|| format!("{member} of the built wheel is not UTF-8"))?;
    let dist = file_name.split('-').next().unwrap_or_default();
    let mut new = file_name_form(&text, dist);
    if !reqs.is_empty() {
        new = super::closure::with_requires(&new, reqs);
    }
    Ok((new != text).then(|| (member, new.into_bytes())))
}

/// METADATA with its `Name:` as the wheel's file name writes it (`deep_ep`, not the
/// `deep-ep` newer setuptools writes): the same name under PEP 503, and the form pip
/// before 23.2 (the pip of Debian 12 and the images' venvs) compares unnormalised
/// with the name asked for ("inconsistent Name: expected 'deep_ep'").
pub fn file_name_form(metadata: &str, dist: &str) -> String {
    let canon = |n: &str| n.to_ascii_lowercase().replace(['_', '.'], "-");
    let mut out = String::with_capacity(metadata.len());
    let mut in_headers = true;
    for line in metadata.split_inclusive('\n') {
        if line.trim_end().is_empty() {
            in_headers = false;
        }
        match line.strip_prefix("Name:") {
            Some(v) if in_headers && canon(v.trim()) == canon(dist) && v.trim() != dist => {
                out.push_str("Name: ");
                out.push_str(dist);
                out.push_str(if line.ends_with("\r\n") {
                    "\r\n"
                } else if line.ends_with('\n') {
                    "\n"
                } else {
                    ""
                });
            }
            _ => out.push_str(line),
        }
    }
    out
}

/// Where the bytes were read from, when not from pins.toml's repository
/// (said in the build output; the wheel names pins.toml's repository).
fn read_elsewhere(pl: &Plan) -> Option<String> {
    let s = &pl.source;
    (!s.pinned_repo.is_empty() && s.repo != s.pinned_repo).then(|| {
        let from = match &s.snapshot_of {
            Some(dir) => format!("a snapshot of the folder {}", dir.display()),
            None => s.repo.clone(),
        };
        format!(
            "source read from {from}; the provenance names {} at {} (the commit names the content)",
            s.pinned_repo, s.rev
        )
    })
}

/// PEP 440 equality: setuptools normalises a short sha of digits only as a
/// number (`1.2.1+0155955` is built as `1.2.1+155955`).
fn same_version(a: &str, b: &str) -> bool {
    match (a.parse::<pep440_rs::Version>(), b.parse::<pep440_rs::Version>()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// The one wheel pip left in `dist` (relative to `work`), as a path relative to `work`.
fn single_wheel(work: &Tree, dist: &Path) -> Result<PathBuf> {
    let wheels: Vec<String> = work.names(dist)?.into_iter().filter(|n| n.ends_with(".whl")).collect();
    match wheels.as_slice() {
        [one] if work.is_file(dist.join(one)) => Ok(dist.join(one)),
        other => anyhow::bail!("pip wheel left {} wheels in {}, expected one", other.len(), work.join(dist).display()),
    }
}

/// The folder a fresh build assembles its cache entry in, in the staging folder.
const ENTRY: &str = "entry";

/// `p`, a path the plan names in its build folder, relative to that folder's tree.
fn inside<'p>(work: &Tree, p: &'p Path) -> Result<&'p Path> {
    p.strip_prefix(work.path()).map_err(|_| {
        anyhow::anyhow!("the plan's {} is not inside its build folder {}", p.display(), work.path().display())
    })
}

fn zip_names(wheel: &Path) -> Result<Vec<String>> {
    Ok(forge_wheel::wheel::open(wheel)?.archive().file_names().map(String::from).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn metadata_name_is_written_as_the_file_name_writes_it() {
        let m = "Metadata-Version: 2.1\nName: deep-ep\nVersion: 1.2.1+abc\n\nName: deep-ep in the description\n";
        assert_eq!(
            super::file_name_form(m, "deep_ep"),
            "Metadata-Version: 2.1\nName: deep_ep\nVersion: 1.2.1+abc\n\nName: deep-ep in the description\n"
        );
        assert_eq!(super::file_name_form(m, "other"), m, "another project's name is left alone");
        assert_eq!(super::file_name_form("Name: deep_ep\n", "deep_ep"), "Name: deep_ep\n");
    }

    #[test]
    fn versions_compare_by_pep440() {
        assert!(super::same_version("1.2.1+155955", "1.2.1+0155955"));
        assert!(super::same_version("1.2.1+17cfb81", "1.2.1+17cfb81"));
        assert!(!super::same_version("1.2.1+17cfb81", "1.2.2+17cfb81"));
    }
}
