//! The evidence ladder (docs/evidence.md): the kinds of evidence, weakest
//! first, their names and what each does not show. A top-level module so that
//! pins.toml's `[evidence]` table (`pins`) and the statements (`evidence`)
//! name the same kinds without importing each other. Must not read, sign or
//! judge anything.
use serde::{Deserialize, Serialize};

/// The evidence ladder, weakest first: each kind shows more than the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A recipe read and its topology resolved; nothing built or run.
    Configuration,
    /// The wheel's files read and judged against a request (`probe --wheel`).
    Static,
    /// The tool's own dispatch/combine kernel round trip on GPUs (`probe --run`).
    Kernel,
    /// DeepEP's own HybridEP round trip from this wheel (`probe --run --deep-ep`).
    DeepEpRoundTrip,
    /// DeepEP's own test suite, run from this wheel.
    DeepEpTests,
    /// A training run with this wheel.
    Training,
}

impl Kind {
    pub const ALL: [Kind; 6] =
        [Kind::Configuration, Kind::Static, Kind::Kernel, Kind::DeepEpRoundTrip, Kind::DeepEpTests, Kind::Training];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Configuration => "configuration",
            Kind::Static => "static",
            Kind::Kernel => "kernel",
            Kind::DeepEpRoundTrip => "deep-ep-round-trip",
            Kind::DeepEpTests => "deep-ep-tests",
            Kind::Training => "training",
        }
    }

    /// What a statement of this kind does NOT show (docs/evidence.md, the ladder).
    pub fn does_not_show(self) -> &'static str {
        match self {
            Kind::Configuration => "nothing was built, imported or run: says nothing about the wheel itself",
            Kind::Static => "read, not run: says nothing about these GPUs, the driver, NCCL/NVSHMEM at run time, or any kernel executing",
            Kind::Kernel => "the tool's own kernel, not DeepEP's code; on one node nothing about RDMA or multi-node NVLink",
            Kind::DeepEpRoundTrip => "one round trip at one shape, not DeepEP's test suite nor a model's numerics; on one node nothing about RDMA",
            Kind::DeepEpTests => "the test suite's shapes and scale only: says nothing about a training run's recipe, scale or numerics",
            Kind::Training => "that model, recipe and scale only, as reported by whoever ran it",
        }
    }

    /// The kinds the tool itself observes (`probe --record`); the others are only reported.
    pub fn observable(self) -> bool {
        matches!(self, Kind::Static | Kind::Kernel | Kind::DeepEpRoundTrip)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Kind {
    /// The kind of this name (`kernel`, `deep-ep-round-trip`, ...), as pins.toml and statements spell it.
    pub fn named(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// Every name, weakest first, for messages (`configuration, static, ...`).
    pub fn names() -> String {
        Kind::ALL.map(Kind::as_str).join(", ")
    }
}
