//! The integration tests of deepep-forge: one test binary (as uv's
//! `crates/uv/tests/it`), one module per area. Tests that need something from
//! outside the checkout are ignored, with what they need, unless their `needs-*`
//! feature is on (tests/it/needs.rs; docs/contributing.md says how to run them).
#[macro_use]
mod support;
mod build_support;

mod adversarial;
mod adversarial_cache;
mod adversarial_inputs;
mod adversarial_patches;
mod architecture;
mod build;
mod build_root;
mod cache;
mod cache_trees;
mod ci_scripts;
mod ci_workflow;
mod cli;
mod consumer_ci;
mod cross;
mod deepep_history;
mod docker;
mod docs;
mod environ;
mod environment_check;
mod epv2;
mod evidence;
mod flags;
mod fleet_cache;
mod fork;
mod front_door;
mod help;
mod hostile5;
mod hostile5_evidence;
mod hostile5_patches;
mod images;
mod install;
mod interface;
mod journeys;
mod journeys_closure;
mod journeys_epv2;
mod journeys_pinbump;
mod journeys_release;
mod journeys_release_image;
mod lock;
mod lock_environment;
mod lock_patches;
mod multinode_host;
mod needs;
mod nvcc_threads;
mod patched_build;
mod pinset;
mod platform_tags;
mod probe;
mod probe_loader;
mod progress;
mod publish;
mod pymatrix;
mod registry;
mod repro;
mod runtime;
mod side_by_side;
mod structure;
mod unit_order;
mod uv_claims;
mod variant_wheels;
