//! The one clap definition of the command line, shared by the `deepep-forge`
//! binary and `cargo xtask`. Owns argument parsing, dispatch and turning errors
//! into exit codes; must not hold any job's logic.
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use forge_os::error::{self, Exit};

const ABOUT: &str = "Build, pin, lock-check and probe DeepEP (HybridEP) wheels";
const LONG_ABOUT: &str = "\
Build, pin, lock-check and probe DeepEP (HybridEP) wheels.

DeepEP's HybridEP decides at build time what it can do: HYBRID_EP_MULTINODE=1
compiles the RDMA path multi-node runs need, TORCH_CUDA_ARCH_LIST the GPU
generations. pins.toml pins DeepEP per architecture and declares build variants;
the commands below keep consumers, wheels and clusters in agreement with it.

Exit codes: 0 ok, 1 the job found problems or failed, 2 bad input or usage,
3 missing environment (no GPU, no toolchain), 130 interrupted.";

#[derive(Debug, Parser)]
#[command(name = "deepep-forge", version, about = ABOUT, long_about = LONG_ABOUT, propagate_version = true)]
pub struct Cli {
    /// Print only results, warnings and errors: no notes, no progress (results
    /// go to stdout, everything else to stderr).
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate or show pins.toml.
    #[command(
        subcommand,
        after_help = "\
Examples:
  deepep-forge pins check
  deepep-forge pins show --format json"
    )]
    Pins(PinsCommand),
    /// Check a consumer project's pyproject.toml, uv.lock and Dockerfiles against pins.toml.
    #[command(
        subcommand,
        after_help = "\
Examples:
  deepep-forge lock check --project ../nemo-rl --pins pins.toml"
    )]
    Lock(LockCommand),
    /// Change the pinned DeepEP revision in pins.toml and the consumer's pyproject.toml.
    #[command(
        subcommand,
        after_help = "\
Examples:
  deepep-forge pin set hybrid-ep --source ../DeepEP --project ../rl --relock
  deepep-forge pin recover --project ../nemo-rl"
    )]
    Pin(PinCommand),
    /// Compute the build plan (source, environment, toolchain, cache key, outputs) without building.
    Plan(crate::commands::build::PlanArgs),
    /// Build DeepEP wheels for pins.toml variants: flags baked in, provenance stamped, cached.
    BuildWheel(crate::commands::build::BuildArgs),
    /// Publish each variant's wheels as a signed static package index (PEP 503/691/658), or --check one.
    Publish(crate::commands::publish::PublishArgs),
    /// Inspect and manage the wheel cache.
    #[command(
        subcommand,
        after_help = "\
Examples:
  deepep-forge cache ls
  # remove what is older than 30 days, keep two registry toolchains
  deepep-forge cache gc --older-than 30 --keep-toolchains 2
  # a signing key for a shared cache (or a `publish` index)
  deepep-forge cache keygen --name team-1 --out team.key
  deepep-forge cache push --cache-url https://cache.example --signing-key k"
    )]
    Cache(crate::commands::cache::CacheCommand),
    /// Judge a wheel, an installed environment or this machine against a requested topology.
    Probe(crate::commands::probe::ProbeArgs),
    /// This node's facts for multi-node readiness (RDMA, driver, limits, NUMA), to judge here or elsewhere.
    #[command(
        subcommand,
        after_help = "\
Examples:
  deepep-forge host facts
  # every node of a job, judged later with `probe --host-facts facts/`
  srun -N 64 sh -c \\
    'deepep-forge host facts --format json > facts/$(hostname).json'
  # in a container that mounts the host's /sys, /proc and /dev at /host
  deepep-forge host facts --host-root /host --format json"
    )]
    Host(crate::commands::host::HostCommand),
    /// Signed evidence about wheels: add a reported result, show the validation boundary.
    #[command(
        subcommand,
        after_help = "\
Examples:
  # what has been proven about each variant's wheel (docs/evidence.md)
  deepep-forge evidence show --evidence evidence/ --trusted-key ci-1:BASE64
  # a result the tool did not observe, signed by you
  deepep-forge evidence add --wheel dist/deep_ep-*.whl --kind training \\
    --outcome \"20/20 steps\" --signing-key me.key --out evidence/"
    )]
    Evidence(crate::commands::evidence::EvidenceCommand),
    /// Container images: generate the buildx bake file from pins.toml, build images.
    #[command(
        subcommand,
        after_help = "\
Examples:
  deepep-forge docker bake
  deepep-forge docker build --variant h100 --builder podman"
    )]
    Docker(crate::commands::docker::DockerCommand),
    /// Tell where two wheels differ: members, zip metadata, ELF sections and symbols, text lines.
    Diff(crate::commands::repro::DiffArgs),
    /// Rebuild a wheel from its own provenance and compare byte for byte (exit 0 identical, 1 not).
    Verify(crate::commands::repro::VerifyArgs),
    /// Print a shell completion script (bash, zsh or fish) to stdout.
    #[command(after_help = "\
