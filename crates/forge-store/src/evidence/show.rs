//! The validation boundary: per variant, the wheel pins.toml's revision gives,
//! every trusted statement about its sha256 (by kind, machine, signer and
//! date), and what a request needs against what exists. Owns the judgement
//! "does this statement cover that need" ([`cover`]) and the three renderings;
//! every value from a statement is escaped where it is rendered.
use serde::Serialize;

use super::statement::{Kind, Origin, Statement};
use super::store::Found;

/// Version of `evidence show --format json`.
pub const SCHEMA: u32 = 1;

/// What one request needs of a wheel: a GPU generation and a scale.
#[derive(Debug, Clone, Serialize)]
pub struct Need {
    /// `h100-multinode (pins.toml)`, or a recipe path.
    pub label: String,
    pub gpu: Option<String>,
    pub sm: Option<u32>,
    pub ep: Option<u32>,
    pub nodes: u32,
}

/// One statement as the boundary lists it.
#[derive(Debug, Clone, Serialize)]
pub struct Item {
    pub kind: Kind,
    pub origin: Origin,
    pub signer: String,
    pub time: String,
    /// MATCH, MISMATCH, or the reported outcome.
    pub result: String,
    /// What was judged on what machine, in one line.
    pub summary: String,
    pub url: Option<String>,
    pub file: String,
}

/// One line of the boundary: a need at one kind of the ladder.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub need: String,
    pub kind: Kind,
    /// `covered`, `partial` or `none`.
    pub status: &'static str,
    pub detail: String,
}

/// One variant's section.
#[derive(Debug, Clone, Serialize)]
pub struct Section {
    pub variant: String,
    pub arch: String,
    pub rev: String,
    /// The wheel file name and sha256, and where it was found; None when none was.
    pub wheel: Option<(String, String, String)>,
    pub statements: Vec<Item>,
    pub boundary: Vec<Line>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub schema: u32,
    pub sections: Vec<Section>,
    /// Statement files no trusted key signed: not counted.
    pub not_counted: Vec<String>,
}

/// The statements of one wheel, as items (strongest kind first, then newest).
pub fn items(found: &[&Found]) -> Vec<Item> {
    let mut v: Vec<Item> = found.iter().map(|f| item(f)).collect();
    v.sort_by(|a, b| b.kind.cmp(&a.kind).then(b.time.cmp(&a.time)));
    v
}

fn item(f: &Found) -> Item {
    let p = &f.statement.predicate;
    let result = match (&p.result, &p.reported) {
        (Some(o), _) => o.verdict.clone(),
        (None, Some(r)) => r.outcome.clone(),
        _ => String::new(),
    };
    Item {
        kind: p.kind,
        origin: p.origin,
        signer: f.signer.clone(),
        time: p.time.clone(),
        result,
        summary: summary(&f.statement),
        url: p.reported.as_ref().and_then(|r| r.url.clone()),
        file: f.path.display().to_string(),
    }
}

/// `EP16 · 2 nodes x 8 · h100 on 16 x NVIDIA H200 (sm_90), 2 nodes, 16 ranks; dispatch 310 GB/s`.
fn summary(s: &Statement) -> String {
    let p = &s.predicate;
    let mut parts = Vec::new();
    if let Some(r) = &p.request {
        let mut q = Vec::new();
        if let Some(ep) = r.ep {
            q.push(format!("EP{ep}"));
        }
        if let (Some(n), Some(g)) = (r.nodes, r.gpus_per_node) {
            q.push(format!("{n} x {g}"));
        }
        if let Some(g) = &r.gpu {
            q.push(g.clone());
        }
        if let Some(rc) = &r.recipe {
            q.push(format!("recipe {} sha256 {}", rc.path, &rc.sha256[..12]));
        }
        if !q.is_empty() {
            parts.push(q.join(" "));
        }
    }
    if let Some(m) = &p.machine {
        match &m.gpu_model {
            Some(g) => parts.push(format!(
                "on {} x {g} (sm {}), {} node(s), {} rank(s)",
                m.gpu_count,
                m.sm.iter().map(u32::to_string).collect::<Vec<_>>().join("/"),
                m.nodes,
                m.ranks
            )),
            None => parts.push(format!("read on an {} host, no GPU", m.host_arch)),
        }
        if !m.rdma.is_empty() {
            parts.push(format!("RDMA: {}", m.rdma.join("; ")));
        }
    }
    if let Some(o) = &p.result {
        let figs: Vec<String> = o
            .figures
            .iter()
            .filter(|f| f.name != "probe-total")
            .map(|f| format!("{} {:.2} {}", f.name, f.value, f.unit))
            .collect();
        if !figs.is_empty() {
            parts.push(figs.join(", "));
        }
    }
    if let Some(r) = &p.reported {
        if let Some(t) = &r.text {
            parts.push(t.lines().next().unwrap_or("").chars().take(120).collect());
        }
    }
    parts.join("; ")
}

