//! What touches the outside world: exit codes and the one error type, the environment, bounded reading of user files and the one hasher, child processes, HTTP, the printer and output formats.
//!
//! ARCHITECTURE.md has the map: what each crate owns and may import.
pub mod environ;
pub mod error;
pub mod fs;
pub mod http;
pub mod input;
pub mod line;
pub mod output;
pub mod printer;
pub mod process;
pub mod url;
