//! The models: pins.toml, topologies, PEP 440/508 names and markers, uv.lock's graph, the Dockerfile reader, DeepEP's build interface, patches, torch's self-description, verdicts, findings and the evidence ladder.
//!
//! ARCHITECTURE.md has the map: what each crate owns and may import.
pub mod cuda_arch;
pub mod dockerfile;
pub mod findings;
pub mod interface;
pub mod ladder;
pub mod lockgraph;
pub mod marker;
pub mod patches;
pub mod pep;
pub mod pins;
pub mod topology;
pub mod torch;
pub mod verdict;
