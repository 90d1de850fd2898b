//! The `lock check` Dockerfile rules over a [`Model`](super::model::Model):
//! DeepEP revisions (ARG/ENV defaults, `DeepEP.git@REV` URLs, `git checkout`
//! in RUN lines) against the intended revision per architecture, each stage's
//! build settings against pins.toml's variants (`dockerfile-variant`,
//! `dockerfile-platform`, `dockerfile-arch-list`, `dockerfile-build-undeclared`
//! with a ready-to-paste `[[variant]]`, settings that differ), the rdma-core
//! ref; one function per rule id. Must not read files or print.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::rc::Rc;

use forge_model::dockerfile::expand::*;
use forge_model::dockerfile::model::*;
use forge_model::findings::{Finding, Severity};
use forge_model::pins::{is_full_sha, Arch, ArchList, Pins, Transport, Variant};

pub(super) struct Checker<'a> {
    pub(super) file: &'a Path,
    pub(super) pins: Option<&'a Pins>,
    pub(super) revs: &'a BTreeMap<Arch, String>,
    pub(super) out: Vec<Finding>,
    /// (rule, line) already reported: a value is reported once, at the line that holds it.
    pub(super) seen: BTreeSet<(String, usize)>,
    /// Every value read as a DeepEP revision, as read, with the platform of
    /// its stage (`tokens` asks which text is the pin).
    pub(super) found: Vec<(String, Option<Arch>)>,
}

impl<'a> Checker<'a> {
    pub(super) fn new(file: &'a Path, pins: Option<&'a Pins>, revs: &'a BTreeMap<Arch, String>) -> Checker<'a> {
        Checker { file, pins, revs, out: Vec::new(), seen: BTreeSet::new(), found: Vec::new() }
    }
}

impl Checker<'_> {
    pub(super) fn push(&mut self, f: Finding) {
        let key = (f.rule.to_string(), f.line.unwrap_or(0));
        if self.seen.insert(key) {
            self.out.push(f);
        }
    }

    pub(super) fn def(&mut self, d: &Rc<Def>, platform: Option<Arch>) {
        let Some(v) = d.value.as_deref() else { return };
        let upper = d.name.to_ascii_uppercase();
        let src = d.source();
        if (upper.contains("DEEPEP") || upper.contains("DEEP_EP"))
            && ["REV", "REF", "COMMIT", "SHA"].iter().any(|s| upper.ends_with(s))
        {
            self.rev(v.trim(), src.line, &d.describe(), platform);
        } else if let Some(r) = url_rev(v) {
            self.rev(&r, src.line, &d.describe(), platform);
        }
        if upper.contains("RDMA_CORE") && ["REF", "TAG", "VERSION"].iter().any(|s| upper.ends_with(s)) {
            if let Some(rc) = self.pins.and_then(|p| p.rdma_core.as_ref()) {
                if v.trim() != rc.git_ref {
                    let f = Finding::new(
                        "dockerfile-rdma-core-ref",
                        Severity::Error,
                        self.file,
                        format!("{} builds rdma-core `{v}`, pins.toml [rdma_core] says `{}`", d.describe(), rc.git_ref),
                    )
                    .line(src.line)
                    .expected_found(&rc.git_ref, v)
                    .fix(format!(
                        "set {}={} at {}:{}",
                        src.name,
                        rc.git_ref,
                        self.file.display(),
                        src.line
                    ));
                    self.push(f);
                }
            }
        }
    }

    /// `dockerfile-unverifiable`: a DeepEP setting goes through a shell
    /// expansion this reader does not evaluate: never "ok", an error saying so.
    pub(super) fn unverifiable(&mut self, what: &str, expr: &str, line: usize) {
        let f = Finding::new(
            "dockerfile-unverifiable",
            Severity::Error,
            self.file,
            format!(
                "cannot verify: {what} uses `{}`, an expansion deepep-forge does not evaluate (not POSIX sh: the image's shell decides what DeepEP is built)",
                forge_os::input::excerpt(expr, 80)
            ),
        )
        .line(line)
        .fix(format!(
            "write the DeepEP revision and build settings as plain values (`ARG DEEPEP_REV=<full sha>`, then `${{DEEPEP_REV}}`) at {}:{line}",
            self.file.display()
        ));
        self.push(f);
    }

