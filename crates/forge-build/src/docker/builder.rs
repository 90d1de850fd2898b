//! `docker build`: the bake file's targets built by docker (`docker buildx
//! bake`), podman or buildah. Every builder gets the same arguments, read from
//! the bake file; podman and buildah run daemonless (`--isolation chroot`) on
//! the base `base` makes, in a build context assembled here. Everything a
//! build cannot do (a missing builder, a platform this host cannot run, a flag
//! that contradicts the bake file) is refused before anything is pulled or
//! built. Must not generate the bake file (that is `bake`) nor make the base.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::bake::{self, BakeFile, Target, INDEX_ARG, INDEX_SUFFIX};
use super::{base, check_index_url, BuildRequest};
use forge_model::pins::Pins;
use forge_os::error::Failure;
use forge_os::fs::{Kind, Tree};
use forge_os::printer::shell_word;
use forge_os::process::engine::{find, Builder};
use forge_os::process::Cmd;

/// The flags of `podman build` / `buildah build` a user may add after `--`:
/// none of them changes what the bake file decides (stage, platform, args, tags).
const PASSTHROUGH: &[&str] = &["--no-cache", "--pull", "--quiet", "-q", "--squash"];

/// What `docker build` made, handed to the command as each build ends (it prints them).
#[derive(Debug, Clone)]
pub enum Built {
    /// `docker buildx bake` built these targets of the bake file.
    Bake { targets: Vec<String>, file: PathBuf },
    /// podman or buildah built one target as `tag` on the base `base`.
    Image { tag: String, target: String, builder: &'static str, base: String },
}

impl Built {
    /// Its line in the human output.
    pub fn render(&self) -> String {
        match self {
            Built::Bake { targets, file } => {
                format!(
                    "built {} from {} (docker)",
                    targets.join(", "),
                    forge_os::line::Line::new(file.to_string_lossy())
                )
            }
            Built::Image { tag, target, builder, base } => format!("built {tag} ({target}, {builder}, base {base})"),
        }
    }
}

/// `docker build`: every target built, or the first failure (exit 1 for a
/// failed build, 2 for bad input, 3 for a missing tool); `built` hears of
/// each image as it is made.
pub fn build(a: BuildRequest, mut built: impl FnMut(&Built)) -> Result<()> {
    let pins = Pins::load(&a.pins)?;
    for v in &a.variant {
        pins.variant(v)?;
    }
    let file = read_fresh(&a, &pins)?;
    let index = a.index.as_deref().map(check_index_url).transpose()?;
    let names: Vec<String> =
        if a.variant.is_empty() { pins.variants.iter().map(|v| v.name.clone()).collect() } else { a.variant.clone() };
    let suffix = if index.is_some() { INDEX_SUFFIX } else { "" };
    let targets: Vec<(String, Target)> = names
        .iter()
        .map(|n| {
            let t = format!("{n}{suffix}");
            let target = file.target.get(&t).cloned().ok_or_else(|| {
                Failure::usage(format!("{} has no target `{t}`", a.file.display()))
                    .hint(format!("run `deepep-forge docker bake --pins {}`", shell_word(&a.pins.to_string_lossy())))
            })?;
            Ok((t, target))
        })
        .collect::<Result<_>>()?;
    if a.builder == Builder::Docker {
        return docker_bake(&a, &targets, index.as_deref(), &mut built);
    }
    daemonless(&a, &targets, index.as_deref(), &mut built)
}

/// The bake file, which must be exactly what pins.toml generates (exit 2 otherwise).
fn read_fresh(a: &BuildRequest, pins: &Pins) -> Result<BakeFile> {
    let expected = bake::bake_json(pins, &bake::pins_in_context(&a.pins)?)?;
    let (root, rel) = super::place_read(&a.file)?;
    let current = match forge_os::fs::named::kind_through(&root) {
        Kind::Missing => None,
        _ => Tree::open(&root, super::folder_name(&root))?.read_text_opt(&rel, forge_os::input::cap::TEXT)?,
    };
    if current.as_deref() != Some(expected.as_str()) {
        return Err(Failure::usage(format!(
            "{} is {} {}: building from it would not build what pins.toml says",
            a.file.display(),
            if current.is_some() { "stale against" } else { "missing for" },
            a.pins.display()
        ))
        .hint(format!(
            "run `deepep-forge docker bake --pins {} --out {}` first",
            shell_word(&a.pins.to_string_lossy()),
            shell_word(&a.file.to_string_lossy())
        ))
        .into());
    }
    Ok(serde_json::from_str(&expected)?)
}

// ---- docker buildx bake -----------------------------------------------------

fn docker_bake(
    a: &BuildRequest,
    targets: &[(String, Target)],
    index: Option<&str>,
    built: &mut dyn FnMut(&Built),
) -> Result<()> {
    if a.source.is_some() || a.forge_binary.is_some() {
        return Err(Failure::usage("--source and --forge-binary are for `--builder podman|buildah`")
            .hint("with docker, set the args in the bake call: -- --set '*.args.DEEPEP_SOURCE=PATH-IN-CONTEXT'")
            .into());
    }
    let docker = find(Builder::Docker)?;
    let probe = Cmd::new(&docker, "ask docker for buildx").args(["buildx", "version"]).capture()?;
    if !probe.status.success() {
        let why = String::from_utf8_lossy(&probe.stderr);
        return Err(Failure::env(format!("docker buildx is not available ({}): {}", docker.display(), why.lines().next().unwrap_or("").trim()))
            .hint("install the buildx plugin (Debian/Ubuntu: apt-get install docker-buildx-plugin; or https://github.com/docker/buildx#installing), or build daemonless: --builder podman")
            .into());
    }
    let mut cmd = Cmd::new(&docker, format!("build images from {}", a.file.display()));
    cmd.args(["buildx", "bake", "-f"]).arg(&a.file);
    if let Some(url) = index {
        for (t, _) in targets {
            cmd.arg(format!("--set={t}.args.{INDEX_ARG}={url}"));
        }
    }
    if let Some(ts) = a.timestamp {
        cmd.env("SOURCE_DATE_EPOCH", ts.to_string());
    }
    // Explicit targets only when variants were named (bake's default group otherwise).
    if !a.variant.is_empty() || index.is_some() {
        cmd.args(targets.iter().map(|(t, _)| t.as_str()));
    }
    cmd.args(&a.extra);
    let status = cmd.run_inherit()?;
    forge_os::error::check_interrupted()?;
    if !status.success() {
        return Err(failed_build(&format!("docker buildx bake failed ({status})")));
    }
    built(&Built::Bake { targets: targets.iter().map(|(t, _)| t.clone()).collect(), file: a.file.clone() });
    Ok(())
}

fn failed_build(what: &str) -> anyhow::Error {
    Failure::problems(what.to_string())
        .hint("the image's last step is `deepep-forge probe`: a probe failure (FAIL <rule> above) means the wheel does not fit the variant's topology or pin")
        .into()
}

// ---- podman / buildah --------------------------------------------------------

/// What the daemonless build sets besides the bake file's args (the user may not).
const TOOL_ARGS: &[&str] = &["CUDA_BASE_IMAGE", "FORGE_SOURCE", "FORGE_BINARY", "DEEPEP_SOURCE", "SOURCE_DATE_EPOCH"];

fn daemonless(
    a: &BuildRequest,
    targets: &[(String, Target)],
    index: Option<&str>,
    built: &mut dyn FnMut(&Built),
) -> Result<()> {
    // Everything that can be refused is refused before anything is pulled or built.
    let here = Tree::open(Path::new("."), "build context")?;
    let dockerfile = read_dockerfile(&here, targets)?;
    let declared = forge_model::dockerfile::declared_args(&dockerfile);
    for (_, t) in targets {
        check_extra(&a.extra, t, &declared)?;
        check_platform(t)?;
        pins_in_context(t)?;
    }
    if let Some(s) = &a.source {
        let url = s.contains("://") || s.starts_with("git@");
        if !url && forge_os::fs::named::kind_through(Path::new(s)) != Kind::Dir {
            return Err(Failure::usage(format!("--source {}: no such folder", forge_os::input::excerpt(s, 200)))
                .hint("pass a DeepEP clone, a bare mirror, a folder of DeepEP's files, or a git URL")
                .into());
        }
    }
    let program = find(a.builder)?;
    let forge = forge_binary(a)?;
    let base = base::check(&a.base)?;
    let cache = forge_store::cache::Cache::at(forge_store::cache::resolve_dir(a.cache_dir.as_deref())?);
    // Each base planned first: a base that must be made has its suite checked at the mirror now.
    let mut bases = Vec::new();
    for (_, t) in targets {
        bases.push(base::plan(a.builder, &program, &cache, &base, arch_of(t)?)?);
    }
    for ((name, t), planned) in targets.iter().zip(&bases) {
        let base_ref = base::ensure(a.builder, &program, &cache, &base, planned)?;
        let staging = cache.stage()?;
        let ctx = Tree::open(staging.path(), "build context")?;
        assemble_context(&ctx, t, &a.pins, &forge, &dockerfile)?;
        if let Some(src) = &a.source {
            put_source(src, &cache, &ctx.join("deepep"))?;
        }
        let tag = format!("localhost/{}", t.tags.first().map(String::as_str).unwrap_or(name));
        let mut cmd = Cmd::new(&program, format!("build image {tag} with {}", a.builder.program()));
        cmd.args(builder_argv(t, ctx.path(), &tag, &base_ref, a, index));
        cmd.args(&a.extra).arg(ctx.path());
        let status = cmd.run_inherit()?;
        forge_os::error::check_interrupted()?;
        if !status.success() {
            return Err(failed_build(&format!("{} build of {name} failed ({status})", a.builder.program())));
        }
        built(&Built::Image { tag, target: name.clone(), builder: a.builder.program(), base: base_ref });
    }
    Ok(())
}

/// The one Dockerfile the targets name (read bounded from the build context, the current
/// folder, never through a link out of it); the bake file's `docker/Dockerfile` absent
/// there, the one inside this binary.
fn read_dockerfile(here: &Tree, targets: &[(String, Target)]) -> Result<String> {
    let files: BTreeSet<&str> = targets.iter().map(|(_, t)| t.dockerfile.as_str()).collect();
    let [file] = files.into_iter().collect::<Vec<_>>()[..] else {
        anyhow::bail!("the selected targets name different Dockerfiles");
    };
    if file == super::DOCKERFILE && here.kind(file)? == Kind::Missing {
        forge_os::note!("note: no {file} here: building with the image definition inside this deepep-forge");
        return Ok(super::DOCKERFILE_TEXT.to_string());
    }
    here.read_text(file, forge_os::input::cap::TEXT)
}

/// The flags after `--` for podman/buildah: only those that leave the bake
/// file's decisions alone; a `--build-arg` only for an ARG the Dockerfile
/// declares and neither the bake file nor the tool sets (exit 2 otherwise).
pub fn check_extra(extra: &[String], t: &Target, declared: &BTreeSet<String>) -> Result<()> {
    let mut it = extra.iter();
    while let Some(flag) = it.next() {
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (flag.as_str(), None),
        };
        if name == "--build-arg" {
            let value = match inline {
                Some(v) => v.to_string(),
                None => it.next().cloned().context("--build-arg needs NAME=VALUE")?,
            };
            let arg = value.split('=').next().unwrap_or("");
            let why = if !declared.contains(arg) {
                Some("docker/Dockerfile declares no such ARG")
            } else if t.args.contains_key(arg) {
                Some("the bake file sets it from pins.toml")
            } else if TOOL_ARGS.contains(&arg) {
                Some("deepep-forge sets it for podman/buildah")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(Failure::usage(format!(
                    "-- --build-arg {}: {why}",
                    forge_os::input::excerpt(&value, 80)
                ))
                .hint("change pins.toml and run `deepep-forge docker bake` for what the bake file sets; pass only ARGs it leaves open (e.g. PYTHON_PACKAGES)")
                .into());
            }
            continue;
        }
        if !PASSTHROUGH.contains(&name) {
            return Err(Failure::usage(format!(
                "-- {}: not a flag `docker build` passes to podman/buildah",
                forge_os::input::excerpt(flag, 80)
            ))
            .hint(format!(
                "the stage, platform, tags, labels and args come from the bake file; allowed after --: {}, --build-arg NAME=VALUE",
                PASSTHROUGH.join(", ")
            ))
            .into());
        }
    }
    Ok(())
}

