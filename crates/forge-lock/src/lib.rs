//! A consumer's pins: lock check (pyproject.toml, uv.lock, Dockerfiles) and pin set.
//!
//! ARCHITECTURE.md has the map: what each crate owns and may import.
pub mod lock;
pub mod pinset;

// The modules of `forge-core`, under the paths they always had (`crate::pins`).
pub use forge_core::{
    attest, dockerfile, environ, error, findings, http, input, interface, ladder, lockgraph, manylinux, marker, output,
    patches, pep, pins, printer, process, provenance, topology, torch, verdict, wheel,
};

// The modules of `forge-store`, under the paths they always had (`crate::pins`).
pub use forge_core::{alert, bail_usage, note, out, outln};
pub use forge_store::{cache, evidence, index, patch, source};