    /// `dockerfile-unverifiable`: a value that holds (or is) DeepEP's revision
    /// in a form this reader cannot read as the pin (a command substitution,
    /// the revision joined with other text): an error naming the line, never silence.
    pub(super) fn unread(&mut self, what: &str, value: &str, why: &str, line: usize) {
        let f = Finding::new(
            "dockerfile-unverifiable",
            Severity::Error,
            self.file,
            format!(
                "cannot verify: {what} is `{}`: {why}, so deepep-forge cannot tell which DeepEP revision the image builds",
                forge_os::input::excerpt(value, 120)
            ),
        )
        .line(line)
        .fix(format!(
            "write DeepEP's revision as a plain value (`ARG DEEPEP_REV=<full sha>`, then `${{DEEPEP_REV}}`) at {}:{line}",
            self.file.display()
        ));
        self.push(f);
    }

    pub(super) fn unverifiable_def(&mut self, u: &Unverifiable) {
        let upper = u.name.to_ascii_uppercase();
        let deepep = ["DEEPEP", "DEEP_EP", "ARCH_LIST", "HYBRID_EP", "USE_NIXL", "RDMA_CORE", "VARIANT"];
        if deepep.iter().any(|k| upper.contains(k)) {
            self.unverifiable(&format!("{} ({}, line {})", u.name, u.kw, u.line), &u.expr, u.line);
        }
    }

    pub(super) fn run(&mut self, r: &Run, platform: Option<Arch>) {
        let lower = r.text.to_ascii_lowercase();
        if !(lower.contains("deepep") || lower.contains("deep_ep") || lower.contains("deep-ep")) {
            return;
        }
        if let Some(expr) = r.unverifiable.first() {
            self.unverifiable(&format!("RUN (line {})", r.line), expr, r.line);
        }
        if let Some(rev) = url_rev(&r.text) {
            // A rev that comes from a variable is reported at the line that holds it.
            let from = r
                .words
                .iter()
                .filter(|(w, _)| url_rev(w).as_deref() == Some(rev.as_str()))
                .flat_map(|(_, refs)| refs.iter())
                // The value itself, not one a shell expansion changed on the way (`${REV%?}`).
                .find(|d| {
                    d.value.as_deref().is_some_and(|v| v.trim() == rev || url_rev(v).as_deref() == Some(rev.as_str()))
                });
            match from {
                Some(d) => self.rev(&rev, d.source().line, &d.describe(), platform),
                None => self.rev(&rev, r.line, &format!("RUN (line {})", r.line), platform),
            }
        }
        // `git [-C dir] checkout [-q|--detach|-f] <rev>`, `git reset --hard <rev>`, per shell command.
        let mut git = false;
        let mut i = 0;
        while i < r.words.len() {
            let w = r.words[i].0.as_str();
            if matches!(w, "&&" | "||" | ";" | "|") || w.ends_with(';') {
                git = false;
            } else if w == "git" {
                git = true;
            } else if git && (w == "checkout" || (w == "reset" && r.words.get(i + 1).is_some_and(|n| n.0 == "--hard")))
            {
                let target = r.words[i + 1..].iter().find(|(t, _)| !t.starts_with('-'));
                if let Some((t, refs)) = target {
                    let t = t.trim_end_matches(';');
                    match refs.iter().find(|d| d.value.as_deref() == Some(t)) {
                        Some(d) => self.rev(t, d.source().line, &d.describe(), platform),
                        None => self.rev(t, r.line, &format!("`git {w}` in RUN (line {})", r.line), platform),
                    }
                }
                git = false;
            }
            i += 1;
        }
    }

