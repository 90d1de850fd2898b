//! The topology request shared by the static probe and the runtime probe:
//! EP size, nodes, GPUs per node, ranks per NVLink domain, MNNVL, GPU kind;
//! from flags, a named preset, or a NeMo-RL recipe. Owns resolving a request
//! (and the NeMo-RL defaults); must not read wheels or touch a GPU.
use std::path::PathBuf;

use anyhow::Result;
use forge_os::line::Line;
use serde::Serialize;

pub use crate::pins::Gpu;

/// Where a request's value came from (reported in verdicts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    Flag,
    Preset,
    Recipe,
    /// Filled in by NeMo-RL's own defaults (R = min(EP,64), USE_MNNVL = EP>4).
    Default,
}

/// A resolved topology request. Every field may be unknown; rules that need an
/// unknown value report "unknown" (warn) rather than guess.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Request {
    /// Human label of where the request came from: `flags`, `preset h100-8g`, a
    /// recipe path (escaped when made: a verdict row shows it).
    pub source: Line,
    pub ep: Option<u32>,
    pub nodes: Option<u32>,
    pub gpus_per_node: Option<u32>,
    pub ranks_per_domain: Option<u32>,
    pub mnnvl: Option<bool>,
    pub gpu: Option<Gpu>,
    /// MoE dispatcher backend named by a recipe (`hybridep`, or none for dense models).
    pub dispatcher: Option<Line>,
    /// A Megatron recipe whose EP is unknown and which sets neither R nor USE_MNNVL:
    /// NeMo-RL derives both from the EP it computes (R = min(EP, 64), USE_MNNVL = EP > 4).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub defaults_follow_ep: bool,
    /// Notes about how values were obtained ("default applied: ...", unresolved
    /// interpolations); each a verdict row, escaped when made.
    pub notes: Vec<Line>,
}

/// Largest EP, node, GPU or R count a flag accepts (products stay far from u64 limits).
pub const MAX_COUNT: i64 = 1 << 20;

/// The topology flags as plain data (`probe`, `evidence add`), layered into a
/// [`Request`] by [`RequestFlags::resolve`].
#[derive(Debug, Clone, Default)]
pub struct RequestFlags {
    /// Expert-parallel group size (EP), 1 to 1048576.
    pub ep: Option<u32>,
    /// Number of nodes the job spans, 1 to 1048576.
    pub nodes: Option<u32>,
    /// GPUs per node, 1 to 1048576.
    pub gpus_per_node: Option<u32>,
    /// Ranks per NVLink domain (R; NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN), 1 to 1048576.
    pub ranks_per_domain: Option<u32>,
    /// The system has multi-node NVLink (GB200/GB300 NVL72) and the job uses it.
    pub mnnvl: bool,
    /// The job does not use multi-node NVLink (USE_MNNVL=0).
    pub no_mnnvl: bool,
    /// GPU kind: h100, h200, b200, gb200, b300, gb300, sm_90, sm_100, sm_103.
    pub gpu: Option<Gpu>,
    /// A named topology: h100-8g, b200-8g, b300-8g, gb200-nvl72, gb300-nvl72 (flags override its values).
    pub preset: Option<String>,
    /// A NeMo-RL recipe (YAML), resolved through its `defaults:` chain. Missing
    /// HybridEP settings get NeMo-RL's defaults (R = min(EP, 64), USE_MNNVL = EP > 4),
    /// which the verdict names; recipes name no GPU, so add --gpu or --preset.
    pub recipe: Option<PathBuf>,
    /// The folder a recipe's `defaults:` chain must stay in. Default: the git
    /// repository holding the recipe (else the recipe's own folder).
    pub recipe_root: Option<PathBuf>,
}

impl RequestFlags {
    /// A recipe's request, with the GPU assumed when the recipe names none.
    pub fn of_recipe(recipe: PathBuf, gpu: Option<Gpu>) -> RequestFlags {
        RequestFlags { recipe: Some(recipe), gpu, ..Default::default() }
    }

