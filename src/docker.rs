//! `docker bake` / `docker build`: container images from pins.toml. Owns the
//! generated `docker/docker-bake.json` (one buildx target per variant, args
//! from pins) and running `docker buildx bake`; must not build wheels itself
//! (the image runs `deepep-forge build-wheel`) nor parse Dockerfiles (that is
//! `dockerfile`).
use crate::process::Cmd;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::error::{Exit, Failure};
use crate::output::{annotation, Annotation, Format, Level};
use crate::pins::{Pins, Transport, Variant};

/// Where `docker bake` writes and `docker build` reads, relative to the repository root.
pub const BAKE_FILE: &str = "docker/docker-bake.json";
/// The Dockerfile the bake targets build.
pub const DOCKERFILE: &str = "docker/Dockerfile";
/// Image name the targets are tagged with (`<name>:<variant>-<version>`).
pub const IMAGE: &str = "deepep-forge/deep-ep";

#[derive(Debug, clap::Subcommand)]
pub enum DockerCommand {
    /// Generate docker/docker-bake.json from pins.toml: one buildx target per variant,
    /// platform from the variant's arch, build args (rev, arch list, multinode,
    /// transport, rdma-core, probe topology) from pins.
    Bake(BakeArgs),
    /// Build images with `docker buildx bake` from the bake file (which must be up to date).
    Build(BuildArgs),
}