    /// Compare one DeepEP rev with the intended revs.
    pub(super) fn rev(&mut self, found: &str, line: usize, what: &str, platform: Option<Arch>) {
        self.found.push((found.to_string(), platform));
        if found.contains("$(") || found.contains('`') {
            return self.unread(what, found, "a command substitution", line);
        }
        if found.is_empty() || found.contains('$') || self.revs.is_empty() {
            return;
        }
        let wanted: Vec<(Arch, &String)> = match platform {
            Some(a) => self.revs.get(&a).map(|r| vec![(a, r)]).unwrap_or_default(),
            None => self.revs.iter().map(|(a, r)| (*a, r)).collect(),
        };
        if wanted.is_empty() {
            return;
        }
        let mut by_rev: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (a, r) in &wanted {
            by_rev.entry(r.as_str()).or_default().push(a.as_str());
        }
        let expected = by_rev.iter().map(|(r, a)| format!("{r} ({})", a.join(", "))).collect::<Vec<_>>().join(", ");
        let fix_to = |r: &str| rev_fix(self.file, line, found, r);
        let hex = found.bytes().all(|b| b.is_ascii_hexdigit());
        let f = if hex && found.len() < 40 && found.len() >= 4 {
            let full = wanted.iter().find(|(_, r)| r.starts_with(&found.to_ascii_lowercase())).map(|(_, r)| r.as_str());
            let target = full.unwrap_or(wanted[0].1);
            Finding::new(
                "dockerfile-rev",
                Severity::Error,
                self.file,
                format!(
                    "{what} names DeepEP by the short sha `{found}`: full sha required (a short sha is ambiguous and is not what uv.lock and pins.toml record){}",
                    if full.is_some() { "" } else { "; it is not a prefix of the pin either" }
                ),
            )
            .expected_found(expected, found)
            .fix(fix_to(target))
        } else if !is_full_sha(found) {
            Finding::new(
                "dockerfile-rev",
                Severity::Error,
                self.file,
                format!("{what} names DeepEP by `{found}`, a branch or tag, not a commit: the image would build whatever it points to at build time"),
            )
            .expected_found(expected, found)
            .fix(fix_to(wanted[0].1))
        } else {
            let bad: Vec<&(Arch, &String)> = wanted.iter().filter(|(_, r)| r.as_str() != found).collect();
            if bad.is_empty() {
                return;
            }
            let mut msg = format!("{what} builds DeepEP {found}, ");
            if bad.len() < wanted.len() {
                let ok: Vec<&str> =
                    wanted.iter().filter(|(_, r)| r.as_str() == found).map(|(a, _)| a.as_str()).collect();
                msg.push_str(&format!(
                    "which is the {} pin but not the {} one ({}); the Dockerfile names no platform (`FROM --platform=...`), so it must match every architecture's pin",
                    ok.join("/"),
                    bad.iter().map(|(a, _)| a.as_str()).collect::<Vec<_>>().join("/"),
                    bad.iter().map(|(_, r)| r.as_str()).collect::<Vec<_>>().join(", ")
                ));
            } else {
                msg.push_str("not the pinned revision");
            }
            let mut f = Finding::new("dockerfile-rev", Severity::Error, self.file, msg)
                .expected_found(expected, found)
                .fix(fix_to(bad[0].1));
            if bad.len() == 1 {
                f = f.arch(bad[0].0);
            }
            f
        };
        self.push(f.line(line));
    }

    /// One stage's build settings against the variants of pins.toml: the
    /// named variant (`dockerfile-variant`, `dockerfile-platform`), then the
    /// settings judged together (`dockerfile-arch-list`, `dockerfile-multinode`,
    /// `dockerfile-transport`, `dockerfile-rdma-core-home`) against the named
    /// variant, or `dockerfile-build-undeclared` when no variant is named and
    /// none builds them.
    pub(super) fn config(&mut self, cfg: &Config, platform: Option<Arch>) {
        let Some(pins) = self.pins else { return };
        let Some(named) = self.dockerfile_variant(pins, cfg) else { return };
        self.dockerfile_platform(named, platform, cfg);
        let Some(Settings { list, is_multi, nixl, rdma, fields }) = self.settings(cfg) else { return };
        let candidates: Vec<&Variant> = match named {
            Some(v) => vec![v],
            None => pins.variants.iter().filter(|v| platform.is_none_or(|p| v.arch == p)).collect(),
        };
        let Some((best, diffs)) = closest(&candidates, &fields) else { return };
        if diffs.is_empty() {
            return;
        }
        match named {
            Some(v) => self.settings_differ(v, best, diffs),
            None => {
                let build = Build {
                    list: list.as_ref().map(|(_, l)| l.clone()),
                    multinode: is_multi,
                    nixl: nixl.is_some_and(|(_, n)| n),
                    rdma_home: rdma.map(|d| value(d).to_string()),
                };
                self.dockerfile_build_undeclared(pins, &build, &fields, platform)
            }
        }
    }

