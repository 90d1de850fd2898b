//! The generated bake file (`docker/docker-bake.json`): per variant a target
//! that builds the wheel in the image and one (`<variant>-index`) that installs
//! it from the variant's publish index, args from pins.toml; `docker bake`
//! (write or `--check`), returning a report the command prints. Must not run
//! a builder.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::{DOCKERFILE, IMAGE};
use forge_model::pins::{Pins, Transport, Variant};
use forge_os::error::Failure;
use forge_os::fs::Tree;
use forge_os::line::Line;
use forge_os::printer::shell_word;

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

// ---- the bake file ----------------------------------------------------------

/// The bake file, as written and as read back by the podman/buildah builders.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BakeFile {
    pub group: BTreeMap<String, Group>,
    pub target: BTreeMap<String, Target>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    pub targets: Vec<String>,
}

/// One buildx target: the fields every builder gets the same way.
#[derive(Serialize, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub context: String,
    pub dockerfile: String,
    /// The Dockerfile stage to build.
    pub target: String,
    pub platforms: Vec<String>,
    pub args: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub tags: Vec<String>,
}

/// The suffix of a variant's index target (`h100-index`): the wheel from the
/// variant's publish index instead of a build in the image.
pub const INDEX_SUFFIX: &str = "-index";
/// The build argument the index targets read the index URL from (set by
/// `docker build --index URL`; empty in the file).
pub const INDEX_ARG: &str = "DEEPEP_INDEX";

/// The bake file for `pins` (deterministic: sorted keys, two-space indent,
/// trailing newline). `pins_in_context` is the pins file's path inside the
/// build context (the repository root).
pub fn bake_json(pins: &Pins, pins_in_context: &str) -> Result<String> {
    let mut target = BTreeMap::new();
    for v in &pins.variants {
        let build = bake_target(pins, v, pins_in_context)?;
        target.insert(format!("{}{INDEX_SUFFIX}", v.name), index_target(&build));
        target.insert(v.name.clone(), build);
    }
    let names = |suffix: &str| pins.variants.iter().map(|v| format!("{}{suffix}", v.name)).collect();
    let group = BTreeMap::from([
        ("default".to_string(), Group { targets: names("") }),
        ("index".to_string(), Group { targets: names(INDEX_SUFFIX) }),
    ]);
    let mut s = serde_json::to_string_pretty(&BakeFile { group, target })?;
    s.push('\n');
    Ok(s)
}

fn bake_target(pins: &Pins, v: &Variant, pins_in_context: &str) -> Result<Target> {
    let pin = pins.pin(v.arch)?;
    let version = forge_store::patch::variant_label(pins, v)?;
    let flag = |b: bool| if b { "1" } else { "0" }.to_string();
    let mut args = BTreeMap::from([
        ("VARIANT".to_string(), v.name.clone()),
        ("PINS".into(), pins_in_context.to_string()),
        ("DEEPEP_REV".into(), pin.rev.clone()),
        ("TORCH_CUDA_ARCH_LIST".into(), v.cuda_arch_list.to_env()),
        ("HYBRID_EP_MULTINODE".into(), flag(v.multinode)),
        ("USE_NIXL".into(), flag(v.multinode && v.transport == Transport::Nixl)),
        ("RDMA_CORE_HOME".into(), v.rdma_core_home.clone().unwrap_or_default()),
        ("DEEPEP_VERSION".into(), version.clone()),
        ("WHEEL_SOURCE".into(), "build".into()),
    ]);
    // No topology: the image's probe judges the wheel against pins.toml only (empty PROBE_* args).
    let t = v.topology.as_ref();
    let num = |f: fn(&forge_model::pins::IntendedTopology) -> u32| t.map(|t| f(t).to_string()).unwrap_or_default();
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
        tags: vec![image_tag(&v.name, &version)],
    })
}

/// The image tag of a variant's build: `<IMAGE>:<variant>-<label with + as ->` (a tag has no `+`).
pub fn image_tag(variant: &str, label: &str) -> String {
    format!("{IMAGE}:{variant}-{}", label.replace('+', "-"))
}

