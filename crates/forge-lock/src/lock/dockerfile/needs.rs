//! Which variant each Dockerfile stage builds DeepEP for (`Need`): the one it
//! names, else every variant its settings agree with on its platform; for
//! `index-variant-mismatch`. Must not report findings of its own.
use std::collections::BTreeMap;
use std::path::PathBuf;

use super::rules::*;
use forge_model::dockerfile::model::*;
use forge_model::pins::{Arch, Pins};

/// The variant a Dockerfile build needs: the one a stage names
/// (`DEEPEP_VARIANT`/`VARIANT`), else every declared variant its DeepEP build
/// settings agree with (for the stage's platform).
#[derive(Debug, Clone)]
pub struct Need {
    /// Any of these (a build two variants of different architectures describe).
    pub variants: Vec<String>,
    pub file: PathBuf,
    /// 1-based; 0 when the need has no line (a recipe).
    pub line: usize,
    /// What the file does, in words, before the variants are named.
    pub what: String,
}

const BUILDS: &str = "builds DeepEP as";

/// What the Dockerfiles' DeepEP builds need (stages that build none, or that
/// no variant describes, need nothing here: `check` reports those).
pub fn needs(files: &[super::Dockerfile], pins: &Pins) -> Vec<Need> {
    let (revs, mut out) = (BTreeMap::new(), Vec::new());
    for f in files {
        let model = Model::read(&f.text);
        let mut c = Checker::new(&f.path, Some(pins), &revs);
        for (cfg, platform) in model.configs() {
            out.extend(c.need(pins, &cfg, platform));
        }
    }
    out
}

impl Checker<'_> {
    /// The variants a stage's build is (see [`needs`]).
    pub(super) fn need(&mut self, pins: &Pins, cfg: &Config, platform: Option<Arch>) -> Option<Need> {
        let file = self.file.to_path_buf();
        if let Some(d) = &cfg.variant {
            let v = pins.variants.iter().find(|v| v.name == value(d))?;
            return Some(Need { variants: vec![v.name.clone()], file, line: d.line, what: BUILDS.into() });
        }
        let s = self.settings(cfg)?;
        let line = s.fields.iter().map(|f| f.def.line).min()?;
        let variants: Vec<String> = pins
            .variants
            .iter()
            .filter(|v| platform.is_none_or(|p| v.arch == p))
            .filter(|v| s.fields.iter().all(|f| (f.differs)(v).is_none()))
            .map(|v| v.name.clone())
            .collect();
        (!variants.is_empty()).then_some(Need { variants, file, line, what: BUILDS.into() })
    }
}