    /// A stage's DeepEP build settings, each a field a variant must agree with;
    /// `None` when it sets neither an arch list nor the multinode flag.
    pub(super) fn settings<'c>(&mut self, cfg: &'c Config) -> Option<Settings<'c>> {
        let list = self.dockerfile_arch_list(cfg);
        let multinode = cfg.multinode.as_ref().map(|d| (d, truthy(value(d))));
        let nixl = cfg.nixl.as_ref().map(|d| (d, truthy(value(d))));
        let is_multi = multinode.is_some_and(|(_, m)| m);
        // RDMA_CORE_HOME and USE_NIXL only matter to a multinode build.
        let rdma = cfg.rdma_home.as_ref().filter(|_| is_multi && !nixl.is_some_and(|(_, n)| n));
        let nixl = nixl.filter(|_| is_multi);
        if list.is_none() && multinode.is_none() {
            return None;
        }
        // Each present setting is a field; a variant matches when all agree.
        let fields: Vec<Field> = [
            list.as_ref().map(|(d, l)| arch_list_field(d, l)),
            multinode.map(|(d, m)| dockerfile_multinode(d, m)),
            nixl.map(|(d, n)| dockerfile_transport(d, n)),
            rdma.map(dockerfile_rdma_core_home),
        ]
        .into_iter()
        .flatten()
        .collect();
        Some(Settings { list, is_multi, nixl, rdma, fields })
    }

    /// `dockerfile-variant`: the variant a stage names must be declared.
    /// `Some(None)`: no variant named; `None`: an unknown one (reported).
    pub(super) fn dockerfile_variant<'p>(&mut self, pins: &'p Pins, cfg: &Config) -> Option<Option<&'p Variant>> {
        let Some(d) = &cfg.variant else { return Some(None) };
        if let Some(v) = pins.variants.iter().find(|v| v.name == value(d)) {
            return Some(Some(v));
        }
        let names: Vec<&str> = pins.variants.iter().map(|v| v.name.as_str()).collect();
        let f = Finding::new(
            "dockerfile-variant",
            Severity::Error,
            self.file,
            format!("{} names variant `{}`, which {} does not declare", d.describe(), value(d), pins.path.display()),
        )
        .line(d.source().line)
        .fix(format!("use one of: {}", names.join(", ")));
        self.push(f);
        None
    }

    /// `dockerfile-platform`: the named variant's architecture is the stage's `--platform`.
    pub(super) fn dockerfile_platform(&mut self, named: Option<&Variant>, platform: Option<Arch>, cfg: &Config) {
        let (Some(v), Some(p), Some(d)) = (named, platform, &cfg.variant) else { return };
        if v.arch == p {
            return;
        }
        let f = Finding::new(
            "dockerfile-platform",
            Severity::Error,
            self.file,
            format!(
                "{} names variant `{}` ({}), but the stage is built for {}",
                d.describe(),
                v.name,
                v.arch,
                p.docker_platform()
            ),
        )
        .line(d.source().line)
        .expected_found(v.arch.docker_platform(), p.docker_platform());
        self.push(f);
    }

    /// `dockerfile-arch-list` (the list itself): it must parse as pins.toml's
    /// lists do; the parsed list, compared with variants by [`arch_list_field`].
    pub(super) fn dockerfile_arch_list<'c>(&mut self, cfg: &'c Config) -> Option<(&'c Rc<Def>, ArchList)> {
        let d = cfg.arch_list.as_ref()?;
        match value(d).parse::<ArchList>() {
            Ok(l) => Some((d, l)),
            Err(e) => {
                let f =
                    Finding::new("dockerfile-arch-list", Severity::Error, self.file, format!("{}: {e}", d.describe()))
                        .line(d.source().line)
                        .fix("write the CUDA archs as pins.toml does, e.g. \"9.0\" or \"10.0\"");
                self.push(f);
                None
            }
        }
    }

    /// `dockerfile-build-undeclared`: the Dockerfile decides its own build and
    /// no variant builds it: declare it, never narrow it to a variant it is not.
    pub(super) fn dockerfile_build_undeclared(
        &mut self,
        pins: &Pins,
        build: &Build,
        fields: &[Field],
        platform: Option<Arch>,
    ) {
        let settings = settings_of(fields);
        let at = fields[0].def.source();
        let archs: Vec<Arch> = match platform {
            Some(p) => vec![p],
            None => pins.pins.keys().copied().collect(),
        };
        let blocks: Vec<String> = archs.iter().map(|a| build.variant_block(pins, *a, self.file, at.line)).collect();
        let msg = format!(
            "{} builds DeepEP with {settings} ({}): no variant in {} builds that{}, so pins.toml does not describe the wheel this image ships",
            self.file.display(),
            fields.iter().map(|f| f.def.describe()).collect::<Vec<_>>().join("; "),
            pins.path.display(),
            platform.map(|p| format!(" for {}", p.docker_platform())).unwrap_or_default(),
        );
        // The tool lays out the block; its values are TOML strings (escaped by `toml`), so each
        // of its rows is one Line and no value adds a row.
        let head = format!(
            "declare the build in {} ({}), add:",
            pins.path.display(),
            if archs.len() > 1 {
                "one variant per platform; the stage names none, so every pinned architecture"
            } else {
                "one variant"
            },
        );
        let rows = std::iter::once(head).chain(blocks.join("\n").lines().map(str::to_string).collect::<Vec<_>>());
        let fix = forge_os::line::Lines::new(rows.map(forge_os::line::Line::new));
        let mut f = Finding::new("dockerfile-build-undeclared", Severity::Error, self.file, msg)
            .line(at.line)
            .expected_found("a [[variant]] with this build", settings)
            .fix(fix);
        if let Some(p) = platform {
            f = f.arch(p);
        }
        self.push(f);
    }

    /// One finding per setting that differs from the variant the stage names,
    /// under the setting's rule id (from its [`Field`]).
    pub(super) fn settings_differ(&mut self, named: &Variant, best: &Variant, diffs: Vec<(&Field, String)>) {
        for (field, expected) in diffs {
            let (d, found) = (field.def, &field.found);
            let src = d.source();
            let msg = format!(
                "{} = {found:?}, but the variant it names, `{}`, builds with {expected:?}",
                d.describe(),
                named.name
            );
            let fix = format!(
                "set {}={expected:?} at {}:{} to build `{}`",
                src.name,
                self.file.display(),
                src.line,
                best.name
            );
            let f = Finding::new(field.rule, Severity::Error, self.file, msg)
                .line(src.line)
                .expected_found(expected, found.clone())
                .fix(fix)
                .arch(best.arch);
            self.push(f);
        }
    }
}

