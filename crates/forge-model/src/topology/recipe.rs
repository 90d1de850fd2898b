//! NeMo-RL recipes as NeMo-RL's `load_config_with_inheritance` reads them:
//! `defaults:` (a path or a list, relative to the declaring file, loaded
//! depth first, later parents win), a deep merge child over parent, and
//! `_override_: true` on a top-level section to replace instead of merge (as
//! in NeMo-RL, below the top level it is an ordinary key). Only the keys the
//! topology needs are interpolated (`${a.b}`, relative `${.x}`); a resolver
//! such as `${mul:...}` stays unresolved and is named in a note.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_norway::{Mapping, Value};

use super::Request;
use forge_os::error::Failure;

const OVERRIDE: &str = "_override_";
const MAX_DEPTH: usize = 32;

const MEGATRON: &str = "policy.megatron_cfg";
pub const EP_KEY: &str = "policy.megatron_cfg.expert_model_parallel_size";
/// NeMo-RL's Automodel (DTensor v2) path.
const DTENSOR: &str = "policy.dtensor_cfg";
pub const AUTOMODEL_EP_KEY: &str = "policy.dtensor_cfg.expert_parallel_size";
pub const AUTOMODEL_DISPATCHER_KEY: &str = "policy.dtensor_cfg.automodel_kwargs.backend.dispatcher";
pub const R_ENV: &str = "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN";
pub const MNNVL_ENV: &str = "USE_MNNVL";

/// The topology a recipe asks for, after NeMo-RL's defaults.
#[derive(Debug, Clone, Default)]
pub struct RecipeTopology {
    pub path: PathBuf,
    pub ep: Option<u32>,
    pub nodes: Option<u32>,
    pub gpus_per_node: Option<u32>,
    pub ranks_per_domain: Option<u32>,
    pub mnnvl: Option<bool>,
    pub dispatcher: String,
    /// EP unknown on the Megatron path, R and USE_MNNVL unset: NeMo-RL's defaults follow EP.
    pub defaults_follow_ep: bool,
    pub notes: Vec<String>,
}

impl RecipeTopology {
    /// The recipe's values over a preset's (recipes name no GPU: the preset's stays).
    pub fn layer_over(self, base: Request) -> Request {
        let mut notes = base.notes;
        notes.extend(self.notes.iter().map(forge_os::line::Line::new));
        let hybridep = self.dispatcher == "hybridep";
        Request {
            source: if base.source == "flags" {
                self.path.display().to_string().into()
            } else {
                format!("{} over {}", self.path.display(), base.source).into()
            },
            ep: self.ep.or(base.ep),
            nodes: self.nodes.or(base.nodes),
            gpus_per_node: self.gpus_per_node.or(base.gpus_per_node),
            // What NeMo-RL sets wins over a preset: it is what the run will use.
            ranks_per_domain: if hybridep { self.ranks_per_domain } else { base.ranks_per_domain },
            mnnvl: if hybridep { self.mnnvl } else { base.mnnvl },
            gpu: base.gpu,
            dispatcher: Some(self.dispatcher.into()),
            defaults_follow_ep: hybridep && self.defaults_follow_ep,
            notes,
        }
    }
}

fn bad(path: &Path, what: impl std::fmt::Display) -> anyhow::Error {
    Failure::usage(format!("bad recipe {}: {what}", path.display()))
        .hint("a NeMo-RL recipe is a YAML mapping; `defaults:` names parent recipes relative to the declaring file")
        .into()
}

/// Load a recipe and its `defaults:` chain into one merged mapping (parents
/// must stay inside the git repository holding the recipe).
pub fn load(path: &Path) -> Result<Mapping> {
    load_within(path, None)
}