/// A variant's index target: its build target with the wheel downloaded from
/// `DEEPEP_INDEX` (`WHEEL_SOURCE=index`); same probe, labels and tag.
fn index_target(build: &Target) -> Target {
    let mut t = build.clone();
    t.args.insert("WHEEL_SOURCE".into(), "index".into());
    t.args.insert(INDEX_ARG.into(), String::new());
    t
}

/// The pins file's path as the image sees it: relative to the directory the
/// command runs in (the build context), with `/` separators.
pub fn pins_in_context(pins: &Path) -> Result<String> {
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
/// (`target.h100.args.TORCH_CUDA_ARCH_LIST: "9.0" -> "9.0a"`), at most 40 (a variant has two targets).
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
    let more = out.len().saturating_sub(40);
    out.truncate(40);
    if more > 0 {
        out.push(format!("... and {more} more"));
    }
    out
}

/// What `docker bake` was asked (made from `docker::BakeArgs` at the edge; no clap type here).
pub struct BakeRequest {
    /// Compare with the file on disk and write nothing.
    pub check: bool,
    pub pins: PathBuf,
    pub out: PathBuf,
}

impl BakeReport {
    /// A stale or missing file (`--check`): exit 1.
    pub fn is_problem(&self) -> bool {
        matches!(self.status, "stale" | "missing")
    }
}

/// `docker bake`: the bake file generated from pins.toml, compared with the
/// one on disk and (without `--check`) written in its place by a temporary
/// file renamed over it, through a [`forge_os::fs::Tree`] of the folder a
/// relative `--out` starts from ([`super::place`]): a link on the way out of
/// that folder (a planted `docker/`), or a link, folder or FIFO where the file
/// goes, is refused (exit 2) and nothing is written. `--check` reads the file
/// the path names ([`super::place_read`]). Returns what it did; the command prints it.
pub fn bake(a: &BakeRequest) -> Result<BakeReport> {
    let pins = Pins::load(&a.pins)?;
    let text = bake_json(&pins, &pins_in_context(&a.pins)?)?;
    // Written: confined to where the path starts; compared only: the folder the path names.
    let (root, rel) = if a.check { super::place_read(&a.out)? } else { super::place(&a.out)? };
    let what = super::folder_name(&root);
    let folder = match forge_os::fs::named::kind_through(&root) {
        forge_os::fs::Kind::Missing if a.check => None,
        _ if a.check => Some(Tree::open(&root, what)?),
        _ => Some(Tree::create(&root, what)?),
    };
    let current = match &folder {
        Some(t) => t.read_text_opt(&rel, forge_os::input::cap::TEXT)?,
        None => None,
    };
    let fix = format!(
        "deepep-forge docker bake --pins {} --out {}",
        shell_word(&a.pins.to_string_lossy()),
        shell_word(&a.out.to_string_lossy())
    );
    let (status, changes) = match (&current, &folder) {
        (Some(t), _) if *t == text => ("up-to-date", Vec::new()),
        (_, Some(f)) if !a.check => {
            check_folders(f, &rel)?;
            f.check_destination(&rel)?;
            if let Some(dir) = rel.parent().filter(|d| !d.as_os_str().is_empty()) {
                f.create_dir_all(dir)?;
            }
            f.write(&rel, text.as_bytes())?;
            ("written", Vec::new())
        }
        (Some(old), _) => ("stale", diff_summary(old, &text)),
        (None, _) => ("missing", Vec::new()),
    };
    let mut report = BakeReport {
        schema: BAKE_REPORT_SCHEMA,
        file: a.out.clone(),
        pins: a.pins.clone(),
        status,
        targets: pins.variants.iter().map(|v| v.name.clone()).collect(),
        changes,
        fix: None,
    };
    report.fix = report.is_problem().then_some(fix);
    Ok(report)
}