/// One build setting of a stage: its rule id, where it is set, its value, and
/// what a variant would need instead (`None`: the variant agrees).
pub(super) struct Field<'d> {
    pub(super) rule: &'static str,
    pub(super) def: &'d Rc<Def>,
    pub(super) found: String,
    pub(super) differs: Differs<'d>,
}

/// A stage's build settings (see `Checker::settings`).
pub(super) struct Settings<'c> {
    pub(super) list: Option<(&'c Rc<Def>, ArchList)>,
    pub(super) is_multi: bool,
    pub(super) nixl: Option<(&'c Rc<Def>, bool)>,
    pub(super) rdma: Option<&'c Rc<Def>>,
    pub(super) fields: Vec<Field<'c>>,
}

/// What a variant would need instead of a stage's setting (`None`: it agrees).
pub(super) type Differs<'d> = Box<dyn Fn(&Variant) -> Option<String> + 'd>;

/// `dockerfile-arch-list` (against a variant): the same archs, as sets.
pub(super) fn arch_list_field<'d>(d: &'d Rc<Def>, l: &ArchList) -> Field<'d> {
    let mine = sorted_list(l);
    let differs = move |v: &Variant| (sorted_list(&v.cuda_arch_list) != mine).then(|| v.cuda_arch_list.to_env());
    Field { rule: "dockerfile-arch-list", def: d, found: l.to_env(), differs: Box::new(differs) }
}

/// `dockerfile-multinode`: HYBRID_EP_MULTINODE as the variant's `multinode`.
pub(super) fn dockerfile_multinode(d: &Rc<Def>, m: bool) -> Field<'_> {
    let differs = move |v: &Variant| (v.multinode != m).then(|| if v.multinode { "1" } else { "0" }.to_string());
    Field { rule: "dockerfile-multinode", def: d, found: value(d).to_string(), differs: Box::new(differs) }
}

/// `dockerfile-transport`: USE_NIXL as the variant's transport (multinode builds).
pub(super) fn dockerfile_transport(d: &Rc<Def>, n: bool) -> Field<'_> {
    let differs = move |v: &Variant| {
        (v.multinode && (v.transport == Transport::Nixl) != n)
            .then(|| if v.transport == Transport::Nixl { "1" } else { "0" }.to_string())
    };
    Field { rule: "dockerfile-transport", def: d, found: value(d).to_string(), differs: Box::new(differs) }
}

/// `dockerfile-rdma-core-home`: RDMA_CORE_HOME as a DOCA multinode variant's.
pub(super) fn dockerfile_rdma_core_home(d: &Rc<Def>) -> Field<'_> {
    let mine = value(d).trim_end_matches('/').to_string();
    let differs = move |v: &Variant| {
        let theirs = v.rdma_core_home.as_deref().map(|h| h.trim_end_matches('/'));
        (v.multinode && v.transport == Transport::Doca && theirs != Some(mine.as_str()))
            .then(|| v.rdma_core_home.clone().unwrap_or_else(|| "(unset)".into()))
    };
    Field { rule: "dockerfile-rdma-core-home", def: d, found: value(d).to_string(), differs: Box::new(differs) }
}

