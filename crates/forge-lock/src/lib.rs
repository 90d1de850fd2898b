//! A consumer's pins: lock check (pyproject.toml, uv.lock, Dockerfiles) and pin set.
//!
//! ARCHITECTURE.md has the map: what each crate owns and may import.
pub mod lock;
pub mod pinset;