#[derive(Debug, clap::Args)]
pub struct BakeArgs {
    /// Compare the generated file with the one on disk and write nothing; exit 1 when they differ.
    #[arg(long)]
    pub check: bool,
    /// The pins file (its path, relative to the build context, is passed to the image as PINS).
    #[arg(long, default_value = crate::pins::DEFAULT_PATH, value_name = "FILE")]
    pub pins: PathBuf,
    /// Where to write the bake file.
    #[arg(long, default_value = BAKE_FILE, value_name = "FILE")]
    pub out: PathBuf,
    /// Report format; `json` prints {schema, file, pins, status, targets, changes};
    /// `github` adds an `::error` annotation on a stale or missing file.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// `docker bake --format json` schema version.
pub const BAKE_REPORT_SCHEMA: u32 = 1;

/// What `docker bake` did or found.
#[derive(Debug, Serialize)]
pub struct BakeReport {
    pub schema: u32,
    pub file: PathBuf,
    pub pins: PathBuf,
    /// `up-to-date`, `written`, `stale` or `missing` (the last two only with --check).
    pub status: &'static str,
    pub targets: Vec<String>,
    /// Changed JSON paths, `target.h100.args.DEEPEP_REV: "a" -> "b"` (stale only).
    pub changes: Vec<String>,
    /// The command that regenerates the file (stale or missing only).
    pub fix: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// Variant(s) to build (bake targets); repeatable. Default: every variant.
    #[arg(long, value_name = "NAME")]
    pub variant: Vec<String>,
    /// The pins file the bake file was generated from.
    #[arg(long, default_value = crate::pins::DEFAULT_PATH, value_name = "FILE")]
    pub pins: PathBuf,
    /// The bake file.
    #[arg(long, default_value = BAKE_FILE, value_name = "FILE")]
    pub file: PathBuf,
    /// Extra arguments for `docker buildx bake`, after `--` (e.g. `-- --push`, `-- --set '*.cache-to=...'`).
    #[arg(last = true, value_name = "BAKE ARGS")]
    pub extra: Vec<String>,
}

pub fn run(cmd: DockerCommand) -> Result<Exit> {
    match cmd {
        DockerCommand::Bake(a) => bake(a),
        DockerCommand::Build(a) => build(a),
    }
}

// ---- the bake file ----------------------------------------------------------

#[derive(Serialize)]
struct BakeFile {
    group: BTreeMap<String, Group>,
    target: BTreeMap<String, Target>,
}

#[derive(Serialize)]
struct Group {
    targets: Vec<String>,
}

#[derive(Serialize)]
struct Target {
    context: String,
    dockerfile: String,
    /// The Dockerfile stage to build.
    target: String,
    platforms: Vec<String>,
    args: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    tags: Vec<String>,
}

/// The bake file for `pins` (deterministic: sorted keys, two-space indent,
/// trailing newline). `pins_in_context` is the pins file's path inside the
/// build context (the repository root).
pub fn bake_json(pins: &Pins, pins_in_context: &str) -> Result<String> {
    let mut target = BTreeMap::new();
    for v in &pins.variants {
        target.insert(v.name.clone(), bake_target(pins, v, pins_in_context)?);
    }
    let group = BTreeMap::from([(
        "default".to_string(),
        Group { targets: pins.variants.iter().map(|v| v.name.clone()).collect() },
    )]);
    let mut s = serde_json::to_string_pretty(&BakeFile { group, target })?;
    s.push('\n');
    Ok(s)
}

fn bake_target(pins: &Pins, v: &Variant, pins_in_context: &str) -> Result<Target> {
    let pin = pins.pin(v.arch)?;
    let version = pins.label(v.arch).expect("pin exists");
    let flag = |b: bool| if b { "1" } else { "0" }.to_string();
    let mut args = BTreeMap::from([
        ("VARIANT".to_string(), v.name.clone()),
        ("PINS".into(), pins_in_context.to_string()),
        ("DEEPEP_REV".into(), pin.rev.clone()),
        ("TORCH_CUDA_ARCH_LIST".into(), v.cuda_arch_list.to_env()),
        ("HYBRID_EP_MULTINODE".into(), flag(v.multinode)),
        ("USE_NIXL".into(), flag(v.multinode && v.transport == Transport::Nixl)),
        ("RDMA_CORE_HOME".into(), v.rdma_core_home.clone().unwrap_or_default()),
    ]);
    // No topology: the image's probe judges the wheel against pins.toml only (empty PROBE_* args).
    let t = v.topology.as_ref();
    let num = |f: fn(&crate::pins::IntendedTopology) -> u32| t.map(|t| f(t).to_string()).unwrap_or_default();
    args.extend([
        ("PROBE_GPU".to_string(), t.map(|t| t.gpu_names(" ")).unwrap_or_default()),
        ("PROBE_EP".into(), num(|t| t.ep)),
        ("PROBE_NODES".into(), num(|t| t.nodes)),
        ("PROBE_GPUS_PER_NODE".into(), num(|t| t.gpus_per_node)),
        ("PROBE_RANKS_PER_DOMAIN".into(), num(|t| t.ranks_per_domain)),
        (
            "PROBE_MNNVL".into(),
            t.map(|t| if t.mnnvl { "--mnnvl" } else { "--no-mnnvl" }.to_string()).unwrap_or_default(),
        ),
    ]);
    if let Some(rc) = &pins.rdma_core {
        args.insert("RDMA_CORE_REPO".into(), rc.repo.clone());
        args.insert("RDMA_CORE_REF".into(), rc.git_ref.clone());
    }
    if let Some(tc) = &pins.toolchain {
        args.insert("TORCH_VERSION".into(), tc.torch.clone());
    }
    let labels = BTreeMap::from([
        ("org.opencontainers.image.title".to_string(), format!("DeepEP {version} ({})", v.name)),
        ("org.opencontainers.image.source".into(), pins.source.repo.clone()),
        ("org.opencontainers.image.revision".into(), pin.rev.clone()),
        ("org.opencontainers.image.version".into(), version.clone()),
    ]);
    Ok(Target {
        context: ".".into(),
        dockerfile: DOCKERFILE.into(),
        target: "runtime".into(),
        platforms: vec![v.arch.docker_platform().into()],
        args,
        labels,
        tags: vec![format!("{IMAGE}:{}-{}", v.name, version.replace('+', "-"))],
    })
}

/// The pins file's path as the image sees it: relative to the directory the
/// command runs in (the build context), with `/` separators.
fn pins_in_context(pins: &Path) -> Result<String> {
    if pins.is_absolute() {
        let cwd = std::env::current_dir()?;
        let rel = pins.strip_prefix(&cwd).map_err(|_| {
            Failure::usage(format!("{} is outside the build context {}", pins.display(), cwd.display()))
                .hint("run from the repository root and pass a pins file inside it")
        })?;
        return Ok(rel.to_string_lossy().replace('\\', "/"));
    }
    Ok(pins.to_string_lossy().trim_start_matches("./").replace('\\', "/"))
}

/// How two bake files differ: one entry per changed JSON path
/// (`target.h100.args.TORCH_CUDA_ARCH_LIST: "9.0" -> "9.0a"`), at most 20.
fn diff_summary(old: &str, new: &str) -> Vec<String> {
    fn walk(path: &str, a: Option<&serde_json::Value>, b: Option<&serde_json::Value>, out: &mut Vec<String>) {
        use serde_json::Value::Object;
        match (a, b) {
            (Some(Object(x)), Some(Object(y))) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    walk(&p, x.get(k), y.get(k), out);
                }
            }
            (Some(x), Some(y)) if x == y => {}
            (Some(x), Some(y)) => out.push(format!("{path}: {x} -> {y}")),
            (Some(_), None) => out.push(format!("{path}: removed")),
            (None, Some(y)) => {
                out.push(format!("{path}: added {}", if y.is_object() { "{...}".to_string() } else { y.to_string() }))
            }
            (None, None) => {}
        }
    }
    let Ok(a) = serde_json::from_str::<serde_json::Value>(old) else {
        return vec!["the file on disk is not valid JSON".into()];
    };
    let b: serde_json::Value = serde_json::from_str(new).expect("generated JSON parses");
    let mut out = Vec::new();
    walk("", Some(&a), Some(&b), &mut out);
    if out.is_empty() {
        out.push("same content, different formatting".into());
    }
    let more = out.len().saturating_sub(20);
    out.truncate(20);
    if more > 0 {
        out.push(format!("... and {more} more"));
    }
    out
}

