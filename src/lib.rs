//! deepep-forge: pins, lock checks, wheel builds and probes for DeepEP (HybridEP).
//!
//! This crate is the command line: [`cli`] holds the clap definition and dispatch;
//! the work lives in the crates it re-exports (ARCHITECTURE.md has the map).
pub mod args;
pub mod cli;
pub mod commands;

pub use forge_build::{builder, docker, publish, repro};
pub use forge_core::{alert, bail_usage, note, out, outln};
pub use forge_core::{
    attest, dockerfile, environ, error, findings, http, input, interface, ladder, lockgraph, manylinux, marker, output,
    patches, pep, pins, printer, process, provenance, topology, torch, verdict, wheel,
};
pub use forge_lock::{lock, pinset};
pub use forge_probe::{probe, runtime};
pub use forge_store::{cache, evidence, index, patch, source};