Examples:
  # bash-completion reads ~/.bash_completion
  deepep-forge completions bash >> ~/.bash_completion
  deepep-forge completions zsh > \"${fpath[1]}/_deepep-forge\"
  deepep-forge completions fish > ~/.config/fish/completions/deepep-forge.fish")]
    Completions {
        /// The shell to complete for.
        shell: CompletionShell,
    },
    /// Print the man page (roff), or write one page per command into a folder.
    Man(ManArgs),
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  deepep-forge man | man -l -
  # deepep-forge.1, deepep-forge-lock-check.1, ...
  deepep-forge man --out-dir ~/.local/share/man/man1")]
pub struct ManArgs {
    /// Write deepep-forge.1 and a page per subcommand (deepep-forge-lock-check.1, ...) here.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<std::path::PathBuf>,
}

/// Shells `completions` writes for.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, Subcommand)]
pub enum PinsCommand {
    /// Validate pins.toml; exit 2 with file:line:column on the first problem.
    #[command(after_help = "\
Examples:
  # ./pins.toml
  deepep-forge pins check
  deepep-forge pins check --pins ci/pins.toml")]
    Check(PinsCheckArgs),
    /// Print the validated pins (human or JSON).
    #[command(after_help = "\
Examples:
  deepep-forge pins show
  # the variants as JSON, e.g. for a CI matrix
  deepep-forge pins show --format json")]
    Show(PinsShowArgs),
}

#[derive(Debug, clap::Args)]
pub struct PinsFileArgs {
    #[command(flatten)]
    pub pins: crate::args::PinsArg,
}

#[derive(Debug, clap::Args)]
pub struct PinsCheckArgs {
    #[command(flatten)]
    pub pins: crate::args::PinsArg,
    /// Where the mirrors of pins.toml's repository are (each pinned revision's own
    /// version is compared with `base_version` when the mirror holds it; never fetched).
    #[command(flatten)]
    pub cache: crate::args::CacheDirArg,
}

#[derive(Debug, clap::Args)]
pub struct PinsShowArgs {
    #[command(flatten)]
    pub file: PinsFileArgs,
    /// Output: human text, or the validated pins as one JSON document.
    #[arg(long, value_enum, default_value_t)]
    pub format: forge_os::output::DataFormat,
}

#[derive(Debug, Subcommand)]
pub enum LockCommand {
    /// Prove that pyproject.toml, uv.lock and Dockerfiles agree with pins.toml for every architecture.
    #[command(after_help = "\
Examples:
  # the project in this folder against ./pins.toml
  deepep-forge lock check
  deepep-forge lock check --project ../nemo-rl --pins pins.toml
  # no pins.toml: the project's own pyproject.toml is the intent
  deepep-forge lock check --project ../nemo-rl --no-pins
  # in GitHub Actions: annotations at the lines
  deepep-forge lock check --format github
  # DeepEP from a `publish` index: its signed manifest, the signer's key
  deepep-forge lock check --index-manifest index --trusted-key NAME:BASE64
  # evidence: pins.toml's [evidence] table, or --require-evidence KIND
  # (both: the stricter kind wins); trusted statements from evidence/
  deepep-forge lock check --evidence evidence/ --trusted-key NAME:BASE64")]
    Check(crate::commands::lock::CheckArgs),
}

#[derive(Debug, Subcommand)]
pub enum PinCommand {
    /// Pin DeepEP to REV in pins.toml and the consumer's pyproject.toml (optionally relock with uv).
    #[command(after_help = "\
Examples:
  # a full sha: pins.toml and pyproject.toml, then uv lock and lock check
  deepep-forge pin set 17cfb817bccec3a9c247013360cc550c2bac441e --relock
  # a branch or short sha, resolved in a local clone
  deepep-forge pin set hybrid-ep --source ../DeepEP --project ../nemo-rl
  # only aarch64's requirements
  deepep-forge pin set a48493600c48 --source ../DeepEP --arch aarch64
  # install DeepEP from a `deepep-forge publish` index instead of git
  deepep-forge pin set hybrid-ep --source ../DeepEP --index URL --variant h100")]
    Set(crate::commands::pin::SetArgs),
    /// Undo a `pin set` that was killed half-way (from its journal in your state folder): every file back as it was.
    #[command(after_help = "\
Examples:
  # the same --project and --pins as the interrupted `pin set`
  deepep-forge pin recover --project ../nemo-rl --pins pins.toml")]
    Recover(crate::commands::pin::RecoverArgs),
}