    /// True when no topology was asked for at all.
    pub fn is_empty(&self) -> bool {
        self.ep.is_none()
            && self.nodes.is_none()
            && self.gpus_per_node.is_none()
            && self.ranks_per_domain.is_none()
            && !self.mnnvl
            && !self.no_mnnvl
            && self.gpu.is_none()
            && self.preset.is_none()
            && self.recipe.is_none()
    }

    /// The flags alone as a request (presets and recipes are layered by `resolve`).
    pub fn flags(&self) -> Request {
        Request {
            source: "flags".into(),
            ep: self.ep,
            nodes: self.nodes,
            gpus_per_node: self.gpus_per_node,
            ranks_per_domain: self.ranks_per_domain,
            mnnvl: if self.mnnvl {
                Some(true)
            } else if self.no_mnnvl {
                Some(false)
            } else {
                None
            },
            gpu: self.gpu,
            dispatcher: None,
            defaults_follow_ep: false,
            notes: Vec::new(),
        }
    }

    /// Resolve flags, preset and recipe into one request (None when nothing was asked).
    /// Layering: preset, then recipe (with NeMo-RL's defaults for what it leaves
    /// out), then flags.
    pub fn resolve(&self) -> Result<Option<Request>> {
        if self.is_empty() {
            return Ok(None);
        }
        let mut req = match &self.preset {
            Some(name) => preset(name)?,
            None => Request { source: "flags".into(), ..Default::default() },
        };
        if let Some(path) = &self.recipe {
            let r = recipe::read_within(path, self.recipe_root.as_deref())?;
            req = r.layer_over(req);
        }
        let flags = self.flags();
        let mut set = Vec::new();
        macro_rules! over {
            ($f:ident, $name:expr) => {
                if flags.$f.is_some() {
                    if req.$f.is_some() && req.$f != flags.$f {
                        set.push($name);
                    }
                    req.$f = flags.$f;
                }
            };
        }
        over!(ep, "--ep");
        over!(nodes, "--nodes");
        over!(gpus_per_node, "--gpus-per-node");
        over!(ranks_per_domain, "--ranks-per-domain");
        over!(mnnvl, "--mnnvl/--no-mnnvl");
        over!(gpu, "--gpu");
        if !set.is_empty() {
            req.notes.push(format!("flags override {}: {}", req.source, set.join(", ")).into());
        }
        if self.recipe.is_some() && req.gpu.is_none() {
            req.notes
                .push(Line::new("recipes name no GPU: pass --gpu or --preset (rules that need it report unknown)"));
        }
        Ok(Some(req))
    }
}

/// Named topologies (`--preset`).
pub const PRESETS: [&str; 5] = ["h100-8g", "b200-8g", "b300-8g", "gb200-nvl72", "gb300-nvl72"];

/// A named topology: one 8-GPU node for h100/b200/b300, one NVL72 rack (18
/// compute trays x 4 GPUs, one NVLink domain of 72) for GB200 and GB300.
pub fn preset(name: &str) -> Result<Request> {
    let (gpu, nodes, gpn, ep, rpd, mnnvl) = match name {
        "h100-8g" => (Gpu::H100, 1, 8, 8, 8, false),
        "b200-8g" => (Gpu::B200, 1, 8, 8, 8, false),
        "b300-8g" => (Gpu::B300, 1, 8, 8, 8, false),
        "gb200-nvl72" => (Gpu::Gb200, 18, 4, 72, 72, true),
        "gb300-nvl72" => (Gpu::Gb300, 18, 4, 72, 72, true),
        other => {
            return Err(forge_os::error::Failure::usage(format!("unknown preset `{other}`"))
                .hint(format!("known presets: {}", PRESETS.join(", ")))
                .into())
        }
    };
    Ok(Request {
        source: format!("preset {name}").into(),
        ep: Some(ep),
        nodes: Some(nodes),
        gpus_per_node: Some(gpn),
        ranks_per_domain: Some(rpd),
        mnnvl: Some(mnnvl),
        gpu: Some(gpu),
        dispatcher: None,
        defaults_follow_ep: false,
        notes: Vec::new(),
    })
}

pub mod admit;
pub mod recipe;

pub use admit::{Admissible, Considered, Input};
