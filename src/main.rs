//! The `deepep-forge` binary: nothing but the shared CLI entry point.
fn main() -> std::process::ExitCode {
    deepep_forge::cli::main()
}
