//! What a Dockerfile declares, as the rules need it (`Model`): stages with
//! their platform and their ARG/ENV scopes (global ARGs re-declared in a
//! stage, ENV over ARG), every definition in file order, RUN lines expanded
//! in their stage's scope, and each scope's DeepEP build settings (`Config`).
//! Must not judge.
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use super::expand::*;
use super::parse::*;
use crate::pins::Arch;

#[derive(Debug, Default)]
pub struct Stage {
    pub name: Option<String>,
    pub platform: Option<Arch>,
    pub args: BTreeMap<String, Rc<Def>>,
    pub envs: BTreeMap<String, Rc<Def>>,
}

impl Stage {
    /// ENV wins over ARG of the same name (Docker's rule).
    pub fn get(&self, name: &str) -> Option<Rc<Def>> {
        self.envs.get(name).or_else(|| self.args.get(name)).cloned()
    }
}

pub struct Run {
    pub stage: usize,
    pub line: usize,
    /// The RUN text with ARG/ENV references in scope replaced by their values.
    pub text: String,
    /// Words of the text (expanded where every reference is known), each with
    /// the definitions it references.
    pub words: Vec<(String, Vec<Rc<Def>>)>,
    /// Expansions in it this reader cannot evaluate (see [`Expanded`]).
    pub unverifiable: Vec<String>,
}

/// An ARG/ENV whose value goes through an expansion this reader cannot evaluate.
pub struct Unverifiable {
    pub kw: &'static str,
    pub name: String,
    pub line: usize,
    pub expr: String,
}

/// What a Dockerfile declares, as the checks need it.
#[derive(Default)]
pub struct Model {
    pub global: BTreeMap<String, Rc<Def>>,
    /// Global ARGs some stage re-declares (their value is checked there).
    pub used_globals: BTreeSet<usize>,
    pub stages: Vec<Stage>,
    /// Definitions whose value cannot be evaluated here.
    pub unverifiable: Vec<Unverifiable>,
    /// Every definition in file order.
    pub defs: Vec<Rc<Def>>,
    pub runs: Vec<Run>,
}

impl Model {
    pub fn read(text: &str) -> Model {
        let (ins, escape) = instructions(text);
        let mut m = Model::default();
        for inst in ins {
            let line = inst.line;
            match inst.keyword.as_str() {
                "FROM" => {
                    let words = split_words(&inst.args, escape);
                    let global = |n: &str| m.global.get(n).cloned();
                    let mut platform = None;
                    let mut rest = Vec::new();
                    for w in &words {
                        match w.strip_prefix("--platform=") {
                            Some(p) => platform = expand(p, escape, &global).text.and_then(|p| platform_arch(&p)),
                            None if w.starts_with("--") => {}
                            None => rest.push(w.clone()),
                        }
                    }
                    let image = rest
                        .first()
                        .and_then(|w| expand(w, escape, &global).text)
                        .unwrap_or_default()
                        .to_ascii_lowercase();
                    let name = match rest.as_slice() {
                        [_, as_, n, ..] if as_.eq_ignore_ascii_case("as") => Some(n.to_ascii_lowercase()),
                        _ => None,
                    };
                    let mut stage = Stage { name, platform, ..Stage::default() };
                    if let Some(parent) = m.stages.iter().find(|s| s.name.as_deref() == Some(image.as_str())) {
                        stage.envs = parent.envs.clone();
                        stage.platform = stage.platform.or(parent.platform);
                    }
                    m.stages.push(stage);
                }
                "ARG" => m.arg(&inst.args, line, escape),
                "ENV" => m.env(&inst.args, line, escape),
                "RUN" => m.run(&inst.args, line, escape),
                _ => {}
            }
        }
        m
    }