/// Run a parsed command; the returned `Exit` is the process's exit code.
pub fn run(command: Command) -> Result<Exit> {
    match command {
        Command::Pins(PinsCommand::Check(a)) => {
            let p = forge_model::pins::Pins::load(&a.pins)?;
            // A revision the cache's mirror does not hold is not compared (pins check never fetches).
            let (warnings, _unread) = forge_lock::lock::revision::stale_base_version(&p, a.cache.resolve().ok())?;
            for w in &warnings {
                forge_os::alert!("{}: {w}", forge_os::printer::label("warning"));
            }
            forge_os::outln!("{}: ok ({} pins, {} variants)", a.pins.display(), p.pins.len(), p.variants.len());
            Ok(Exit::Ok)
        }
        Command::Pins(PinsCommand::Show(a)) => {
            let p = forge_model::pins::Pins::load(&a.file.pins)?;
            match a.format {
                forge_os::output::DataFormat::Json => forge_os::printer::json(&p)?,
                _ => forge_os::out!("{}", p.render_human()),
            }
            Ok(Exit::Ok)
        }
        Command::Lock(LockCommand::Check(a)) => crate::commands::lock::run(&a),
        Command::Pin(PinCommand::Set(a)) => crate::commands::pin::set(a),
        Command::Pin(PinCommand::Recover(a)) => crate::commands::pin::recover(a),
        Command::Plan(a) => crate::commands::build::plan(a),
        Command::BuildWheel(a) => crate::commands::build::build_wheel(a),
        Command::Publish(a) => crate::commands::publish::run(a),
        Command::Cache(c) => crate::commands::cache::run(c),
        Command::Probe(a) => crate::commands::probe::run(a),
        Command::Host(c) => crate::commands::host::run(c),
        Command::Evidence(c) => crate::commands::evidence::run(c),
        Command::Docker(c) => crate::commands::docker::run(c),
        Command::Diff(a) => crate::commands::repro::diff(a),
        Command::Verify(a) => crate::commands::repro::verify(a),
        Command::Completions { shell } => {
            let shell = match shell {
                CompletionShell::Bash => clap_complete::Shell::Bash,
                CompletionShell::Zsh => clap_complete::Shell::Zsh,
                CompletionShell::Fish => clap_complete::Shell::Fish,
            };
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "deepep-forge", &mut out);
            // clap_complete 4.6 names the bash state of a hyphenated binary's
            // subcommands two ways (`deepep__forge__subcmd__lock` where it walks the
            // words, `deepep__subcmd__forge__subcmd__lock` where it completes), so
            // nothing below the first level completed; tests/it/install.rs checks it.
            if matches!(shell, clap_complete::Shell::Bash) {
                out = String::from_utf8(out)?.replace("deepep__subcmd__forge", "deepep__forge").into_bytes();
            }
            write_stdout(&out)
        }
        Command::Man(a) => {
            let pages = man_pages()?;
            let Some(dir) = a.out_dir else { return write_stdout(&pages[0].1) };
            let out = forge_os::fs::Tree::create(&dir, "man page folder")?;
            // Every page staged before any is put in place: a page that cannot be written delivers none.
            let mut delivery = forge_os::fs::Delivery::new();
            for (name, page) in &pages {
                delivery.add(&out, name, forge_os::fs::PUBLIC, |f| Ok(std::io::Write::write_all(f, page)?))?;
            }
            delivery.commit()?;
            forge_os::outln!("wrote {} man pages to {}", pages.len(), dir.display());
            Ok(Exit::Ok)
        }
    }
}

/// The man pages (file name, roff): `deepep-forge.1` first, then one per
/// subcommand, named as the SEE ALSO lines of their parents name them.
pub fn man_pages() -> Result<Vec<(String, Vec<u8>)>> {
    fn walk(cmd: &clap::Command, name: String, out: &mut Vec<(String, Vec<u8>)>) -> Result<()> {
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd.clone().name(name.clone())).render(&mut page)?;
        out.push((format!("{name}.1"), page));
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            walk(sub, format!("{name}-{}", sub.get_name()), out)?;
        }
        Ok(())
    }
    fn no_help_subcommand(cmd: clap::Command) -> clap::Command {
        let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_string()).collect();
        names.iter().fold(cmd.disable_help_subcommand(true), |c, n| c.mut_subcommand(n, no_help_subcommand))
    }
    let mut cmd = no_help_subcommand(<Cli as clap::CommandFactory>::command());
    cmd.build();
    let mut out = Vec::new();
    walk(&cmd, "deepep-forge".into(), &mut out)?;
    Ok(out)
}

