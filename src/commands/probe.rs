//! `probe`: the flags, turned into `probe::ProbeRequest` (with `runtime::Run`
//! and `evidence::record::RecordRequest`); the verdict `probe::run` returns
//! (static or `--run`) printed in the chosen format, and its exit code (0
//! MATCH, 1 MISMATCH; 2 and 3 come as errors).
use std::path::PathBuf;

use anyhow::Result;

use crate::args::PinsArg;
use forge_model::verdict::Verdict;
use forge_os::error::Exit;
use forge_probe::probe::ProbeRequest;
use forge_store::evidence::record::RecordRequest;

/// `deepep-forge probe`: judge, print the verdict, exit 0 on a MATCH and 1 on
/// a MISMATCH. A rank other than 0 of a launched `--run` prints nothing (rank 0
/// carries the verdict) and exits 0.
pub fn run(args: ProbeArgs) -> Result<Exit> {
    let format = args.format;
    match forge_probe::probe::run(args.request())? {
        Some(v) => {
            print(&v, format)?;
            Ok(if v.failed() { Exit::Problems } else { Exit::Ok })
        }
        None => Ok(Exit::Ok),
    }
}

/// A verdict in `format`: one JSON document; or the table (with the runtime
/// probe's link matrix under it); or GitHub annotations, then the table with
/// workflow commands switched off around it.
fn print(v: &Verdict, format: ProbeFormat) -> Result<()> {
    let human = || v.render_human() + &forge_probe::runtime::render_links(&v.facts).unwrap_or_default();
    match format {
        ProbeFormat::Json => forge_os::printer::json(v)?,
        ProbeFormat::Human => forge_os::out!("{}", human()),
        ProbeFormat::Github => {
            forge_os::printer::workflow(&format!("{}{}", v.render_github(), forge_os::output::github_log(&human())))
        }
        ProbeFormat::Markdown => forge_os::out!("{}", forge_probe::probe::markdown::render(v)),
    }
    Ok(())
}

/// `probe --format`: the report formats, and Markdown for the evidence a pull request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ProbeFormat {
    /// Aligned text for people (default).
    #[default]
    Human,
    /// One JSON document on stdout, with a `schema` version field.
    Json,
    /// GitHub Actions workflow commands (`::error::`), plus the human text.
    Github,
    /// A Markdown table (a pull request's comment or evidence), every value escaped.
    Markdown,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Presets (--preset; any flag overrides its value):
  h100-8g       8 H100, one node: EP 8, R 8, no multi-node NVLink
  b200-8g       8 B200, one node: EP 8, R 8, no multi-node NVLink
  b300-8g       8 B300 (sm_103), one node: EP 8, R 8, no multi-node NVLink
  gb200-nvl72   a GB200 NVL72 rack, 18 nodes x 4 GPUs: EP 72, R 72, MNNVL
  gb300-nvl72   a GB300 NVL72 rack, 18 nodes x 4 GPUs: EP 72, R 72, MNNVL
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
  deepep-forge probe --wheel dist/*.whl --record ev/ --signing-key ci.key
  # a fleet: each node's `host facts --format json`, judged here
  deepep-forge probe --wheel W.whl --preset h100-8g --nodes 64 --ep 512 \\
    --host-facts facts/ --format markdown
  # in a container that mounts the host's /sys, /proc and /dev at /host
  deepep-forge probe --wheel W.whl --preset h100-8g --nodes 2 --ep 16 \\
    --host-root /host")]
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
    pub image_builder: forge_os::process::engine::ImageReader,
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
    /// The run is on other machines (a CI or login node probing a wheel for the
    /// cluster): skip the multi-node readiness rules that judge this host's RDMA
    /// path (docs/probe.md "Multi-node readiness"); the wheel and the request are
    /// still judged. Example: `deepep-forge probe --wheel W --preset h100-8g --nodes 2 --ep 16 --no-host-check`
    #[arg(long)]
    pub no_host_check: bool,
    /// Read this host's /sys, /proc, /dev and libraries under DIR (a container
    /// that mounts the host's at /host: `--host-root /host`). Default: /.
    /// Example: `deepep-forge probe --wheel W --preset h100-8g --nodes 2 --ep 16 --host-root /host`
    #[arg(long, value_name = "DIR", conflicts_with_all = ["no_host_check", "host_facts"])]
    pub host_root: Option<PathBuf>,
    /// Judge these nodes instead of this host: files `host facts --format json`
    /// wrote, or folders of them (`*.json`); repeatable. The failing nodes are
    /// grouped by cause, one fix each. Example: `--host-facts facts/`
    #[arg(long, value_name = "PATH", conflicts_with = "no_host_check")]
    pub host_facts: Vec<PathBuf>,
    #[command(flatten)]
    pub pins: PinsArg,
    #[command(flatten)]
    pub topology: crate::args::TopologyArgs,
    #[command(flatten)]
    pub runtime: RunArgs,
    #[command(flatten)]
    pub record: RecordArgs,
    /// How to print the verdict: a table, one JSON document (schema 1), the
    /// table plus GitHub `::error`/`::warning` annotations, or a Markdown table.
    #[arg(long, value_enum, default_value_t)]
    pub format: ProbeFormat,
}

impl ProbeArgs {
    /// The plain request `probe::run` takes.
    pub fn request(self) -> ProbeRequest {
        ProbeRequest {
            wheel: self.wheel,
            image: self.image,
            image_builder: self.image_builder,
            python: self.python,
            driver_at_run_time: self.driver_at_run_time,
            host_check: !self.no_host_check,
            host_root: self.host_root,
            host_facts: self.host_facts,
            pins: self.pins.given().map(PathBuf::from),
            topology: self.topology.request(),
            run: self.runtime.run.then(|| self.runtime.request()),
            record: RecordRequest { record: self.record.record, signing_key: self.record.signing_key },
        }
    }
}

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
    /// The runtime probe's request (its ranges are checked by `runtime::Run::check`
    /// before anything runs).
    pub fn request(&self) -> forge_probe::runtime::Run {
        forge_probe::runtime::Run {
            tokens: self.tokens,
            hidden: self.hidden,
            topk: self.topk,
            iters: self.iters,
            blocks_per_sm: self.blocks_per_sm,
            rendezvous: self.rendezvous.clone(),
            timeout: self.timeout,
            deep_ep: self.deep_ep,
        }
    }
}

/// `--record` and `--signing-key`, shared by every probe mode.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RecordArgs {
    /// Keep the verdict as a signed in-toto statement (DSSE) under
    /// DIR/<wheel sha256>/ (docs/evidence.md); needs --wheel (or --image, without --run) as the subject, and --signing-key.
    #[arg(long, value_name = "DIR", requires = "signing_key")]
    pub record: Option<PathBuf>,
    /// The ed25519 key (`cache keygen`) that signs recorded statements.
    #[arg(long, value_name = "FILE", requires = "record")]
    pub signing_key: Option<PathBuf>,
}