/// The target's architecture as Debian and `uname -m` name it.
fn arch_of(t: &Target) -> Result<base::Arch> {
    match t.platforms.as_slice() {
        [p] if p == "linux/amd64" => Ok(base::Arch::Amd64),
        [p] if p == "linux/arm64" => Ok(base::Arch::Arm64),
        other => {
            Err(Failure::usage(format!("bake target platforms {other:?}: expected one of linux/amd64, linux/arm64"))
                .hint("regenerate the bake file: deepep-forge docker bake")
                .into())
        }
    }
}

/// A target for another architecture needs qemu registered with binfmt_misc
/// (exit 3 otherwise, before anything is built).
pub fn check_platform(t: &Target) -> Result<()> {
    let arch = arch_of(t)?;
    if arch.uname() == std::env::consts::ARCH {
        return Ok(());
    }
    let entry = Path::new("/proc/sys/fs/binfmt_misc").join(format!("qemu-{}", arch.uname()));
    let enabled = forge_os::fs::named::read_text(&entry, "binfmt_misc entry", 64 << 10)
        .is_ok_and(|s| s.lines().next() == Some("enabled"));
    if enabled {
        return Ok(());
    }
    Err(Failure::env(format!(
        "{} is {}, but this host is {} and has no qemu-{} registered with binfmt_misc ({} missing or disabled)",
        t.tags.first().map(String::as_str).unwrap_or("the target"),
        t.platforms[0],
        std::env::consts::ARCH,
        arch.uname(),
        entry.display()
    ))
    .hint(format!(
        "install qemu-user-static and binfmt-support (Debian/Ubuntu: apt-get install qemu-user-static binfmt-support) so {} binaries run here, or build this variant on a {} host",
        arch.uname(),
        arch.uname()
    ))
    .into())
}

