//! The validation boundary: per variant, the wheel pins.toml's revision gives,
//! every trusted statement about its sha256 (by kind, machine, signer and
//! date), and what a request needs against what exists. Owns the judgement
//! "does this statement cover that need" ([`cover`]) and the three renderings.
//! Every value from a statement, pins.toml or the file system is a
//! [`Line`] in the row types (escaped when made), so no row can carry a line
//! break, a control character or a workflow command; Markdown escapes its
//! own markup on top ([`md`]).
use forge_os::line::Line;
use serde::Serialize;

use super::statement::{Origin, Statement};
use super::store::Found;
use forge_model::ladder::Kind;

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

/// One statement as the boundary lists it (a row: every value a [`Line`]).
#[derive(Debug, Clone, Serialize)]
pub struct Item {
    pub kind: Kind,
    pub origin: Origin,
    pub signer: Line,
    pub time: Line,
    /// MATCH, MISMATCH, or the reported outcome.
    pub result: Line,
    /// What was judged on what machine, in one line.
    pub summary: Line,
    pub url: Option<Line>,
    pub file: Line,
    /// What the statement's kind does not show, as the statement says it.
    pub does_not_show: Line,
}

/// One line of the boundary: a need at one kind of the ladder.
#[derive(Debug, Clone, Serialize)]
pub struct BoundaryLine {
    pub need: Line,
    pub kind: Kind,
    /// `covered`, `partial` or `none`.
    pub status: &'static str,
    pub detail: Line,
}

/// One variant's section.
#[derive(Debug, Clone, Serialize)]
pub struct Section {
    pub variant: Line,
    pub arch: Line,
    pub rev: Line,
    /// The wheel file name and sha256, and where it was found; None when none was.
    pub wheel: Option<(Line, Line, Line)>,
    pub statements: Vec<Item>,
    pub boundary: Vec<BoundaryLine>,
    /// The `configuration` line of each need (the boundary lists static up).
    pub configuration: Vec<BoundaryLine>,
    /// One line: what was run, on what, and what was not ([`summary_line`]).
    pub summary: Line,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub schema: u32,
    pub sections: Vec<Section>,
    /// Statement files no trusted key signed: not counted.
    pub not_counted: Vec<Line>,
}

/// The statements of one wheel, as items (strongest kind first, then newest, then by what they judged).
pub fn items(found: &[&Found]) -> Vec<Item> {
    let mut v: Vec<Item> = found.iter().map(|f| item(f)).collect();
    // Ties (two statements of one kind in one second) by what they judged: one order every run.
    v.sort_by(|a, b| b.kind.cmp(&a.kind).then(b.time.cmp(&a.time)).then(a.summary.cmp(&b.summary)));
    v
}

fn item(f: &Found) -> Item {
    let p = &f.statement.predicate;
    let result = match (&p.result, &p.reported) {
        (Some(o), _) => Line::new(&o.verdict),
        (None, Some(r)) => Line::new(&r.outcome),
        _ => Line::default(),
    };
    Item {
        kind: p.kind,
        origin: p.origin,
        signer: Line::new(&f.signer),
        time: Line::new(&p.time),
        result,
        summary: summary(&f.statement),
        url: p.reported.as_ref().and_then(|r| r.url.as_deref()).map(Line::new),
        file: Line::new(f.path.to_string_lossy()),
        does_not_show: Line::new(&p.does_not_show),
    }
}

/// `EP16 · 2 nodes x 8 · h100 on 16 x NVIDIA H200 (sm_90), 2 nodes, 16 ranks; dispatch 310 GB/s`.
fn summary(s: &Statement) -> Line {
    Line::new(summary_text(s))
}