    /// `ARG NAME[=default] ...`: a global ARG before the first FROM, else a
    /// stage ARG (re-declaring a global one follows it).
    pub fn arg(&mut self, args: &str, line: usize, escape: char) {
        let m = self;
        let idx = m.stages.len().checked_sub(1);
        for w in split_words(args, escape) {
            let (name, default) = match w.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (w.clone(), None),
            };
            let def = match (default, idx) {
                (Some(v), _) => {
                    let e = match idx {
                        Some(s) => expand(&v, escape, &|n| m.stages[s].get(n)),
                        None => expand(&v, escape, &|n| m.global.get(n).cloned()),
                    };
                    if let Some(expr) = e.unverifiable.first() {
                        let expr = expr.clone();
                        m.unverifiable.push(Unverifiable { kw: "ARG", name: name.clone(), line, expr });
                    }
                    Def { kw: "ARG", name: name.clone(), line, value: e.text, via: e.single, stage: idx }
                }
                (None, Some(_)) => {
                    let g = m.global.get(&name).cloned();
                    if let Some(g) = &g {
                        m.used_globals.insert(g.line);
                    }
                    Def {
                        kw: "ARG",
                        name: name.clone(),
                        line,
                        value: g.as_ref().and_then(|g| g.value.clone()),
                        via: g,
                        stage: idx,
                    }
                }
                (None, None) => Def { kw: "ARG", name: name.clone(), line, value: None, via: None, stage: None },
            };
            let def = Rc::new(def);
            m.defs.push(def.clone());
            match idx {
                Some(s) => m.stages[s].args.insert(name, def),
                None => m.global.insert(name, def),
            };
        }
    }

    /// `ENV K=V ...` or the legacy `ENV K V`: all pairs see the scope before
    /// the instruction.
    pub fn env(&mut self, args: &str, line: usize, escape: char) {
        let m = self;
        let Some(s) = m.stages.len().checked_sub(1) else { return };
        let words = split_words(args, escape);
        let pairs: Vec<(String, String)> = if words.first().is_some_and(|w| w.contains('=')) {
            words.iter().filter_map(|w| w.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
        } else {
            match args.split_once(char::is_whitespace) {
                Some((k, v)) => vec![(k.to_string(), v.trim().to_string())],
                None => Vec::new(),
            }
        };
        // All pairs of one ENV see the scope before it (Docker's rule).
        let mut unverifiable = Vec::new();
        let defs: Vec<Rc<Def>> = pairs
            .into_iter()
            .map(|(k, v)| {
                let e = expand(&v, escape, &|n| m.stages[s].get(n));
                if let Some(expr) = e.unverifiable.first() {
                    let (name, expr) = (k.clone(), expr.clone());
                    unverifiable.push(Unverifiable { kw: "ENV", name, line, expr });
                }
                Rc::new(Def { kw: "ENV", name: k, line, value: e.text, via: e.single, stage: Some(s) })
            })
            .collect();
        m.unverifiable.extend(unverifiable);
        for d in defs {
            m.defs.push(d.clone());
            m.stages[s].envs.insert(d.name.clone(), d);
        }
    }

    /// `RUN ...`: its words with ARG/ENV references in scope expanded, and the
    /// expansions that cannot be evaluated.
    pub fn run(&mut self, args: &str, line: usize, escape: char) {
        let m = self;
        let Some(s) = m.stages.len().checked_sub(1) else { return };
        let scope = &m.stages[s];
        // Shell variables (not ARG/ENV) stay as written: Docker does not expand RUN.
        let mut unverifiable = Vec::new();
        let words: Vec<(String, Vec<Rc<Def>>)> = split_words(args, escape)
            .into_iter()
            .map(|w| {
                let e = expand(&w, escape, &|n| scope.get(n));
                unverifiable.extend(e.unverifiable);
                (e.text.unwrap_or(w), e.refs)
            })
            .collect();
        let text = words.iter().map(|(w, _)| w.as_str()).collect::<Vec<_>>().join(" ");
        m.runs.push(Run { stage: s, line, text, words, unverifiable });
    }

    pub fn platform_of(&self, d: &Def) -> Option<Arch> {
        d.stage.and_then(|s| self.stages[s].platform)
    }

    /// Build configurations to check: each stage's scope at its end, then the
    /// global ARGs no stage re-declares.
    pub fn configs(&self) -> Vec<(Config, Option<Arch>)> {
        let mut out: Vec<(Config, Option<Arch>)> = self
            .stages
            .iter()
            .map(|s| (Config::from_scope(&|n| s.get(n), s.envs.keys().chain(s.args.keys())), s.platform))
            .collect();
        let unused: BTreeMap<String, Rc<Def>> = self
            .global
            .iter()
            .filter(|(_, d)| !self.used_globals.contains(&d.line))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.push((Config::from_scope(&|n| unused.get(n).cloned(), unused.keys()), None));
        out
    }
}

pub fn platform_arch(p: &str) -> Option<Arch> {
    p.strip_prefix("linux/").unwrap_or(p).split('/').next()?.parse().ok()
}

/// The DeepEP build settings in one scope (resolved values only).
#[derive(Default)]
pub struct Config {
    pub variant: Option<Rc<Def>>,
    pub arch_list: Option<Rc<Def>>,
    pub multinode: Option<Rc<Def>>,
    pub nixl: Option<Rc<Def>>,
    pub rdma_home: Option<Rc<Def>>,
}

impl Config {
    pub fn from_scope<'a>(get: &dyn Fn(&str) -> Option<Rc<Def>>, names: impl Iterator<Item = &'a String>) -> Config {
        let known = |n: &str| get(n).filter(|d| d.value.is_some());
        let names: BTreeSet<&String> = names.collect();
        let arch_list = known("TORCH_CUDA_ARCH_LIST")
            .or_else(|| names.iter().filter(|n| n.ends_with("CUDA_ARCH_LIST")).find_map(|n| known(n)));
        Config {
            variant: ["DEEPEP_VARIANT", "DEEPEP_FORGE_VARIANT", "VARIANT"].iter().find_map(|n| known(n)),
            arch_list,
            multinode: known("HYBRID_EP_MULTINODE"),
            nixl: known("USE_NIXL"),
            rdma_home: known("RDMA_CORE_HOME"),
        }
    }
}

/// DeepEP's setup.py reading of a boolean environment variable.
pub fn truthy(v: &str) -> bool {
    matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "t" | "yes" | "y" | "on")
}

pub fn value(d: &Rc<Def>) -> &str {
    d.value.as_deref().unwrap_or_default()
}