/// Whether `f` is evidence for `need` at its kind: `Some(true)` covers it,
/// `Some(false)` covers it only on fewer nodes, `None` does not apply.
pub fn cover(f: &Found, need: &Need) -> Option<bool> {
    let p = &f.statement.predicate;
    if p.result.as_ref().is_some_and(|o| !o.matched()) {
        return None; // a MISMATCH proves nothing
    }
    let request = p.request.as_ref().map(|r| r.request()).unwrap_or_default();
    let req_sm = request.gpu.map(|g| g.sm());
    let req_nodes = request.nodes;
    match (p.origin, p.kind) {
        (Origin::Observed, Kind::Static) => {
            // a static verdict is about the request it judged
            let gpu_ok = need.sm.is_none() || req_sm == need.sm;
            let ep_ok = need.ep.is_none() || request.ep == need.ep;
            (gpu_ok && ep_ok && req_nodes.unwrap_or(1) == need.nodes).then_some(true)
        }
        (Origin::Observed, _) => {
            let m = p.machine.as_ref()?;
            if need.sm.is_some_and(|sm| !m.sm.contains(&sm)) {
                return None;
            }
            Some(m.nodes >= need.nodes)
        }
        (Origin::Reported, _) => {
            // a reported result counts on the GPU generation it names, and only there
            if need.sm.is_some() && req_sm != need.sm {
                return None;
            }
            Some(req_nodes.unwrap_or(1) >= need.nodes)
        }
    }
}

/// The boundary of one wheel's statements for `need`: one line per kind from static up.
pub fn boundary(found: &[&Found], need: &Need) -> Vec<Line> {
    let scale = if need.nodes > 1 { "multi-node" } else { "one-node" };
    Kind::ALL
        .iter()
        .filter(|k| **k >= Kind::Static)
        .map(|&kind| {
            let of_kind: Vec<Option<bool>> =
                found.iter().filter(|f| f.statement.predicate.kind == kind).map(|f| cover(f, need)).collect();
            let what = format!("{scale} {}", label(kind));
            let (status, detail) = if of_kind.contains(&Some(true)) {
                ("covered", format!("{what}: {} statement(s)", of_kind.iter().filter(|c| **c == Some(true)).count()))
            } else if of_kind.contains(&Some(false)) {
                ("partial", format!("{what}: only on fewer nodes ({})", kind.does_not_show()))
            } else if !of_kind.is_empty() {
                (
                    "none",
                    format!(
                        "{what}: no evidence ({} statement(s) for another GPU, request or a MISMATCH)",
                        of_kind.len()
                    ),
                )
            } else {
                ("none", format!("{what}: no evidence"))
            };
            Line { need: need.label.clone(), kind, status, detail }
        })
        .collect()
}

fn label(k: Kind) -> &'static str {
    match k {
        Kind::Configuration => "configuration",
        Kind::Static => "static probe",
        Kind::Kernel => "kernel round trip",
        Kind::DeepEpRoundTrip => "DeepEP round trip",
        Kind::DeepEpTests => "DeepEP test suite",
        Kind::Training => "training run",
    }
}

