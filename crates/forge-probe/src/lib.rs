//! Will this wheel do what this run asks: the static probe and the run on GPUs.
//!
//! ARCHITECTURE.md has the map: what each crate owns and may import.
pub mod probe;
pub mod runtime;
