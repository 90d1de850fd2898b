//! `cargo xtask <cmd>`: the deepep-forge CLI (the same clap definition as the
//! binary) plus development tasks (benchmarks). Keeps the caller's working
//! directory, so relative paths mean the same as with `deepep-forge`.
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;

#[derive(Debug, Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask", about = "deepep-forge commands and development tasks")]
struct XCli {
    #[command(subcommand)]
    command: XCommand,
}

// Parsed once per process: the size difference between variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum XCommand {
    #[command(flatten)]
    Forge(deepep_forge::cli::Command),
    /// Benchmarks that print a ratio against a baseline measured in the same run.
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    // `cargo xtask <forge command>` is `deepep-forge <forge command>`: parsed by
    // the binary's own definition, so usage lines and errors name deepep-forge.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let dev_task = args.get(1).and_then(|a| a.to_str()).is_none_or(|a| ["bench", "help", "-h", "--help"].contains(&a));
    if !dev_task {
        return deepep_forge::cli::main_from(std::iter::once("deepep-forge".into()).chain(args.into_iter().skip(1)));
    }
    let cli = match XCli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    deepep_forge::cli::install_signal_handler();
    let result = match cli.command {
        XCommand::Forge(c) => deepep_forge::cli::run(c),
        XCommand::Bench(b) => bench::run(b),
    };
    deepep_forge::cli::finish(result)
}