/// No folder above `rel` in `tree` is a file or a FIFO (exit 2, naming it; a
/// link there is followed only inside the tree, by the write itself).
fn check_folders(tree: &Tree, rel: &Path) -> Result<()> {
    let mut at = PathBuf::new();
    for c in rel.parent().into_iter().flat_map(|p| p.components()) {
        at.push(c);
        if matches!(tree.kind(&at)?, forge_os::fs::Kind::File { .. } | forge_os::fs::Kind::Special) {
            return Err(Failure::usage(format!("{} is not a folder", tree.join(&at).display()))
                .hint("remove it, or pass another --out")
                .into());
        }
    }
    Ok(())
}

/// The human report of `docker bake` (paths escaped: one value, one line).
pub fn render_bake(r: &BakeReport) -> String {
    let (file, pins) = (Line::new(r.file.to_string_lossy()), Line::new(r.pins.to_string_lossy()));
    let mut s = match r.status {
        "up-to-date" => format!("{file}: up to date ({} targets from {pins})\n", r.targets.len()),
        "written" => format!("{file}: written ({} targets from {pins})\n", r.targets.len()),
        "missing" => format!("{file}: missing (it is generated from {pins})\n"),
        _ => format!("{file}: stale: it differs from what {pins} generates:\n"),
    };
    for c in &r.changes {
        s.push_str(&format!("  {}\n", Line::new(c)));
    }
    if let Some(fix) = &r.fix {
        s.push_str(&format!("fix: run `{}` and commit the result\n", Line::new(fix)));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pins() -> Pins {
        Pins::parse(include_str!("../../../../pins.toml"), Path::new("pins.toml")).unwrap()
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
        assert_eq!(t["args"]["DEEPEP_REV"], p.pin(forge_model::pins::Arch::Aarch64).unwrap().rev);
        assert_eq!(t["tags"][0], "deepep-forge/deep-ep:gb200-multinode-1.2.1-17cfb81");
        let h = &j["target"]["h100"];
        assert_eq!(
            (h["platforms"][0].as_str(), h["args"]["HYBRID_EP_MULTINODE"].as_str()),
            (Some("linux/amd64"), Some("0"))
        );
        assert_eq!(h["args"]["PROBE_MNNVL"], "--no-mnnvl");
        assert_eq!(h["args"]["WHEEL_SOURCE"], "build");
        assert_eq!(h["args"]["DEEPEP_VERSION"], "1.2.1+17cfb81");
    }

    #[test]
    fn each_variant_has_an_index_target_that_differs_only_in_the_wheel_source() {
        let p = pins();
        let j: serde_json::Value = serde_json::from_str(&bake_json(&p, "pins.toml").unwrap()).unwrap();
        let index: Vec<&str> =
            j["group"]["index"]["targets"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        assert_eq!(index.len(), p.variants.len());
        for v in &p.variants {
            let (b, i) = (&j["target"][&v.name], &j["target"][format!("{}-index", v.name)]);
            assert_eq!(i["args"]["WHEEL_SOURCE"], "index", "{}", v.name);
            assert_eq!(i["args"][INDEX_ARG], "", "the URL is given at build time");
            let mut i = i.clone();
            i["args"]["WHEEL_SOURCE"] = "build".into();
            i["args"].as_object_mut().unwrap().remove(INDEX_ARG);
            assert_eq!(&i, b, "{}: same stage, probe, labels and tag", v.name);
        }
        let back: BakeFile = serde_json::from_str(&bake_json(&p, "pins.toml").unwrap()).unwrap();
        assert_eq!(back.target.len(), 2 * p.variants.len());
    }

    #[test]
    fn output_is_deterministic_and_changes_with_pins() {
        let p = pins();
        assert_eq!(bake_json(&p, "pins.toml").unwrap(), bake_json(&p, "pins.toml").unwrap());
        let other = Pins::parse(
            &include_str!("../../../../pins.toml").replace(
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
        assert!(d.contains("target.h100-index.args.PROBE_EP: \"8\" -> \"4\""), "{d}");
        assert_eq!(d.lines().count(), 4, "{d}");
        assert!(diff_summary("{", &a)[0].contains("not valid JSON"));
    }
}
