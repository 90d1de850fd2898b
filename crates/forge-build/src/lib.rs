//! Building DeepEP wheels (plan, execute, the registry toolchain, cross builds), verify and diff, publish, and daemonless images.
//!
//! ARCHITECTURE.md has the map: what each crate owns and may import.
pub mod builder;
pub mod docker;
pub mod publish;
pub mod repro;

// The modules of `forge-core`, under the paths they always had (`crate::pins`).
pub use forge_core::{
    attest, dockerfile, environ, error, findings, http, input, interface, ladder, lockgraph, manylinux, marker, output,
    patches, pep, pins, printer, process, provenance, topology, torch, verdict, wheel,
};

// The modules of `forge-store`, under the paths they always had (`crate::pins`).
pub use forge_core::{alert, bail_usage, note, out, outln};
pub use forge_store::{cache, evidence, index, patch, source};