/// The deepep-forge binary the image gets (default: the running one).
fn forge_binary(a: &BuildRequest) -> Result<PathBuf> {
    let p = match &a.forge_binary {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("finding this deepep-forge binary")?,
    };
    if !matches!(forge_os::fs::named::kind_through(&p), Kind::File { .. }) {
        return Err(Failure::usage(format!("--forge-binary {}: not a file", p.display()))
            .hint("build it: cargo build --release --bin deepep-forge")
            .into());
    }
    Ok(p)
}

/// The build context of one target: the Dockerfile at its path, the pins file
/// at PINS, the deepep-forge binary at FORGE_BINARY's default and, with
/// `--source`, DeepEP's repository at `deepep/`. Nothing else of the current
/// folder reaches the builder. Written into the fresh staging folder `ctx`
/// through its [`Tree`] (paths from the bake file stay inside it).
fn assemble_context(ctx: &Tree, t: &Target, pins: &Path, forge: &Path, dockerfile: &str) -> Result<()> {
    let folder_of = |rel: &str| -> Result<()> {
        match Path::new(rel).parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(p) => ctx.create_dir_all(p),
            None => Ok(()),
        }
    };
    folder_of(&t.dockerfile)?;
    ctx.write(&t.dockerfile, dockerfile.as_bytes())?;
    let pins_rel = pins_in_context(t)?;
    folder_of(pins_rel)?;
    ctx.write(pins_rel, forge_os::fs::named::read_text(pins, "pins file", forge_os::input::cap::TEXT)?.as_bytes())?;
    let (mut bin, _) = forge_os::fs::named::open(forge, "deepep-forge binary", forge_os::input::cap::WHEEL)?;
    let to = "target/release/deepep-forge";
    folder_of(to)?;
    ctx.write_with(to, 0o755, |f| {
        std::io::copy(&mut bin, f).with_context(|| format!("copying {}", forge.display()))?;
        Ok(())
    })
}