/// The aligned text for people (values escaped for a terminal or a CI log).
pub fn render_human(r: &Report) -> String {
    let safe = |s: &str| crate::output::log_safe(&s.replace('\n', " "));
    let mut out = String::new();
    for s in &r.sections {
        match &s.wheel {
            Some((name, sha, from)) => out.push_str(&format!(
                "{} @ {} ({})  {}  sha256 {}  ({})\n",
                s.variant,
                &s.rev[..7.min(s.rev.len())],
                s.arch,
                name,
                &sha[..16],
                safe(from)
            )),
            None => out.push_str(&format!(
                "{} @ {} ({})  no wheel found\n",
                s.variant,
                &s.rev[..7.min(s.rev.len())],
                s.arch
            )),
        }
        for i in &s.statements {
            out.push_str(&format!(
                "  {:<18}  {:<8}  {:<9}  {}  {}  {}{}\n",
                i.kind.as_str(),
                safe(&i.result),
                i.origin.as_str(),
                safe(&i.time),
                safe(&i.signer),
                safe(&i.summary),
                i.url.as_deref().map(|u| format!("  {}", safe(u))).unwrap_or_default()
            ));
        }
        for l in &s.boundary {
            out.push_str(&format!("  boundary {:<9} {}  [{}]\n", l.status, safe(&l.detail), safe(&l.need)));
        }
    }
    for f in &r.not_counted {
        out.push_str(&format!("not counted (no trusted signature): {}\n", safe(f)));
    }
    out
}

/// A pull-request comment: one table per variant, every value escaped so no
/// statement field can add Markdown, HTML, a mention, a link or a workflow command.
pub fn render_markdown(r: &Report) -> String {
    let mut out = String::from("### DeepEP evidence\n\n");
    for s in &r.sections {
        let wheel = match &s.wheel {
            Some((name, sha, _)) => format!("`{}` sha256 `{}`", code(name), &sha[..16]),
            None => "no wheel found".into(),
        };
        out.push_str(&format!(
            "**{}** @ `{}` ({}): {wheel}\n\n",
            md(&s.variant),
            code(&s.rev[..7.min(s.rev.len())]),
            md(&s.arch)
        ));
        out.push_str("| kind | result | origin | date | signer | what |\n|---|---|---|---|---|---|\n");
        for i in &s.statements {
            let what = match &i.url {
                Some(u) => format!("{} ({})", md(&i.summary), md(u)),
                None => md(&i.summary),
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {what} |\n",
                i.kind.as_str(),
                md(&i.result),
                i.origin.as_str(),
                md(&i.time),
                md(&i.signer)
            ));
        }
        for l in &s.boundary {
            out.push_str(&format!("| boundary | {} | | | | {} |\n", l.status, md(&l.detail)));
        }
        out.push('\n');
    }
    if !r.not_counted.is_empty() {
        out.push_str(&format!("{} statement file(s) not counted: no trusted signature.\n", r.not_counted.len()));
    }
    out
}

/// Markdown text: every character with a meaning in GitHub Markdown or HTML
/// backslash-escaped (`<` and `>` as entities), control characters and line
/// breaks as spaces, `@` broken so it cannot mention, `::` split.
pub fn md(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '@' => out.push_str("&#64;"),
            ':' => out.push_str("&#58;"),
            c if c.is_control() => out.push(' '),
            c if "\\`*_{}[]()#+-.!|~".contains(c) => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// Text inside a code span: no backticks, no control characters.
fn code(s: &str) -> String {
    s.chars().map(|c| if c == '`' || c.is_control() { '?' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn markdown_escaping_leaves_no_markup() {
        let e = super::md("<img src=x onerror=alert(1)> [x](javascript:1) @team\n::error::x **b** | c");
        for bad in ["<img", "](", "@team", "\n", "::", "**", " | "] {
            assert!(!e.contains(bad), "{bad:?} in {e}");
        }
    }
}
