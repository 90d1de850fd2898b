//! What deepep-forge keeps on disk and shares: the wheel cache (local and signed remote), git mirrors and source snapshots, patch application, the signed package index format, evidence statements.
//!
//! ARCHITECTURE.md has the map: what each crate owns and may import.
pub mod cache;
pub mod evidence;
pub mod index;
pub mod patch;
pub mod source;