/// The candidate closest to the stage's settings and the fields it differs in.
/// The arch list and the multinode flag shape the binary: a variant that
/// differs in them is farther.
pub(super) fn closest<'v, 'f, 'd>(
    candidates: &[&'v Variant],
    fields: &'f [Field<'d>],
) -> Option<(&'v Variant, Vec<(&'f Field<'d>, String)>)> {
    let weight = |f: &Field| if matches!(f.rule, "dockerfile-arch-list" | "dockerfile-multinode") { 2 } else { 1 };
    candidates
        .iter()
        .map(|v| (*v, fields.iter().filter_map(|f| (f.differs)(v).map(|exp| (f, exp))).collect::<Vec<_>>()))
        .min_by_key(|(_, d)| d.iter().map(|(f, _)| weight(f)).sum::<u32>())
}

/// `NAME="value", ...` of every field, for messages.
pub(super) fn settings_of(fields: &[Field]) -> String {
    fields.iter().map(|f| format!("{}={:?}", f.def.name, f.found)).collect::<Vec<_>>().join(", ")
}

/// What a Dockerfile stage builds, as pins.toml would declare it.
pub(super) struct Build {
    /// None: the stage sets no arch list (DeepEP's setup.py then builds 9.0).
    pub(super) list: Option<ArchList>,
    pub(super) multinode: bool,
    pub(super) nixl: bool,
    pub(super) rdma_home: Option<String>,
}

impl Build {
    /// A ready-to-paste `[[variant]]` table for `arch`, named after the Dockerfile.
    pub(super) fn variant_block(&self, pins: &Pins, arch: Arch, file: &Path, line: usize) -> String {
        let mut name = format!("dockerfile-{arch}");
        let mut n = 1;
        while pins.variants.iter().any(|v| v.name == name) {
            n += 1;
            name = format!("dockerfile-{arch}-{n}");
        }
        let toml_str = |s: &str| toml::Value::String(s.to_string()).to_string();
        let mut b = format!(
            "[[variant]]\nname = \"{name}\"\ndescription = {}\narch = \"{arch}\"\n",
            toml_str(&format!("as {}:{line} builds it", file.display()))
        );
        match &self.list {
            Some(l) => b.push_str(&format!("cuda_arch_list = {}\n", toml_str(&l.to_env()))),
            None => b.push_str("cuda_arch_list = \"9.0\"                 # the stage sets none: DeepEP's default\n"),
        }
        b.push_str(&format!("multinode = {}\n", self.multinode));
        if self.multinode {
            b.push_str(&format!("transport = \"{}\"\n", if self.nixl { "nixl" } else { "doca" }));
            if let Some(h) = self.rdma_home.as_deref().filter(|_| !self.nixl) {
                b.push_str(&format!("rdma_core_home = {}\n", toml_str(h)));
            }
        }
        b
    }
}

pub(super) fn sorted_list(l: &ArchList) -> Vec<String> {
    let mut v: Vec<String> = l.0.iter().map(|a| a.to_string()).collect();
    v.sort();
    v
}

/// The rev of a `.../DeepEP.git@<rev>` (or `DeepEP@<rev>`) URL in `s`, if any.
pub(super) fn url_rev(s: &str) -> Option<String> {
    let lower = s.to_ascii_lowercase();
    for pat in ["deepep.git@", "deepep@"] {
        if let Some(p) = lower.find(pat) {
            let rest = &s[p + pat.len()..];
            let rev: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | '$' | '{' | '}'))
                .collect();
            return (!rev.is_empty()).then_some(rev);
        }
    }
    None
}

/// The fix for a Dockerfile naming `found` at `line` where the pin is `rev`: a command that
/// writes it (`sed -i` on that line only) when `found` is a plain word, else the words.
fn rev_fix(file: &std::path::Path, line: usize, found: &str, rev: &str) -> String {
    let plain = !found.is_empty() && found.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if plain && line > 0 {
        let path = forge_os::printer::shell_word(&file.display().to_string());
        format!("sed -i '{line}s/{}/{rev}/' {path}", found.replace('.', "\\."))
    } else {
        format!("write the full pinned sha {rev} at {}:{line}", file.display())
    }
}
