//! The shared base of deepep-forge: errors and exit codes, input reading and the one hasher, the printer, child processes, HTTP, pins.toml, PEP names and versions, a Dockerfile reader, the wheel reader and writer, provenance and attestation, DeepEP's build interface, topologies, verdicts and findings.
//!
//! ARCHITECTURE.md has the map: what each crate owns and may import.
pub mod attest;
pub mod dockerfile;
pub mod environ;
pub mod error;
pub mod findings;
pub mod http;
pub mod input;
pub mod interface;
pub mod ladder;
pub mod lockgraph;
pub mod manylinux;
pub mod marker;
pub mod output;
pub mod patches;
pub mod pep;
pub mod pins;
pub mod printer;
pub mod process;
pub mod provenance;
pub mod topology;
pub mod torch;
pub mod verdict;
pub mod wheel;
