//! Each command's clap arguments and their one conversion into the plain
//! request its domain crate takes (as maturin's `BuildOptions` ->
//! `BuildContext`); the shared flags are in `crate::args`. Must not hold any
//! job's logic.
pub mod build;
pub mod cache;
pub mod docker;
pub mod evidence;
pub mod host;
pub mod lock;
pub mod pin;
pub mod probe;
pub mod publish;
pub mod repro;
