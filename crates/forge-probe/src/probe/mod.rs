//! `probe`: static (wheel / installed environment) and, with `--run`, runtime.
//!
//! The static probe reads a wheel once (`wheel`: RECORD, METADATA, provenance,
//! extension ELFs via `elf` and `fatbin`) or an installed environment (`env`),
//! resolves the topology request (`forge_model::topology`) and applies `rules`.
pub mod disk;
pub mod elf;
pub mod env;
pub mod fatbin;
pub mod fleet;
pub mod host;
pub mod image;
pub mod loader;
pub mod markdown;
pub mod rules;
pub mod wheel;

use std::path::{Path, PathBuf};

use anyhow::Result;

use forge_model::pins::Pins;
use forge_model::topology::Request;
use forge_model::verdict::Verdict;
use forge_os::error::Failure;
use forge_os::line::Line;
use forge_store::evidence::record::{Recorder, Wheel as RecordWheel};

/// `probe`: what to judge against what, as plain data (made from the flags by the CLI).
#[derive(Debug, Clone)]
pub struct ProbeRequest {
    /// A wheel file (with `python`: against that environment).
    pub wheel: Option<PathBuf>,
    /// A built image, read through `image_builder`.
    pub image: Option<String>,
    pub image_builder: forge_os::process::engine::ImageReader,
    /// A Python whose environment has deep_ep (or, with `wheel`, is meant to).
    pub python: Option<PathBuf>,
    /// The NVIDIA driver comes at run time, not with `python`'s environment.
    pub driver_at_run_time: bool,
    /// Judge this host's RDMA path for a request across NVLink domains (false:
    /// `--no-host-check`, the run is on other machines).
    pub host_check: bool,
    /// `--host-root`: the folder the host's /sys, /proc, /dev and libraries are read under (None: `/`).
    pub host_root: Option<PathBuf>,
    /// `--host-facts`: files (or folders of them) `host facts` wrote, one per node: the fleet is judged instead of this host.
    pub host_facts: Vec<PathBuf>,
    /// The pins file, only when given (its `pin` rule).
    pub pins: Option<PathBuf>,
    /// The topology asked (flags, preset, recipe).
    pub topology: forge_model::topology::RequestFlags,
    /// `--run`: the round trip on this machine's GPUs; `None`: the static probe.
    pub run: Option<crate::runtime::Run>,
    /// `--record DIR --signing-key FILE`.
    pub record: forge_store::evidence::record::RecordRequest,
}

/// Everything the static probe read about the subject.
struct Inspected {
    binary: wheel::WheelFacts,
    env: Option<env::EnvFacts>,
    /// torch, NVSHMEM and NCCL of `--python`'s environment.
    versions: Option<env::Versions>,
    evidence: rules::Evidence,
}

fn inspect(args: &ProbeRequest) -> Result<Option<Inspected>> {
    let (binary, env, versions) = match (&args.wheel, &args.python) {
        (Some(w), None) => (wheel::read(w)?, None, None),
        (Some(w), Some(py)) => {
            let b = wheel::read(w)?;
            let v = env::versions_for_wheel(py, &b)?;
            (b, None, Some(v))
        }
        (None, Some(py)) => {
            let (b, mut e) = env::inspect(py)?;
            e.driver_at_run_time = args.driver_at_run_time;
            let v = e.versions.clone();
            (b, Some(e), Some(v))
        }
        (None, None) => match &args.image {
            Some(r) => (image::inspect(r, args.image_builder.into())?, None, None),
            None => return Ok(None),
        },
    };
    let evidence = rules::evidence(&binary);
    Ok(Some(Inspected { binary, env, versions, evidence }))
}

fn facts_of(i: &Inspected) -> forge_model::verdict::BinaryFacts {
    let hep = rules::kernel_extension(&i.binary).and_then(|e| e.elf.as_ref().ok());
    let (cubin_sms, ptx) = hep.map(|h| h.sms()).unwrap_or_default();
    forge_model::verdict::BinaryFacts {
        subject: i.binary.file.as_str().into(),
        ptx_sms: ptx.into_iter().filter(|s| !cubin_sms.contains(s)).collect(),
        cubin_sms,
        multinode: i.evidence.multinode,
        machine: i.binary.extensions.iter().find_map(|e| e.elf.as_ref().ok().and_then(|f| f.arch())),
        version: i.binary.version.as_deref().map(Into::into),
        transport: i.evidence.transport,
    }
}