/// Load a recipe; every file of its `defaults:` chain must lie inside `root`
/// (`--recipe-root`), or when None the git repository holding the recipe (the
/// nearest ancestor with `.git`; found without running git), or failing that
/// the recipe's own folder. That folder is opened as a tree and every file is
/// read through it (a link out of it is refused). Each file is read once
/// (memoised), chains are at most [`MAX_CHAIN`] deep and [`MAX_FILES`] files in all.
pub fn load_within(path: &Path, root: Option<&Path>) -> Result<Mapping> {
    let top = forge_os::fs::named::canonical(path, "recipe")
        .map_err(|e| Failure::usage(format!("{e:#}")).hint("pass the path of a recipe file"))?;
    let (boundary, why) = boundary(&top, root)?;
    let tree = forge_os::fs::Tree::open(&boundary, "recipe folder")?;
    let mut l = Loader { tree, why, memo: HashMap::new(), stack: Vec::new() };
    // As written (a link on the way is followed inside the folder), else as resolved.
    let given = std::path::absolute(path).ok().as_deref().and_then(lexical);
    let rel = given
        .and_then(|g| g.strip_prefix(&boundary).ok().map(Path::to_path_buf))
        .or_else(|| top.strip_prefix(&boundary).ok().map(Path::to_path_buf));
    l.load(path, rel, None)
}

/// Longest `defaults:` chain (a recipe, its parent, its parent's parent, ...).
pub const MAX_CHAIN: usize = 64;
/// Most distinct files one recipe may pull in.
pub const MAX_FILES: usize = 1000;

struct Loader {
    /// The folder recipes must stay in.
    tree: forge_os::fs::Tree,
    /// What the folder is, for messages.
    why: &'static str,
    memo: HashMap<PathBuf, Mapping>,
    stack: Vec<PathBuf>,
}

/// The folder recipes must stay in, and what it is (`top`: the recipe, canonical).
fn boundary(top: &Path, root: Option<&Path>) -> Result<(PathBuf, &'static str)> {
    use forge_os::fs::Kind;
    if let Some(r) = root {
        let c = forge_os::fs::named::canonical(r, "--recipe-root").map_err(|e| {
            Failure::usage(format!("--recipe-root {}: {e:#}", r.display())).hint("pass an existing folder")
        })?;
        return Ok((c, "--recipe-root"));
    }
    let dir = top.parent().unwrap_or(Path::new("/")).to_path_buf();
    match dir.ancestors().find(|a| forge_os::fs::named::kind(&a.join(".git")) != Kind::Missing) {
        Some(git) => Ok((git.to_path_buf(), "the git repository holding the recipe")),
        None => Ok((dir, "the recipe's folder (it is in no git repository)")),
    }
}

/// `p` with `.` and `..` taken away as written; `None` when `..` climbs above its start.
fn lexical(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            c => out.push(c),
        }
    }
    Some(out)
}

impl Loader {
    /// Load `path` (as messages name it), which is `rel` in the folder (`None`:
    /// outside it, as written).
    fn load(&mut self, path: &Path, rel: Option<PathBuf>, declared_by: Option<&Path>) -> Result<Mapping> {
        let unreadable = |e: anyhow::Error| match declared_by {
            Some(parent) => bad(parent, format!("`defaults:` names {}, which cannot be read: {e:#}", path.display())),
            None => e,
        };
        // Parents are named relative to this file as named (as NeMo-RL joins them), not its link's target.
        let rel_dir = rel.as_ref().and_then(|r| r.parent()).unwrap_or(Path::new("")).to_path_buf();
        let resolved = match rel.map(|r| self.tree.resolve(r)).transpose().map_err(unreadable)? {
            Some(forge_os::fs::Resolved::Inside(r)) => Some(r),
            _ => None,
        };
        let Some(canonical) = resolved else {
            let at = declared_by.unwrap_or(path);
            return Err(Failure::usage(format!(
                "bad recipe {}: `defaults:` reaches {}, outside {} ({})",
                at.display(),
                path.display(),
                self.tree.path().display(),
                self.why
            ))
            .hint("recipes may only inherit from files of their own repository; pass --recipe-root DIR to allow a wider folder")
            .into());
        };
        if self.stack.contains(&canonical) {
            return Err(bad(path, "its `defaults:` chain comes back to itself"));
        }
        if let Some(m) = self.memo.get(&canonical) {
            return Ok(m.clone());
        }
        if self.stack.len() >= MAX_CHAIN {
            return Err(bad(path, format!("its `defaults:` chain is more than {MAX_CHAIN} files deep")));
        }
        if self.memo.len() >= MAX_FILES {
            return Err(bad(path, format!("the recipe pulls in more than {MAX_FILES} files")));
        }
        // The recipe the user names is read as they name it (a link they name is followed).
        let text = match declared_by {
            None => forge_os::fs::named::read_text(path, "recipe", forge_os::input::cap::TEXT)?,
            Some(_) => self.tree.read_text(&canonical, forge_os::input::cap::TEXT).map_err(unreadable)?,
        };
        // The YAML scanner slows down quadratically with flow nesting (`[[[[...`);
        // serde_norway's own limit applies only after scanning.
        if flow_depth(&text) > MAX_FLOW_DEPTH {
            return Err(bad(path, format!("`[`/`{{` nested more than {MAX_FLOW_DEPTH} levels deep")));
        }
        // serde_norway's message names line and column.
        let value: Value = serde_norway::from_str(&text).map_err(|e| bad(path, e))?;
        let mut map = match value {
            Value::Mapping(m) => m,
            Value::Null => Mapping::new(),
            other => return Err(bad(path, format!("the top level is {}, expected a mapping", kind(&other)))),
        };
        let merged = match map.remove("defaults") {
            None => map,
            Some(defaults) => {
                let parents = parents(path, defaults)?;
                self.stack.push(canonical.clone());
                let dir = path.parent().unwrap_or(Path::new("."));
                let mut base = Mapping::new();
                for p in parents {
                    let (parent, rel) = if p.starts_with('/') {
                        let rel = lexical(Path::new(&p))
                            .and_then(|a| a.strip_prefix(self.tree.path()).ok().map(Path::to_path_buf));
                        (PathBuf::from(&p), rel)
                    } else {
                        (dir.join(&p), lexical(&rel_dir.join(&p)))
                    };
                    let loaded = self.load(&parent, rel, Some(path));
                    let loaded = match loaded {
                        Ok(l) => l,
                        Err(e) => {
                            self.stack.pop();
                            return Err(e);
                        }
                    };
                    base = merge_with_override(base, loaded);
                }
                self.stack.pop();
                merge_with_override(base, map)
            }
        };
        self.memo.insert(canonical, merged.clone());
        Ok(merged)
    }
}