/// `--source` read as build-wheel reads it (a checkout, a bare repository, or
/// a folder committed into a snapshot repository) and cloned bare into the
/// context: only committed objects travel, never a working tree's build
/// outputs, and the pinned revision is checked out from it inside the build.
fn put_source(s: &str, cache: &forge_store::cache::Cache, dest: &Path) -> Result<()> {
    let origin = forge_store::source::resolve(s, cache.root())?;
    let parent = dest.parent().expect("the context folder");
    forge_os::process::git::git(
        parent,
        forge_os::process::git::Trust::User,
        format!("copy --source {s} into the build context"),
    )
    .args(["clone", "-q", "--bare", "--no-hardlinks", "--"])
    .arg(&origin.repo)
    .arg(dest)
    .output()?;
    Ok(())
}

/// The pins file's path in the build context (PINS): relative, no `..` (exit 2 otherwise).
fn pins_in_context(t: &Target) -> Result<&str> {
    let rel = t.args.get("PINS").map(String::as_str).unwrap_or("pins.toml");
    if !Path::new(rel).components().all(|c| matches!(c, std::path::Component::Normal(_))) {
        return Err(Failure::usage(format!("the pins file {rel} is outside the build context"))
            .hint("run from the repository root and pass a pins file inside it")
            .into());
    }
    Ok(rel)
}