/// The static verdict for `--wheel`/`--python` against `request` (rules in docs/design.md, "What a binary can do").
pub fn static_verdict(args: &ProbeRequest, request: Option<Request>) -> Result<Verdict> {
    static_verdict_of(args, request, inspect(args)?)
}

fn static_verdict_of(args: &ProbeRequest, request: Option<Request>, inspected: Option<Inspected>) -> Result<Verdict> {
    let pins = args.pins.as_deref().map(Pins::load).transpose()?;
    let subject =
        inspected.as_ref().map(|i| i.binary.file.clone()).unwrap_or_else(|| "no binary (topology only)".into());
    let mut v = Verdict::new(subject, request.clone());
    if let Some(i) = &inspected {
        let subject =
            rules::Subject { b: &i.binary, env: i.env.as_ref(), versions: i.versions.as_ref(), ev: &i.evidence };
        for c in rules::binary_checks(subject, request.as_ref(), pins.as_ref()) {
            v.push(c);
        }
    }
    if let Some(r) = &request {
        let (checks, considered) = rules::topology_checks(r, inspected.as_ref().map(|i| &i.evidence), pins.as_ref());
        v.checks.extend(checks);
        v.considered = considered;
    }
    let variants = dmabuf_variants(pins.as_ref());
    let fleet = match args.host_facts.is_empty() {
        true => None,
        false => Some(fleet::load(&args.host_facts)?),
    };
    let host = match request.as_ref().filter(|r| fleet.is_none() && args.host_check && rules::rdma::spans_domains(r)) {
        Some(_) => Some(host::read(&host::open(args.host_root.as_deref())?)),
        None => None,
    };
    if let Some(h) = &host {
        v.checks.extend(rules::rdma::rdma_checks(&rdma_ctx(h, inspected.as_ref(), &variants)));
    }
    if let Some((nodes, left_out)) = &fleet {
        let n = nodes.len();
        v.subject = Line::new(format!("{} on {n} node{} (host facts)", v.subject, if n == 1 { "" } else { "s" }));
        v.checks.extend(fleet::cut_row(nodes.len(), *left_out));
        v.checks.extend(fleet::judge(nodes, |h| rdma_ctx(h, inspected.as_ref(), &variants)));
        v.checks.extend(fleet::consistency(nodes));
    }
    if let Some(i) = &inspected {
        v.facts = serde_json::json!({
            "binary": facts_of(i),
            "evidence": i.evidence,
            "inspected": i.binary,
            "environment": i.env,
            "versions": i.versions,
        });
    }
    if let Some(h) = host {
        if v.facts.is_null() {
            v.facts = serde_json::json!({});
        }
        v.facts["host"] = serde_json::json!(h);
    }
    if let Some((nodes, left_out)) = &fleet {
        if v.facts.is_null() {
            v.facts = serde_json::json!({});
        }
        v.facts["fleet"] = fleet::facts(nodes, *left_out);
    }
    Ok(v)
}

/// What the multi-node readiness rules see of the wheel: its revision, how its
/// code registers GPU memory (the provenance's build interface), its transport.
fn rdma_ctx<'a>(
    host: &'a host::HostFacts,
    i: Option<&'a Inspected>,
    variants: &'a [(String, Vec<String>)],
) -> rules::rdma::Ctx<'a> {
    let prov = i.and_then(|i| i.binary.provenance.as_ref()).and_then(|p| p.as_ref().ok());
    let code = match (prov, i) {
        (Some(p), _) => p.source.short.clone(),
        (None, Some(i)) => i.binary.file.clone(),
        (None, None) => "the wheel (none given)".into(),
    };
    let from_provenance = prov.filter(|p| p.variant.multinode).and_then(|p| p.variant.transport.as_deref());
    let transport = i.and_then(|i| i.evidence.transport).or(match from_provenance {
        Some("nixl") => Some(forge_model::pins::Transport::Nixl),
        Some("doca") => Some(forge_model::pins::Transport::Doca),
        _ => None,
    });
    rules::rdma::Ctx {
        host,
        code,
        registration: prov.and_then(|p| p.toolchain.environment.as_ref()).and_then(|e| e.needs.registration.as_ref()),
        transport,
        dmabuf_variants: variants,
    }
}

