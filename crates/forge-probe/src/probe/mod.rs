//! `probe`: static (wheel / installed environment) and, with `--run`, runtime.
//!
//! The static probe reads a wheel once (`wheel`: RECORD, METADATA, provenance,
//! extension ELFs via `elf` and `fatbin`) or an installed environment (`env`),
//! resolves the topology request (`crate::topology`) and applies `rules`.
pub mod elf;
pub mod env;
pub mod fatbin;
pub mod image;
pub mod loader;
pub mod rules;
pub mod wheel;

use std::path::PathBuf;

use anyhow::Result;

use crate::error::{Exit, Failure};
use crate::evidence::record::{Recorder, Wheel as RecordWheel};
use crate::output::Format;
use crate::pins::Pins;
use crate::topology::Request;
use crate::verdict::Verdict;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Presets (--preset; any flag overrides its value):
  h100-8g       8 H100, one node: EP 8, R 8, no multi-node NVLink
  b200-8g       8 B200, one node: EP 8, R 8, no multi-node NVLink
  gb200-nvl72   a GB200 NVL72 rack, 18 nodes x 4 GPUs: EP 72, R 72, MNNVL
  (R: ranks per NVLink domain)

Examples:
  deepep-forge probe --wheel dist/deep_ep-*.whl --preset h100-8g
  # two nodes: needs a multinode build
  deepep-forge probe --wheel dist/*.whl --preset h100-8g --nodes 2 --ep 16
  deepep-forge probe --wheel dist/deep_ep-*.whl --recipe grpo.yaml --gpu h100
  # an installed environment
  deepep-forge probe --python .venv/bin/python --preset gb200-nvl72
  # on the GPUs themselves
  deepep-forge probe --run --preset h100-8g
  # keep the verdict as a signed statement (docs/evidence.md)
  deepep-forge probe --wheel dist/*.whl --record ev/ --signing-key ci.key")]
pub struct ProbeArgs {
    /// A wheel file to inspect (with --python: against that environment's torch, NVSHMEM and NCCL).
    #[arg(long, value_name = "WHEEL", conflicts_with = "image")]
    pub wheel: Option<PathBuf>,
    /// A built image (podman/buildah store): its wheel and in-toto statement at
    /// /wheels/ and the installed extensions are read through the builder (nothing runs).
    #[arg(long, value_name = "REF", conflicts_with = "python")]
    pub image: Option<String>,
    /// Who reads `--image`: podman (`podman image mount`) or buildah.
    #[arg(long, value_enum, default_value = "podman", value_name = "BUILDER", requires = "image")]
    pub image_builder: crate::process::engine::ImageReader,
    /// A Python whose environment has deep_ep installed (asked where deep_ep
    /// and hybrid_ep_cpp live; nothing is imported); with --wheel, the
    /// environment the wheel is meant for (deep_ep need not be installed).
    #[arg(long, value_name = "PYTHON")]
    pub python: Option<PathBuf>,
    /// With --python: the NVIDIA driver comes at run time, not with this
    /// environment (an image build, where the NVIDIA Container Toolkit mounts
    /// it into the container): libcuda.so.1 and libnvidia-ml.so.1 need not
    /// resolve here (`needed-libs` warns instead of failing). The image's probe step passes it.
    #[arg(long, requires = "python")]
    pub driver_at_run_time: bool,
    #[command(flatten)]
    pub pins: crate::args::PinsArg,
    #[command(flatten)]
    pub topology: crate::topology::RequestArgs,
    #[command(flatten)]
    pub runtime: RunArgs,
    #[command(flatten)]
    pub record: crate::evidence::record::RecordArgs,
    /// How to print the verdict: a table, one JSON document (schema 1), or the
    /// table plus GitHub `::error`/`::warning` annotations.
    #[arg(long, value_enum, default_value_t)]
    pub format: crate::output::Format,
}

pub use crate::verdict::BinaryFacts;

/// `probe --run`'s flags, turned into a `runtime::Run` once ([`RunArgs::request`]).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RunArgs {
    /// Run on this machine's GPUs: discovery, a dispatch/combine round trip
    /// over NVLink checked exactly, and its bandwidth against the copy engine.
    /// Under torchrun/srun/mpirun (RANK, SLURM_PROCID or OMPI_COMM_WORLD_RANK
    /// set, world size > 1) each process takes the GPU of its local rank.
    #[arg(long)]
    pub run: bool,
    /// Tokens per GPU for the round trip (the timed payload is tokens x hidden x 2 bytes per peer).
    #[arg(long, value_name = "N", default_value_t = 16384, value_parser = clap::value_parser!(u32).range(0..=1_048_576), requires = "run")]
    pub tokens: u32,
    /// Hidden size in bf16 elements (a multiple of 8: rows move as 16-byte vectors).
    #[arg(long, value_name = "H", default_value_t = 7168, value_parser = clap::value_parser!(u32).range(0..=65_536), requires = "run")]
    pub hidden: u32,
    /// Experts per token (1..=16); there are topk experts per rank.
    #[arg(long, value_name = "K", default_value_t = 8, requires = "run")]
    pub topk: u32,
    /// Timed repetitions of dispatch, combine and the copy-engine baseline.
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(0..=100_000), requires = "run")]
    pub iters: u32,
    /// Blocks of 512 threads per multiprocessor for the dispatch and combine kernels.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=64), requires = "run")]
    pub blocks_per_sm: u32,
    /// Where the processes of a launched job meet: tcp://HOST:PORT, HOST:PORT,
    /// or file:PATH (rank 0 writes its address there; a shared filesystem).
    /// Default: MASTER_ADDR:MASTER_PORT (port 29500 if unset).
    #[arg(long, value_name = "SPEC", requires = "run")]
    pub rendezvous: Option<String>,
    /// Seconds any rank waits for another (arrival, each phase) before failing with the missing rank's number.
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=604_800), requires = "run")]
    pub timeout: u64,
    /// Also run the installed deep_ep's own HybridEP dispatch/combine round
    /// trip (one Python process per GPU; --python or python3 on PATH).
    #[arg(long, requires = "run")]
    pub deep_ep: bool,
}

impl RunArgs {
    /// The runtime probe's request; flag ranges checked before anything is
    /// read or run (exit 2).
    pub fn request(&self) -> Result<crate::runtime::Run> {
        let ra = self;
        if ra.hidden == 0 || !ra.hidden.is_multiple_of(8) {
            crate::bail_usage!(
                "--hidden {} must be a positive multiple of 8 (rows move as 16-byte vectors)",
                ra.hidden
            );
        }
        if !(1..=16).contains(&ra.topk) {
            crate::bail_usage!("--topk {} must be between 1 and 16", ra.topk);
        }
        if ra.tokens == 0 || ra.iters == 0 || ra.timeout == 0 || ra.blocks_per_sm == 0 {
            crate::bail_usage!("--tokens, --iters, --blocks-per-sm and --timeout must be positive");
        }
        Ok(crate::runtime::Run {
            tokens: ra.tokens,
            hidden: ra.hidden,
            topk: ra.topk,
            iters: ra.iters,
            blocks_per_sm: ra.blocks_per_sm,
            rendezvous: ra.rendezvous.clone(),
            timeout: ra.timeout,
            deep_ep: ra.deep_ep,
        })
    }
}

/// Everything the static probe read about the subject.
struct Inspected {
    binary: wheel::WheelFacts,
    env: Option<env::EnvFacts>,
    /// torch, NVSHMEM and NCCL of `--python`'s environment.
    versions: Option<env::Versions>,
    evidence: rules::Evidence,
}

fn inspect(args: &ProbeArgs) -> Result<Option<Inspected>> {
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

fn facts_of(i: &Inspected) -> BinaryFacts {
    let hep = rules::kernel_extension(&i.binary).and_then(|e| e.elf.as_ref().ok());
    let (cubin_sms, ptx) = hep.map(|h| h.sms()).unwrap_or_default();
    BinaryFacts {
        subject: i.binary.file.clone(),
        ptx_sms: ptx.into_iter().filter(|s| !cubin_sms.contains(s)).collect(),
        cubin_sms,
        multinode: i.evidence.multinode,
        machine: i.binary.extensions.iter().find_map(|e| e.elf.as_ref().ok().and_then(|f| f.arch())),
        version: i.binary.version.clone(),
        transport: i.evidence.transport.map(|t| t.as_str().to_string()),
    }
}

/// The static verdict for `--wheel`/`--python` against `request` (rules in docs/design.md, "What a binary can do").
pub fn static_verdict(args: &ProbeArgs, request: Option<Request>) -> Result<Verdict> {
    static_verdict_of(args, request, inspect(args)?)
}

fn static_verdict_of(args: &ProbeArgs, request: Option<Request>, inspected: Option<Inspected>) -> Result<Verdict> {
    let pins = args.pins.given().map(Pins::load).transpose()?;
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
    if let Some(i) = &inspected {
        v.facts = serde_json::json!({
            "binary": facts_of(i),
            "evidence": i.evidence,
            "inspected": i.binary,
            "environment": i.env,
            "versions": i.versions,
        });
    }
    Ok(v)
}

pub fn run(args: ProbeArgs) -> Result<Exit> {
    // `--record`: the folder and the key are checked before anything is probed.
    let recorder = crate::evidence::record::Recorder::prepare(&args.record)?;
    if recorder.is_some() && args.wheel.is_none() && (args.image.is_none() || args.runtime.run) {
        return Err(Failure::usage(
            "--record needs --wheel (or, without --run, --image): evidence is about a wheel file",
        )
        .hint("pass the wheel under test: --wheel dist/deep_ep-*.whl")
        .into());
    }
    let recorder = recorder.map(|r| (r, args.record_subject())).map(|(r, w)| w.map(|w| (r, w))).transpose()?;
    if args.runtime.run {
        return run_on_gpus(&args, recorder.as_ref());
    }
    let request = args.topology.resolve()?;
    if args.wheel.is_none() && args.python.is_none() && args.image.is_none() && request.is_none() {
        return Err(Failure::usage("nothing to probe")
            .hint("pass --wheel W.whl or --python PATH, and a request: --preset h100-8g, --recipe R.yaml or --ep/--nodes/--gpus-per-node/...")
            .into());
    }
    let inspected = inspect(&args)?;
    let image_wheel = inspected.as_ref().and_then(|i| i.binary.image_wheel.clone());
    let verdict = static_verdict_of(&args, request, inspected)?;
    if let Some((r, wheel)) = &recorder {
        let (wheel, mode) = match image_wheel {
            Some((name, sha256)) => (crate::evidence::record::Wheel { name, sha256 }, "image"),
            None => (wheel.clone().expect("--wheel given"), "static"),
        };
        let path = r.record(&wheel, mode, &verdict, args.topology.recipe.as_deref())?;
        crate::note!("recorded the verdict: {}", path.display());
    }
    print(&verdict, args.format)?;
    Ok(verdict.exit())
}

impl ProbeArgs {
    /// The wheel `--record` names: `--wheel`'s file (hashed here); for `--image`
    /// the image's wheel, known once it is read (None until then).
    fn record_subject(&self) -> Result<Option<crate::evidence::record::Wheel>> {
        self.wheel.as_deref().map(crate::evidence::record::Wheel::of_file).transpose()
    }
}

/// Print a verdict in the chosen format.
pub fn print(v: &Verdict, format: Format) -> Result<()> {
    match format {
        Format::Json => crate::printer::json(v)?,
        Format::Human => crate::out!("{}", v.render_human()),
        Format::Github => crate::out!("{}{}", v.render_github(), crate::output::github_log(&v.render_human())),
    }
    Ok(())
}

/// `probe --run`: the static facts of `--wheel`/`--python` are computed here,
/// once, and handed to the runtime probe with its flags and the request (the
/// runtime probe does not read wheels, and does not call back into this module).
fn run_on_gpus(args: &ProbeArgs, recorder: Option<&(Recorder, Option<RecordWheel>)>) -> Result<Exit> {
    let run = args.runtime.request()?;
    let request = args.topology.resolve()?;
    let inspected = inspect(args)?;
    let binary = inspected.as_ref().map(facts_of);
    let static_checks = inspected
        .is_some()
        .then(|| static_verdict_of(args, request.clone(), inspected).map(|v| v.checks).map_err(|e| format!("{e:#}")));
    let mode = if args.runtime.deep_ep { "run --deep-ep" } else { "run" };
    let recipe = args.topology.recipe.as_deref();
    let record = |v: &Verdict| -> Result<()> {
        if let Some((r, Some(wheel))) = recorder {
            let path = r.record(wheel, mode, v, recipe)?;
            crate::note!("recorded the verdict: {}", path.display());
        }
        Ok(())
    };
    crate::runtime::run(&crate::runtime::Input {
        record: recorder.is_some().then_some(&record as &dyn Fn(&Verdict) -> Result<()>),
        run,
        python: args.python.clone(),
        format: args.format,
        request,
        binary,
        static_checks,
    })
}
