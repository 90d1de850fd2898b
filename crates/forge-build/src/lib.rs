//! Building DeepEP wheels (plan, execute, the registry toolchain, cross builds), verify and diff, publish, and daemonless images.
//!
//! ARCHITECTURE.md has the map: what each crate owns and may import.
pub mod builder;
pub mod docker;
pub mod publish;
pub mod repro;