fn bake(a: BakeArgs) -> Result<Exit> {
    let pins = Pins::load(&a.pins)?;
    let text = bake_json(&pins, &pins_in_context(&a.pins)?)?;
    let current = crate::input::read_text_opt(&a.out, "bake file", crate::input::cap::TEXT)?;
    let fix = format!("deepep-forge docker bake --pins {} --out {}", a.pins.display(), a.out.display());
    let (status, changes) = match &current {
        Some(t) if *t == text => ("up-to-date", Vec::new()),
        _ if !a.check => {
            write_atomic(&a.out, &text)?;
            ("written", Vec::new())
        }
        Some(old) => ("stale", diff_summary(old, &text)),
        None => ("missing", Vec::new()),
    };
    let problem = matches!(status, "stale" | "missing");
    let report = BakeReport {
        schema: BAKE_REPORT_SCHEMA,
        file: a.out.clone(),
        pins: a.pins.clone(),
        status,
        targets: pins.variants.iter().map(|v| v.name.clone()).collect(),
        changes,
        fix: problem.then(|| fix.clone()),
    };
    if a.format == Format::Json {
        crate::printer::json(&report)?;
    } else {
        let human = render_bake(&report);
        if a.format == Format::Github && problem {
            let msg = format!("{} is {status}: regenerate it from {}", a.out.display(), a.pins.display());
            let note = Annotation {
                file: Some(&a.out),
                title: "deepep-forge docker-bake".into(),
                message: format!("{msg}\n{human}"),
                ..Default::default()
            };
            crate::out!("{}", annotation(Level::Error, &note));
        }
        crate::out!("{human}");
    }
    Ok(if problem { Exit::Problems } else { Exit::Ok })
}

fn render_bake(r: &BakeReport) -> String {
    let (file, pins) = (r.file.display(), r.pins.display());
    let mut s = match r.status {
        "up-to-date" => format!("{file}: up to date ({} targets from {pins})\n", r.targets.len()),
        "written" => format!("{file}: written ({} targets from {pins})\n", r.targets.len()),
        "missing" => format!("{file}: missing (it is generated from {pins})\n"),
        _ => format!("{file}: stale: it differs from what {pins} generates:\n"),
    };
    for c in &r.changes {
        s.push_str(&format!("  {c}\n"));
    }
    if let Some(fix) = &r.fix {
        s.push_str(&format!("fix: run `{fix}` and commit the result\n"));
    }
    s
}