/// [`summary`] before it is escaped (the statement's values as they are).
fn summary_text(s: &Statement) -> String {
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
            q.push(format!("recipe {} sha256 {}", rc.path, short(&rc.sha256, 12)));
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
pub fn boundary(found: &[&Found], need: &Need) -> Vec<BoundaryLine> {
    Kind::ALL.iter().filter(|k| **k >= Kind::Static).map(|&kind| line(found, need, kind)).collect()
}

/// The `configuration` line of the boundary for `need` (a reported recipe read for its request).
pub fn configuration(found: &[&Found], need: &Need) -> BoundaryLine {
    line(found, need, Kind::Configuration)
}

/// One line of the boundary: the statements of `kind` that cover `need`.
fn line(found: &[&Found], need: &Need, kind: Kind) -> BoundaryLine {
    let scale = if need.nodes > 1 { "multi-node" } else { "one-node" };
    {
        {
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
            BoundaryLine { need: Line::new(&need.label), kind, status, detail: Line::new(detail) }
        }
    }
}

/// One line for a reviewer: the strongest run the tool observed (what, on how
/// many of which GPU, how many ranks, and what it therefore does not cover),
/// and the kinds only reported. E.g. `runtime evidence: DeepEP round trip on
/// 1 x H200, one rank; nothing across GPUs or nodes`.
pub fn summary_line(found: &[&Found]) -> Line {
    let ran = found
        .iter()
        .filter(|f| f.statement.predicate.origin == Origin::Observed && f.statement.predicate.kind > Kind::Static)
        .filter(|f| f.statement.predicate.result.as_ref().is_none_or(|o| o.matched()))
        .filter_map(|f| f.statement.predicate.machine.as_ref().map(|m| (f.statement.predicate.kind, m)))
        .max_by_key(|(k, m)| (*k, m.nodes, m.ranks));
    let mut out = match ran {
        Some((kind, m)) => {
            let gpu = m.gpu_model.as_deref().unwrap_or("GPU");
            let gpu = gpu.strip_prefix("NVIDIA ").unwrap_or(gpu);
            let ranks = if m.ranks == 1 { "one rank".to_string() } else { format!("{} ranks", m.ranks) };
            let scope = if m.ranks <= 1 {
                "nothing across GPUs or nodes".to_string()
            } else if m.nodes <= 1 {
                "one node: nothing across nodes".to_string()
            } else {
                format!("across {} nodes", m.nodes)
            };
            format!("runtime evidence: {} on {} x {gpu}, {ranks}; {scope}", label(kind), m.gpu_count)
        }
        None => "runtime evidence: none (nothing observed running on a GPU)".to_string(),
    };
    let mut reported: Vec<Kind> = found
        .iter()
        .filter(|f| f.statement.predicate.origin == Origin::Reported)
        .map(|f| f.statement.predicate.kind)
        .collect();
    reported.sort();
    reported.dedup();
    if !reported.is_empty() {
        let names: Vec<&str> = reported.iter().map(|k| label(*k)).collect();
        out.push_str(&format!("; reported, not observed by the tool: {}", names.join(", ")));
    }
    Line::new(out)
}

/// The first `n` characters of `s` (never cut inside a character).
fn short(s: &str, n: usize) -> &str {
    s.char_indices().nth(n).map_or(s, |(at, _)| &s[..at])
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

/// The aligned text for people (every value a [`Line`]: escaped when made).
pub fn render_human(r: &Report) -> String {
    let mut out = String::new();
    for s in &r.sections {
        match &s.wheel {
            Some((name, sha, from)) => out.push_str(&format!(
                "{} @ {} ({})  {}  sha256 {}  ({})\n",
                s.variant,
                short(&s.rev, 7),
                s.arch,
                name,
                short(sha, 16),
                from
            )),
            None => out.push_str(&format!("{} @ {} ({})  no wheel found\n", s.variant, short(&s.rev, 7), s.arch)),
        }
        for i in &s.statements {
            out.push_str(&format!(
                "  {:<18}  {:<8}  {:<9}  {}  {}  {}{}\n",
                i.kind.as_str(),
                i.result,
                i.origin.as_str(),
                i.time,
                i.signer,
                i.summary,
                i.url.as_ref().map(|u| format!("  {u}")).unwrap_or_default()
            ));
        }
        for l in &s.boundary {
            out.push_str(&format!("  boundary {:<9} {}  [{}]\n", l.status, l.detail, l.need));
        }
    }
    for f in &r.not_counted {
        out.push_str(&format!("not counted (no trusted signature): {f}\n"));
    }
    out
}

/// A pull-request comment: per variant a one-line summary, a table of the
/// statements (a reported outcome in `what`, never in `result`; what each
/// kind does not show) and a table of the boundary per need, `configuration`
/// included. Every value is escaped so no statement field can add Markdown,
/// HTML, a mention, a link or a workflow command.
pub fn render_markdown(r: &Report) -> String {
    let mut out = String::from("### DeepEP evidence\n\n");
    for s in &r.sections {
        let wheel = match &s.wheel {
            Some((name, sha, from)) => format!("`{}` sha256 `{}` ({})", code(name), code(short(sha, 16)), md(from)),
            None => "no wheel found".into(),
        };
        out.push_str(&format!("**{}** @ `{}` ({}): {wheel}\n\n", md(&s.variant), code(short(&s.rev, 7)), md(&s.arch)));
        out.push_str(&format!("Summary: {}\n\n", md(&s.summary)));
        if !s.statements.is_empty() {
            out.push_str("| kind | result | origin | date | signer | what | does not show |\n");
            out.push_str("|---|---|---|---|---|---|---|\n");
            for i in &s.statements {
                out.push_str(&statement_row(i));
            }
            out.push('\n');
        }
        out.push_str("| need | kind | status | detail | does not show |\n|---|---|---|---|---|\n");
        for l in s
            .configuration
            .iter()
            .flat_map(|c| std::iter::once(c).chain(s.boundary.iter().filter(|b| b.need == c.need)))
        {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                md(&l.need),
                l.kind.as_str(),
                l.status,
                md(&l.detail),
                md(l.kind.does_not_show())
            ));
        }
        out.push('\n');
    }
    if !r.not_counted.is_empty() {
        out.push_str(&format!("{} statement file(s) not counted: no trusted signature.\n", r.not_counted.len()));
    }
    out
}

