//! deepep-forge: pins, lock checks, wheel builds and probes for DeepEP (HybridEP).
//!
//! This crate is the command line: [`cli`] holds the clap definition and dispatch;
//! the work lives in the crates below it, named by what they own (ARCHITECTURE.md has the map).
pub mod args;
pub mod cli;
pub mod commands;
