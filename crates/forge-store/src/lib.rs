//! What deepep-forge keeps on disk and shares: the wheel cache (local and signed remote), git mirrors and source snapshots, patch application, the signed package index format, evidence statements.
//!
//! ARCHITECTURE.md has the map: what each crate owns and may import.
pub mod cache;
pub mod evidence;
pub mod index;
pub mod patch;
pub mod source;

// The modules of `forge-core`, under the paths they always had (`crate::pins`).
pub use forge_core::{alert, bail_usage, note, out, outln};
pub use forge_core::{
    attest, dockerfile, environ, error, findings, http, input, interface, ladder, lockgraph, manylinux, marker, output,
    patches, pep, pins, printer, process, provenance, topology, torch, verdict, wheel,
};