/// One statement's row: an observed verdict in `result`; a reported outcome
/// is someone's words, so `result` says `reported` and the words go to `what`.
fn statement_row(i: &Item) -> String {
    let (result, mut what) = match i.origin {
        Origin::Reported => ("reported".to_string(), format!("outcome \u{201c}{}\u{201d}", md(&i.result))),
        Origin::Observed => (md(&i.result), String::new()),
    };
    for part in [md(&i.summary), i.url.as_deref().map(md).unwrap_or_default()] {
        if !part.is_empty() {
            what = if what.is_empty() { part } else { format!("{what}; {part}") };
        }
    }
    format!(
        "| {} | {result} | {} | {} | {} | {what} | {} |\n",
        i.kind.as_str(),
        i.origin.as_str(),
        md(&i.time),
        md(&i.signer),
        md(&i.does_not_show)
    )
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
    use super::super::statement::{self, Judged, Predicate, Producer, Reported};
    use super::*;

    /// A real signed H200 DeepEP round trip (one rank, one node) from the fixtures.
    fn h200_round_trip() -> Found {
        let key =
            crate::cache::sign::PublicKey::parse(include_str!("../../../../tests/fixtures/evidence/h200.pub").trim())
                .unwrap();
        let env = include_bytes!("../../../../tests/fixtures/evidence/h200-deep-ep-round-trip.dsse.json");
        match statement::open(env, &[key]).unwrap() {
            statement::Opened::Trusted { signer, statement } => {
                Found { path: "ev/h200.dsse.json".into(), signer, statement }
            }
            o => panic!("{o:?}"),
        }
    }

    /// A reported statement about the same wheel, for a request of `nodes` nodes of EP16 h100.
    fn reported(of: &Found, kind: Kind, outcome: &str, text: Option<&str>, nodes: u32) -> Found {
        let mut s = of.statement.clone();
        let request = forge_model::topology::Request {
            gpu: Some(forge_model::pins::Gpu::H100),
            ep: Some(16),
            nodes: Some(nodes),
            gpus_per_node: Some(8),
            ..Default::default()
        };
        s.predicate = Predicate {
            kind,
            does_not_show: kind.does_not_show().into(),
            origin: Origin::Reported,
            producer: Producer {
                command: "evidence add".into(),
                mode: None,
                tool: "deepep-forge 0".into(),
                commit: None,
            },
            time: "2026-12-02T10:00:00Z".into(),
            request: Some(Judged::of(&request, None, str::to_string)),
            machine: None,
            result: None,
            reported: Some(Reported {
                outcome: outcome.into(),
                url: Some("https://ci.example/run/7".into()),
                text: text.map(String::from),
            }),
        };
        Found { path: format!("ev/{kind}.dsse.json").into(), signer: "team-1".into(), statement: s }
    }

    /// `evidence show --format markdown` for a 2-node variant: the summary
    /// line, a reported outcome outside `result` (escaped), what each kind does
    /// not show, a `configuration` line, and the boundary of the 2-node request
    /// (tests/fixtures/evidence/boundary-multinode.md).
    #[test]
    fn markdown_boundary_of_a_multinode_variant_is_the_golden_file() {
        let rt = h200_round_trip();
        let training = reported(&rt, Kind::Training, "PASS <b>@all</b> | 20/20 steps", Some("loss 2.1 at step 20"), 2);
        let config = reported(&rt, Kind::Configuration, "recipe resolved", None, 2);
        let found = vec![&rt, &training, &config];
        let need = Need {
            label: "demo-multinode (pins.toml)".into(),
            gpu: Some("h100".into()),
            sm: Some(90),
            ep: Some(16),
            nodes: 2,
        };
        let section = Section {
            variant: "demo-multinode".into(),
            arch: "x86_64".into(),
            rev: rt.statement.subject[0].digest.sha256.clone().into(),
            wheel: Some((
                rt.statement.subject[0].name.clone().into(),
                rt.sha256().into(),
                "the wheel cache; exact, unpatched".into(),
            )),
            statements: items(&found),
            boundary: boundary(&found, &need),
            configuration: vec![configuration(&found, &need)],
            summary: summary_line(&found),
        };
        let md = render_markdown(&Report { schema: SCHEMA, sections: vec![section], not_counted: vec![] });
        let golden = include_str!("../../../../tests/fixtures/evidence/boundary-multinode.md");
        if md != golden {
            let _ = std::fs::write(std::env::temp_dir().join("boundary-multinode.md"), &md);
        }
        assert_eq!(md, golden, "the new rendering is in the temp folder's boundary-multinode.md");
        assert!(md.contains(
            "Summary: runtime evidence&#58; DeepEP round trip on 1 x H200, one rank; nothing across GPUs or nodes"
        ));
        // The reported words are in `what`, escaped; `result` says only that they were reported.
        assert!(md.contains("| training | reported | reported |"), "{md}");
        assert!(!md.contains("<b>") && !md.contains("@all"), "{md}");
    }
    #[test]
    fn markdown_escaping_leaves_no_markup() {
        let e = super::md("<img src=x onerror=alert(1)> [x](javascript:1) @team\n::error::x **b** | c");
        for bad in ["<img", "](", "@team", "\n", "::", "**", " | "] {
            assert!(!e.contains(bad), "{bad:?} in {e}");
        }
    }
}