/// The multinode variants of pins.toml whose patches add DMA-BUF registration
/// (`ibv_reg_dmabuf_mr`), with their patches' names; a patch that cannot be read is passed over.
fn dmabuf_variants(pins: Option<&Pins>) -> Vec<(String, Vec<String>)> {
    let Some(pins) = pins else { return Vec::new() };
    pins.variants
        .iter()
        .filter(|v| v.multinode)
        .filter_map(|v| {
            let set = forge_store::patch::for_variant(pins, v).ok()?;
            let r = forge_model::interface::registration::patched(&Default::default(), &set);
            let adding: Vec<String> = set
                .iter()
                .filter(|p| p.text.lines().any(|l| l.starts_with('+') && l.contains("ibv_reg_dmabuf_mr")))
                .map(|p| p.name.clone())
                .collect();
            r.dmabuf.then_some((v.name.clone(), adding))
        })
        .collect()
}

/// `probe`: the verdict to print (None on a rank other than 0 of a launched
/// `--run`: rank 0 carries the verdict). Prints nothing; the command prints
/// it and picks the exit code from it.
pub fn run(args: ProbeRequest) -> Result<Option<Verdict>> {
    // `--record`: the folder and the key are checked before anything is probed.
    let recorder = forge_store::evidence::record::Recorder::prepare(&args.record)?;
    if recorder.is_some() && args.wheel.is_none() && (args.image.is_none() || args.run.is_some()) {
        return Err(Failure::usage(
            "--record needs --wheel (or, without --run, --image): evidence is about a wheel file",
        )
        .hint("pass the wheel under test: --wheel dist/deep_ep-*.whl")
        .into());
    }
    let recorder = recorder.map(|r| (r, args.record_subject())).map(|(r, w)| w.map(|w| (r, w))).transpose()?;
    if let Some(run) = &args.run {
        return run_on_gpus(&args, run, recorder.as_ref());
    }
    let request = args.topology.resolve()?;
    if args.wheel.is_none()
        && args.python.is_none()
        && args.image.is_none()
        && request.is_none()
        && args.host_facts.is_empty()
    {
        return Err(Failure::usage("nothing to probe")
            .hint("pass --wheel W.whl or --python PATH, and a request: --preset h100-8g, --recipe R.yaml or --ep/--nodes/--gpus-per-node/...")
            .into());
    }
    let inspected = inspect(&args)?;
    let image_wheel = inspected.as_ref().and_then(|i| i.binary.image_wheel.clone());
    let mut verdict = static_verdict_of(&args, request, inspected)?;
    if let Some(name) = args.wheel.as_deref().and_then(Path::file_name) {
        // `dist`: build-wheel's default `--out`, a path the user's command names.
        let clash =
            !matches!(forge_os::fs::named::kind_through(&Path::new("dist").join(name)), forge_os::fs::Kind::Missing);
        for c in &mut verdict.checks {
            if let Some(fix) = c.fix.as_ref().and_then(|f| rebuild_beside(f.as_str(), clash)) {
                c.fix = Some(Line::new(fix));
            }
        }
    }
    if let Some((r, wheel)) = &recorder {
        let (wheel, mode) = match image_wheel {
            Some((name, sha256)) => (forge_store::evidence::record::Wheel { name, sha256 }, "image"),
            None => (wheel.clone().expect("--wheel given"), "static"),
        };
        let path = r.record(&wheel, mode, &verdict, args.topology.recipe.as_deref())?;
        forge_os::note!("recorded the verdict: {}", path.display());
    }
    Ok(Some(verdict))
}