/// podman/buildah's argv for one target, every value in one `--flag=value`
/// word: the bake file's stage, platform, labels and args, plus the base, the
/// prebuilt deepep-forge and the reproducibility settings.
pub fn builder_argv(
    t: &Target,
    ctx: &Path,
    tag: &str,
    base_ref: &str,
    a: &BuildRequest,
    index: Option<&str>,
) -> Vec<String> {
    // `--layers=true`: one layer per step with both builders (buildah's default squashes each stage).
    let mut v: Vec<String> =
        vec!["build".into(), "--isolation=chroot".into(), "--pull=never".into(), "--layers=true".into()];
    v.push(format!("--file={}", ctx.join(&t.dockerfile).display()));
    v.push(format!("--target={}", t.target));
    v.push(format!("--platform={}", t.platforms[0]));
    v.push(format!("--tag={tag}"));
    let mut args: BTreeMap<String, String> = t.args.clone();
    args.insert("CUDA_BASE_IMAGE".into(), base_ref.to_string());
    args.insert("FORGE_SOURCE".into(), "prebuilt".into());
    if a.source.is_some() {
        args.insert("DEEPEP_SOURCE".into(), "deepep".into());
    }
    if let Some(url) = index {
        args.insert(INDEX_ARG.into(), url.to_string());
    }
    // The registry-free base has no CUDA math headers or libcuda stub of its
    // own: build-wheel provisions the registry toolchain, as on a machine
    // without a CUDA install, unless the user chose (`-- --build-arg BUILD_TOOLCHAIN=system`).
    if !a.extra.iter().any(|f| f.contains("BUILD_TOOLCHAIN=")) {
        args.insert("BUILD_TOOLCHAIN".into(), "registry".into());
    }
    if let Some(ts) = a.timestamp {
        v.push(format!("--timestamp={ts}"));
        args.insert("SOURCE_DATE_EPOCH".into(), ts.to_string());
    }
    v.extend(t.labels.iter().map(|(k, val)| format!("--label={k}={val}")));
    v.extend(args.iter().map(|(k, val)| format!("--build-arg={k}={val}")));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use forge_os::error::Exit;

    fn target() -> Target {
        let p = Pins::parse(include_str!("../../../../pins.toml"), Path::new("pins.toml")).unwrap();
        let f: BakeFile = serde_json::from_str(&bake::bake_json(&p, "pins.toml").unwrap()).unwrap();
        f.target["h100"].clone()
    }

    fn declared() -> BTreeSet<String> {
        forge_model::dockerfile::declared_args(super::super::DOCKERFILE_TEXT)
    }

    fn extra(v: &[&str]) -> Result<()> {
        check_extra(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>(), &target(), &declared())
    }

    #[test]
    fn extra_flags_may_not_contradict_the_bake_file() {
        assert!(extra(&["--no-cache", "--pull=never", "--build-arg", "PYTHON_PACKAGES=setuptools wheel"]).is_ok());
        assert!(extra(&["--build-arg=BUILD_TOOLCHAIN=system"]).is_ok());
        for (flags, says) in [
            (&["--build-arg", "PROBE_EP=16"][..], "the bake file sets it"),
            (&["--build-arg=TORCH_CUDA_ARCH_LIST=8.0"][..], "the bake file sets it"),
            (&["--build-arg", "NOPE=1"][..], "declares no such ARG"),
            (&["--build-arg", "CUDA_BASE_IMAGE=x"][..], "deepep-forge sets it"),
            (&["--platform=linux/arm64"][..], "not a flag"),
            (&["--target", "builder"][..], "not a flag"),
            (&["--tag=evil"][..], "not a flag"),
        ] {
            let e = extra(flags).unwrap_err();
            assert_eq!(forge_os::error::exit_of(&e), Exit::Usage, "{flags:?}");
            assert!(format!("{e:#}").contains(says), "{flags:?}: {e:#}");
        }
    }

    #[test]
    fn every_value_is_one_flag_word_and_the_args_are_the_bake_files() {
        let t = target();
        // `docker build --builder podman --timestamp 0`, the other flags at their defaults.
        let a = super::super::BuildRequest {
            variant: Vec::new(),
            pins: "pins.toml".into(),
            file: super::super::BAKE_FILE.into(),
            builder: forge_os::process::engine::Builder::Podman,
            index: None,
            source: None,
            forge_binary: None,
            timestamp: Some(0),
            base: super::super::base::BaseRequest {
                suite: "bookworm".into(),
                mirror: super::super::base::DEFAULT_MIRROR.into(),
            },
            cache_dir: None,
            extra: Vec::new(),
        };
        let v = builder_argv(
            &t,
            Path::new("/ctx"),
            "localhost/x",
            "localhost/base",
            &a,
            Some("http://127.0.0.1:1/h100/simple/"),
        );
        assert!(v.iter().skip(1).all(|w| w.starts_with("--") && w.contains('=')), "{v:?}");
        for (k, val) in &t.args {
            if k != INDEX_ARG {
                assert!(v.contains(&format!("--build-arg={k}={val}")), "{k} missing: {v:?}");
            }
        }
        assert!(v.contains(&"--build-arg=DEEPEP_INDEX=http://127.0.0.1:1/h100/simple/".to_string()));
        assert!(v.contains(&"--build-arg=CUDA_BASE_IMAGE=localhost/base".to_string()));
        assert!(v.contains(&"--platform=linux/amd64".to_string()) && v.contains(&"--timestamp=0".to_string()));
        assert!(v.contains(&"--build-arg=SOURCE_DATE_EPOCH=0".to_string()), "pip's .pyc files follow it");
        assert!(v.contains(&"--build-arg=BUILD_TOOLCHAIN=registry".to_string()), "{v:?}");
        assert!(
            v.contains(&"--file=/ctx/docker/Dockerfile".to_string()) && v.contains(&"--target=runtime".to_string())
        );
    }

    #[test]
    fn index_urls_are_http_and_end_in_a_slash() {
        assert_eq!(check_index_url("http://127.0.0.1:8000/h100/simple").unwrap(), "http://127.0.0.1:8000/h100/simple/");
        // The slash goes on the path; a query, a fragment and userinfo pass through unchanged.
        for (given, handed) in [
            ("http://host/simple/?v=1", "http://host/simple/?v=1"),
            ("http://host/simple?v=1", "http://host/simple/?v=1"),
            ("https://u:p@host:8443/s#frag", "https://u:p@host:8443/s/#frag"),
        ] {
            assert_eq!(check_index_url(given).unwrap(), handed, "{given}");
        }
        for bad in ["file:///srv/idx", "--index-url=x", "http://a b/", "ftp://x/"] {
            assert_eq!(forge_os::error::exit_of(&check_index_url(bad).unwrap_err()), Exit::Usage, "{bad}");
        }
    }
}