fn write_stdout(bytes: &[u8]) -> Result<Exit> {
    forge_os::printer::stdout_bytes(bytes);
    Ok(Exit::Ok)
}

/// Install the Ctrl-C/SIGTERM handler: the first signal sets
/// [`error::INTERRUPTED`]; work that cleans up after itself (builds) holds a
/// [`error::Cooperative`] guard and stops at its next check; with no guard held,
/// or on a second signal, the process exits 130 at once.
pub fn install_signal_handler() {
    let _ = ctrlc::set_handler(|| {
        use std::sync::atomic::Ordering;
        let again = error::INTERRUPTED.swap(true, Ordering::SeqCst);
        if again || error::COOPERATIVE.load(Ordering::SeqCst) == 0 {
            forge_os::alert!("\ninterrupted");
            std::process::exit(Exit::Interrupted.code() as i32);
        }
        forge_os::alert!("\ninterrupted: cleaning up (press Ctrl-C again to exit at once)");
    });
}

/// A closed stdout (`deepep-forge plan | head -1`) ends the process the way it
/// ends `cat` or `git`: by SIGPIPE (the shell shows 141), never by a panic in
/// a write. Rust ignores SIGPIPE by default; children get the default
/// disposition anyway. Sockets: std sends with MSG_NOSIGNAL, and the HTTP
/// client's writes (writev) run on a thread with SIGPIPE blocked (`http`).
pub fn restore_sigpipe() {
    // SAFETY: setting a signal disposition before any thread is started.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Turn a command's result into a process exit code, printing errors; a
/// result that could not be written (stdout on a full disk) is a failed job.
pub fn finish(result: Result<Exit>) -> ExitCode {
    let result = match (result, forge_os::printer::write_error()) {
        (Ok(Exit::Ok), Some(e)) => Err(anyhow::anyhow!(e)),
        (r, _) => r,
    };
    match result {
        Ok(e) => ExitCode::from(e.code()),
        Err(err) => {
            error::report(&err);
            ExitCode::from(error::exit_of(&err).code())
        }
    }
}

/// Entry point of the `deepep-forge` binary.
pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// Parse `args` (the first is the program name) and run; `cargo xtask` calls
/// this with `deepep-forge` as the name, so both say the same thing.
pub fn main_from(args: impl IntoIterator<Item = std::ffi::OsString>) -> ExitCode {
    restore_sigpipe();
    let args: Vec<std::ffi::OsString> = args.into_iter().collect();
    let early = match not_utf8(&args) {
        Some(why) => Err(anyhow::Error::from(why)),
        None => forge_os::environ::check_listed(),
    };
    if let Err(e) = early {
        forge_os::printer::init(false);
        forge_os::error::report(&e);
        return ExitCode::from(Exit::Usage.code());
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { Exit::Usage.code() } else { Exit::Ok.code() };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    forge_os::printer::init(cli.quiet);
    install_signal_handler();
    finish(run(cli.command))
}

/// An argument or the current folder that is not UTF-8, as an error (exit 2):
/// every report, text or JSON, names its paths, and JSON cannot carry such
/// bytes (a lossy U+FFFD would name another folder). Nothing has run yet.
fn not_utf8(args: &[std::ffi::OsString]) -> Option<forge_os::error::Failure> {
    let shown = |b: &[u8]| b.escape_ascii().to_string();
    if let Some(a) = args.iter().skip(1).find(|a| a.to_str().is_none()) {
        return Some(
            forge_os::error::Failure::usage(format!(
                "the argument `{}` is not UTF-8 text: deepep-forge names every path in its reports (text and JSON), and these bytes cannot be named exactly",
                shown(a.as_encoded_bytes())
            ))
            .hint("rename the file or folder to a UTF-8 name, or pass it through a UTF-8 symlink"),
        );
    }
    let cwd = std::env::current_dir().ok()?;
    cwd.to_str().is_none().then(|| {
        forge_os::error::Failure::usage(format!(
            "the current folder `{}` is not UTF-8 text: deepep-forge names every path in its reports (text and JSON), and these bytes cannot be named exactly",
            shown(cwd.as_os_str().as_encoded_bytes())
        ))
        .hint("run from a folder whose path is UTF-8")
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
