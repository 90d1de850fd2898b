//! deepep-forge: pins, lock checks, wheel builds and probes for DeepEP (HybridEP).
//!
//! See ARCHITECTURE.md for the map. The CLI lives in [`cli`]; every job is a
//! module with an `Args` type and a function returning `Result<error::Exit>`.
pub mod args;
pub mod attest;
pub mod builder;
pub mod cache;
pub mod cli;
pub mod docker;
pub mod environ;
pub mod error;
pub mod evidence;
pub mod findings;
pub mod http;
pub mod input;
pub mod interface;
pub mod ladder;
pub mod lock;
pub mod lockgraph;
pub mod marker;
pub mod output;
pub mod patches;
pub mod pep;
pub mod pins;
pub mod pinset;
pub mod printer;
pub mod probe;
pub mod process;
pub mod provenance;
pub mod publish;
pub mod repro;
pub mod runtime;
pub mod topology;
pub mod torch;
pub mod verdict;
pub mod wheel;
