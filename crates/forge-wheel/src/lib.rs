//! The wheel: names, RECORD, METADATA, the one wheel reader and writer, ELF and manylinux platform tags, provenance and the in-toto statement.
//!
//! ARCHITECTURE.md has the map: what each crate owns and may import.
pub mod attest;
pub mod manylinux;
pub mod provenance;
pub mod wheel;