/// Write via a temp file in the same directory and rename.
fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut tmp =
        tempfile::NamedTempFile::new_in(dir).with_context(|| format!("creating a temp file in {}", dir.display()))?;
    std::io::Write::write_all(&mut tmp, text.as_bytes())?;
    tmp.persist(path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

// ---- docker buildx bake -----------------------------------------------------

/// `program` found on PATH.
fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

fn build(a: BuildArgs) -> Result<Exit> {
    let pins = Pins::load(&a.pins)?;
    for v in &a.variant {
        pins.variant(v)?;
    }
    let expected = bake_json(&pins, &pins_in_context(&a.pins)?)?;
    let current = crate::input::read_text_opt(&a.file, "bake file", crate::input::cap::TEXT)?;
    if current.as_deref() != Some(expected.as_str()) {
        return Err(Failure::usage(format!(
            "{} is {} {}: building from it would not build what pins.toml says",
            a.file.display(),
            if current.is_some() { "stale against" } else { "missing for" },
            a.pins.display()
        ))
        .hint(format!("run `deepep-forge docker bake --pins {} --out {}` first", a.pins.display(), a.file.display()))
        .into());
    }
    let docker = which("docker").ok_or_else(|| {
        Failure::env("docker not found on PATH: `docker build` runs `docker buildx bake`")
            .hint("install Docker Engine with the buildx plugin (https://docs.docker.com/engine/install/), or build one variant without docker: `deepep-forge build-wheel --variant NAME`")
    })?;
    let probe = Cmd::new(&docker, "ask docker for buildx").args(["buildx", "version"]).capture()?;
    if !probe.status.success() {
        let why = String::from_utf8_lossy(&probe.stderr);
        return Err(Failure::env(format!("docker buildx is not available ({}): {}", docker.display(), why.lines().next().unwrap_or("").trim()))
            .hint("install the buildx plugin (Debian/Ubuntu: apt-get install docker-buildx-plugin; or https://github.com/docker/buildx#installing)")
            .into());
    }
    let mut cmd = Cmd::new(&docker, format!("build images from {}", a.file.display()));
    cmd.args(["buildx", "bake", "-f"]).arg(&a.file).args(&a.variant).args(&a.extra);
    let status = cmd.run_inherit()?;
    crate::error::check_interrupted()?;
    if !status.success() {
        return Err(Failure::problems(format!("docker buildx bake failed ({status})"))
            .hint("the image's last step is `deepep-forge probe`: a probe failure means the wheel does not fit the variant's topology")
            .into());
    }
    let targets = if a.variant.is_empty() { "all variants".to_string() } else { a.variant.join(", ") };
    crate::outln!("built {targets} from {}", a.file.display());
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pins() -> Pins {
        Pins::parse(include_str!("../pins.toml"), Path::new("pins.toml")).unwrap()
    }

    #[test]
    fn one_target_per_variant_with_args_from_pins() {
        let p = pins();
        let j: serde_json::Value = serde_json::from_str(&bake_json(&p, "pins.toml").unwrap()).unwrap();
        assert_eq!(j["group"]["default"]["targets"].as_array().unwrap().len(), p.variants.len());
        let t = &j["target"]["gb200-multinode"];
        assert_eq!(t["platforms"][0], "linux/arm64");
        assert_eq!(t["args"]["TORCH_CUDA_ARCH_LIST"], "10.0");
        assert_eq!(t["args"]["HYBRID_EP_MULTINODE"], "1");
        assert_eq!(t["args"]["RDMA_CORE_HOME"], "/opt/rdma-core/build");
        assert_eq!(t["args"]["RDMA_CORE_REF"], "v60.0");
        assert_eq!(t["args"]["PROBE_RANKS_PER_DOMAIN"], "64");
        assert_eq!(t["args"]["PROBE_MNNVL"], "--mnnvl");
        assert_eq!(t["args"]["DEEPEP_REV"], p.pin(crate::pins::Arch::Aarch64).unwrap().rev);
        assert_eq!(t["tags"][0], "deepep-forge/deep-ep:gb200-multinode-1.2.1-17cfb81");
        let h = &j["target"]["h100"];
        assert_eq!(
            (h["platforms"][0].as_str(), h["args"]["HYBRID_EP_MULTINODE"].as_str()),
            (Some("linux/amd64"), Some("0"))
        );
        assert_eq!(h["args"]["PROBE_MNNVL"], "--no-mnnvl");
    }

    #[test]
    fn output_is_deterministic_and_changes_with_pins() {
        let p = pins();
        assert_eq!(bake_json(&p, "pins.toml").unwrap(), bake_json(&p, "pins.toml").unwrap());
        let other = Pins::parse(
            &include_str!("../pins.toml").replace(
                "ep = 8, ranks_per_domain = 8, mnnvl = false }\n\n[[variant]]\nname = \"h100-multinode\"",
                "ep = 4, ranks_per_domain = 4, mnnvl = false }\n\n[[variant]]\nname = \"h100-multinode\"",
            ),
            Path::new("pins.toml"),
        )
        .unwrap();
        let (a, b) = (bake_json(&p, "pins.toml").unwrap(), bake_json(&other, "pins.toml").unwrap());
        assert_ne!(a, b);
        let d = diff_summary(&a, &b).join("\n");
        assert!(d.contains("target.h100.args.PROBE_EP: \"8\" -> \"4\""), "{d}");
        assert!(d.contains("target.h100.args.PROBE_RANKS_PER_DOMAIN: \"8\" -> \"4\""), "{d}");
        assert_eq!(d.lines().count(), 2, "{d}");
        assert!(diff_summary("{", &a)[0].contains("not valid JSON"));
    }
}