/// Deepest `[`/`{` nesting a recipe may have (counted over the whole text,
/// quotes included: an over-estimate never refuses a real recipe).
const MAX_FLOW_DEPTH: usize = 256;

fn flow_depth(text: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for b in text.bytes() {
        match b {
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// The paths `defaults:` names.
fn parents(path: &Path, defaults: Value) -> Result<Vec<String>> {
    match defaults {
        Value::String(s) => Ok(vec![s]),
        Value::Sequence(items) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                other => Err(bad(path, format!("`defaults:` holds {}, expected a path", kind(&other)))),
            })
            .collect(),
        other => Err(bad(path, format!("`defaults:` is {}, expected a path or a list of paths", kind(&other)))),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// NeMo-RL's `merge_with_override`: top-level sections marked `_override_: true`
/// replace the parent's; everything else merges deeply, child over parent.
fn merge_with_override(mut base: Mapping, mut child: Mapping) -> Mapping {
    for (k, v) in child.iter_mut() {
        if let Value::Mapping(m) = v {
            if m.get(OVERRIDE).and_then(Value::as_bool).unwrap_or(false) {
                m.remove(OVERRIDE);
                base.remove(k);
            }
        }
    }
    merge(&mut base, child);
    base
}

fn merge(base: &mut Mapping, child: Mapping) {
    for (k, v) in child {
        match (base.get_mut(&k), v) {
            (Some(Value::Mapping(b)), Value::Mapping(c)) => merge(b, c),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

fn lookup<'a>(root: &'a Mapping, key: &str) -> Option<&'a Value> {
    let mut parts = key.split('.');
    let mut cur = root.get(parts.next()?)?;
    for p in parts {
        cur = cur.as_mapping()?.get(p)?;
    }
    Some(cur)
}

/// The value at `key` with `${...}` interpolations resolved; Err names what stayed unresolved.
fn resolve(root: &Mapping, key: &str, depth: usize, budget: &mut usize) -> Result<Option<Value>, String> {
    if depth > MAX_DEPTH {
        return Err(format!("`{}`: interpolation loop", cut(key)));
    }
    // Each lookup costs one unit: `${b}${b}...` chains cannot grow exponentially.
    *budget = budget.checked_sub(1).ok_or_else(|| format!("`{}`: too many interpolations", cut(key)))?;
    let Some(v) = lookup(root, key) else { return Ok(None) };
    let Value::String(s) = v else { return Ok(Some(v.clone())) };
    if !s.contains("${") {
        return Ok(Some(v.clone()));
    }
    let mut out = String::new();
    let mut rest = s.as_str();
    let mut whole = None;
    while let Some(start) = rest.find("${") {
        let inner_start = start + 2;
        let end = matching_brace(&rest[inner_start..])
            .ok_or_else(|| format!("`{}` = `{}`: unbalanced `${{`", cut(key), cut(s)))?
            + inner_start;
        let inner = &rest[inner_start..end];
        if let Some((resolver, _)) = inner.split_once(':').filter(|(r, _)| !r.contains('.') || r.starts_with("oc.")) {
            return Err(format!(
                "`{}` = `{}` uses the `{}` resolver, which deepep-forge does not evaluate",
                cut(key),
                cut(s),
                cut(resolver)
            ));
        }
        let target = if inner.starts_with('.') { relative(key, inner) } else { inner.to_string() };
        let value = resolve(root, &target, depth + 1, budget)?
            .ok_or_else(|| format!("`{}` = `{}`: `{}` is not set", cut(key), cut(s), cut(&target)))?;
        if start == 0 && end + 1 == rest.len() && out.is_empty() {
            whole = Some(value);
        } else {
            out.push_str(&rest[..start]);
            out.push_str(
                &scalar_text(&value).ok_or_else(|| format!("`{}`: `{}` is not a scalar", cut(key), cut(&target)))?,
            );
            if out.len() > MAX_VALUE {
                return Err(format!("`{}`: interpolates to more than {MAX_VALUE} bytes", cut(key)));
            }
        }
        rest = &rest[end + 1..];
    }
    if let Some(w) = whole {
        return Ok(Some(w));
    }
    out.push_str(rest);
    Ok(Some(Value::String(out)))
}

/// A value as messages quote it: at most 60 characters, cut visibly.
fn cut(s: &str) -> String {
    forge_os::input::excerpt(s, 60)
}

/// Longest interpolated string.
const MAX_VALUE: usize = 64 << 10;
/// Lookups one topology key may cost.
const BUDGET: usize = 10_000;

fn matching_brace(s: &str) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return Some(i),
            '}' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// `${.x}` is a sibling of `key`; each further dot goes one level up.
fn relative(key: &str, inner: &str) -> String {
    let dots = inner.chars().take_while(|&c| c == '.').count();
    let mut parts: Vec<&str> = key.split('.').collect();
    parts.pop();
    for _ in 1..dots {
        parts.pop();
    }
    let name = &inner[dots..];
    if parts.is_empty() {
        name.to_string()
    } else {
        format!("{}.{name}", parts.join("."))
    }
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Reads typed topology keys, collecting notes about unresolved ones.
struct Reader<'a> {
    path: &'a Path,
    root: &'a Mapping,
    notes: Vec<String>,
}

impl Reader<'_> {
    fn value(&mut self, key: &str) -> Option<Value> {
        let mut budget = BUDGET;
        match resolve(self.root, key, 0, &mut budget) {
            Ok(Some(Value::Null)) | Ok(None) => None,
            Ok(v) => v,
            Err(why) => {
                self.notes.push(format!("unresolved: {why}; treated as unknown"));
                None
            }
        }
    }
    fn int(&mut self, key: &str) -> Result<Option<u32>> {
        let Some(v) = self.value(key) else { return Ok(None) };
        let n = match &v {
            Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        n.map(Some).ok_or_else(|| bad(self.path, format!("`{key}` is {}, expected a whole number", show(&v))))
    }
    fn flag(&mut self, key: &str) -> Result<Option<bool>> {
        let Some(v) = self.value(key) else { return Ok(None) };
        let b = match &v {
            Value::Bool(b) => Some(*b),
            Value::Number(n) => n.as_u64().map(|n| n != 0),
            Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
                "1" | "true" => Some(true),
                "0" | "false" => Some(false),
                _ => None,
            },
            _ => None,
        };
        b.map(Some).ok_or_else(|| bad(self.path, format!("`{key}` is {}, expected 0/1 or true/false", show(&v))))
    }
    fn text(&mut self, key: &str) -> Option<String> {
        self.value(key).as_ref().and_then(scalar_text)
    }
}

fn show(v: &Value) -> String {
    scalar_text(v).map(|s| format!("`{}`", cut(&s))).unwrap_or_else(|| kind(v).to_string())
}

/// Read a recipe's topology: cluster size, EP, dispatcher and HybridEP settings.
/// The training backend decides where they live (NeMo-RL's lm_policy.py):
/// `policy.megatron_cfg.enabled` selects Megatron (with NeMo-RL's HybridEP
/// defaults R = min(EP, 64), USE_MNNVL = EP > 4 where unset), else
/// `policy.dtensor_cfg.enabled` with `_v2` selects Automodel (EP in
/// `expert_parallel_size`, default 1; dispatcher in
/// `automodel_kwargs.backend.dispatcher`: `deepep`, `hybridep`, `torch`).
pub fn read(path: &Path) -> Result<RecipeTopology> {
    read_within(path, None)
}

/// [`read`] with the folder parents must stay in (`--recipe-root`).
pub fn read_within(path: &Path, recipe_root: Option<&Path>) -> Result<RecipeTopology> {
    let root = load_within(path, recipe_root)?;
    let mut rd = Reader { path, root: &root, notes: Vec::new() };
    let nodes = rd.int("cluster.num_nodes")?;
    let gpus_per_node = rd.int("cluster.gpus_per_node")?;
    let megatron = rd.flag(&format!("{MEGATRON}.enabled"))?.unwrap_or(false);
    let dtensor = rd.flag(&format!("{DTENSOR}.enabled"))?.unwrap_or(false);
    let v2 = rd.flag(&format!("{DTENSOR}._v2"))?.unwrap_or(false);
    let mut topo = RecipeTopology { path: path.to_path_buf(), nodes, gpus_per_node, ..Default::default() };
    if megatron {
        read_megatron(&mut rd, &mut topo)?;
    } else if dtensor && v2 {
        read_automodel(&mut rd, &mut topo)?;
    } else {
        topo.dispatcher = if dtensor {
            "none (policy.dtensor_cfg._v2 is not true: the DTensor v1 worker has no expert parallelism)".into()
        } else {
            "none (neither policy.megatron_cfg.enabled nor policy.dtensor_cfg.enabled is true)".into()
        };
        rd.notes.push(format!("no MoE dispatcher: {}", topo.dispatcher));
    }
    for key in [MEGATRON, "policy.megatron_cfg.env_vars", DTENSOR, "policy.dtensor_cfg.env_vars"] {
        if lookup(&root, &format!("{key}.{OVERRIDE}")).is_some() {
            rd.notes.push(format!("`{key}` carries `{OVERRIDE}` below the top level: NeMo-RL honours it only on top-level sections, so it was merged"));
        }
    }
    topo.notes = rd.notes;
    Ok(topo)
}

/// Megatron: `moe_token_dispatcher_type: flex` + `moe_flex_dispatcher_backend: hybridep` selects HybridEP.
fn read_megatron(rd: &mut Reader, topo: &mut RecipeTopology) -> Result<()> {
    let ep = rd.int(EP_KEY)?;
    topo.ep = ep;
    let dtype = rd.text(&format!("{MEGATRON}.moe_token_dispatcher_type"));
    let backend = rd.text(&format!("{MEGATRON}.moe_flex_dispatcher_backend"));
    topo.dispatcher = if dtype.as_deref() == Some("flex") {
        backend.clone().unwrap_or_else(|| "deepep".into())
    } else {
        if backend.as_deref() == Some("hybridep") {
            rd.notes.push(format!(
                "moe_flex_dispatcher_backend is hybridep but moe_token_dispatcher_type is {}: Megatron uses HybridEP only with `flex`",
                dtype.as_deref().unwrap_or("unset")
            ));
        }
        dtype.unwrap_or_else(|| "alltoall".into())
    };
    if topo.dispatcher == "hybridep" {
        // NeMo-RL: the hybridep_* config key, else the env var, else its default.
        let r_key = format!("{MEGATRON}.hybridep_num_ranks_per_nvlink_domain");
        let m_key = format!("{MEGATRON}.hybridep_use_mnnvl");
        topo.ranks_per_domain = match rd.int(&r_key)? {
            Some(v) => Some(v),
            None => rd.int(&format!("{MEGATRON}.env_vars.{R_ENV}"))?,
        };
        topo.mnnvl = match rd.flag(&m_key)? {
            Some(v) => Some(v),
            None => rd.flag(&format!("{MEGATRON}.env_vars.{MNNVL_ENV}"))?,
        };
        if let Some(e) = ep {
            if topo.ranks_per_domain.is_none() {
                topo.ranks_per_domain = Some(e.min(64));
                rd.notes.push(format!("default applied: {R_ENV} = min(EP {e}, 64) = {} (NeMo-RL's default; the recipe sets neither it nor hybridep_num_ranks_per_nvlink_domain)", e.min(64)));
            }
            if topo.mnnvl.is_none() {
                topo.mnnvl = Some(e > 4);
                rd.notes.push(format!("default applied: {MNNVL_ENV} = int(EP {e} > 4) = {} (NeMo-RL's default; the recipe sets neither it nor hybridep_use_mnnvl)", u8::from(e > 4)));
            }
        } else {
            topo.defaults_follow_ep = topo.ranks_per_domain.is_none() || topo.mnnvl.is_none();
            rd.notes.push(format!(
                "`{EP_KEY}` is not set: EP unknown, so NeMo-RL's defaults for R and USE_MNNVL follow each admissible EP"
            ));
        }
    } else {
        rd.notes.push(format!("Megatron MoE dispatcher is {} (HybridEP needs moe_token_dispatcher_type: flex and moe_flex_dispatcher_backend: hybridep)", topo.dispatcher));
    }
    Ok(())
}

/// Automodel (DTensor v2): EP from `expert_parallel_size` (NeMo-RL's default 1), the dispatcher
/// from `automodel_kwargs.backend.dispatcher`; HybridEP reads R and USE_MNNVL from `dtensor_cfg.env_vars`
/// (NeMo-RL fills no defaults on this path: HybridEP detects R at run time when unset).
fn read_automodel(rd: &mut Reader, topo: &mut RecipeTopology) -> Result<()> {
    topo.ep = match rd.int(AUTOMODEL_EP_KEY)? {
        Some(e) => Some(e),
        None => {
            rd.notes.push(format!("`{AUTOMODEL_EP_KEY}` is not set: NeMo-RL uses 1 (no expert parallelism)"));
            Some(1)
        }
    };
    topo.dispatcher = match rd.text(AUTOMODEL_DISPATCHER_KEY) {
        Some(d) => d,
        None => {
            rd.notes.push(format!("`{AUTOMODEL_DISPATCHER_KEY}` is not set: Automodel's own default applies"));
            "automodel-default".into()
        }
    };
    if topo.dispatcher == "hybridep" {
        topo.ranks_per_domain = rd.int(&format!("{DTENSOR}.env_vars.{R_ENV}"))?;
        topo.mnnvl = rd.flag(&format!("{DTENSOR}.env_vars.{MNNVL_ENV}"))?;
        if topo.ranks_per_domain.is_none() {
            rd.notes.push(format!("{R_ENV} is not set in {DTENSOR}.env_vars: HybridEP detects R at run time; pass --ranks-per-domain to check it"));
        }
        if topo.mnnvl.is_none() {
            rd.notes
                .push(format!("{MNNVL_ENV} is not set in {DTENSOR}.env_vars: pass --mnnvl or --no-mnnvl to check it"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn relative_interpolation_paths() {
        assert_eq!(relative("policy.generation.val_top_p", ".top_p"), "policy.generation.top_p");
        assert_eq!(relative("policy.generation.val_top_p", "..x"), "policy.x");
        assert_eq!(relative("a", ".b"), "b");
    }
    #[test]
    fn interpolates_and_reports_resolvers() {
        let root: Mapping = serde_norway::from_str(
            "a: {b: 16, c: '${a.b}', d: 'x${a.b}y', e: '${mul:${a.b}, 2}', f: '${.b}', g: '${a.g}'}",
        )
        .unwrap();
        assert_eq!(resolve(&root, "a.c", 0, &mut 100).unwrap(), Some(Value::Number(16.into())));
        assert_eq!(resolve(&root, "a.d", 0, &mut 100).unwrap(), Some(Value::String("x16y".into())));
        assert_eq!(resolve(&root, "a.f", 0, &mut 100).unwrap(), Some(Value::Number(16.into())));
        assert!(resolve(&root, "a.e", 0, &mut 100).unwrap_err().contains("`mul` resolver"));
        assert!(resolve(&root, "a.g", 0, &mut 100).unwrap_err().contains("loop"));
    }
}