/// A rebuild the verdict prints (`deepep-forge build-wheel ... --variant NAME`)
/// with its own `--out dist/NAME` when build-wheel's default `--out` (`dist`)
/// already holds a wheel of the probed wheel's file name (`clash`): another
/// variant of one revision gives a wheel of that same name, and build-wheel
/// refuses to replace another variant's wheel. None when `fix` is no such
/// command, names no variant yet, has an `--out`, or nothing clashes.
fn rebuild_beside(fix: &str, clash: bool) -> Option<String> {
    const FLAG: &str = " --variant ";
    if !clash || fix.contains(" --out ") {
        return None;
    }
    let at = fix.find("deepep-forge build-wheel")?;
    let start = fix[at..].find(FLAG)? + at + FLAG.len();
    let end = fix[start..].find(' ').map_or(fix.len(), |e| start + e);
    let name = &fix[start..end];
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return None;
    }
    Some(format!("{} --out dist/{name}{}", &fix[..end], &fix[end..]))
}

impl ProbeRequest {
    /// The wheel `--record` names: `--wheel`'s file (hashed here); for `--image`
    /// the image's wheel, known once it is read (None until then).
    fn record_subject(&self) -> Result<Option<forge_store::evidence::record::Wheel>> {
        self.wheel.as_deref().map(forge_store::evidence::record::Wheel::of_file).transpose()
    }
}

/// `probe --run`: the static facts of `--wheel`/`--python` are computed here,
/// once, and handed to the runtime probe with its flags and the request (the
/// runtime probe does not read wheels, and does not call back into this module).
fn run_on_gpus(
    args: &ProbeRequest,
    run: &crate::runtime::Run,
    recorder: Option<&(Recorder, Option<RecordWheel>)>,
) -> Result<Option<Verdict>> {
    run.check()?;
    let run = run.clone();
    let request = args.topology.resolve()?;
    let inspected = inspect(args)?;
    let binary = inspected.as_ref().map(facts_of);
    let static_checks = inspected
        .is_some()
        .then(|| static_verdict_of(args, request.clone(), inspected).map(|v| v.checks).map_err(|e| format!("{e:#}")));
    let mode = if run.deep_ep { "run --deep-ep" } else { "run" };
    let recipe = args.topology.recipe.as_deref();
    let record = |v: &Verdict| -> Result<()> {
        if let Some((r, Some(wheel))) = recorder {
            let path = r.record(wheel, mode, v, recipe)?;
            forge_os::note!("recorded the verdict: {}", path.display());
        }
        Ok(())
    };
    crate::runtime::run(&crate::runtime::Input {
        record: recorder.is_some().then_some(&record as &dyn Fn(&Verdict) -> Result<()>),
        run,
        python: args.python.clone(),
        request,
        binary,
        static_checks,
    })
}

#[cfg(test)]
mod tests {
    use super::rebuild_beside;

    #[test]
    fn a_rebuild_whose_wheel_would_clash_in_dist_gets_its_variants_folder() {
        let fix = "rebuild: deepep-forge build-wheel --pins p.toml --variant demo-multinode";
        assert_eq!(rebuild_beside(fix, true).as_deref(), Some(&*format!("{fix} --out dist/demo-multinode")));
        let nvshmem =
            "rebuild with NVSHMEM: deepep-forge build-wheel --variant h100 --toolchain registry (it installs it)";
        assert_eq!(
            rebuild_beside(nvshmem, true).as_deref(),
            Some("rebuild with NVSHMEM: deepep-forge build-wheel --variant h100 --out dist/h100 --toolchain registry (it installs it)")
        );
        // Nothing clashes, a placeholder, an `--out` already, or no build: left as they are.
        assert_eq!(rebuild_beside(fix, false), None);
        assert_eq!(rebuild_beside("rebuild: deepep-forge build-wheel --variant <variant>", true), None);
        assert_eq!(rebuild_beside("rebuild: deepep-forge build-wheel --variant a --out x", true), None);
        assert_eq!(rebuild_beside("raise the limit: ulimit -l unlimited", true), None);
    }
}
