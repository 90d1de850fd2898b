//! One piece of evidence about one wheel: an in-toto Statement v1 (subject:
//! the wheel's file name and sha256; predicate type [`PREDICATE_TYPE`]) inside
//! a DSSE envelope signed with the cache's ed25519 keys (`cache::sign`).
//!
//! What is signed is DSSE's pre-authentication encoding
//! `DSSEv1 <len(type)> <type> <len(payload)> <payload>` ([`pae`]) of the
//! payload type `application/vnd.in-toto+json` and the statement's bytes.
//! A reader checks the signature first, against the keys it trusts, and only
//! then parses the statement ([`open`]); a statement by no trusted key is not
//! read at all. Everything read is typed (unknown fields refused), bounded
//! (bytes, list lengths, text lengths, serde_json's recursion limit) and free
//! of control characters, so nothing in it can reach a terminal or a log raw.
//!
//! The signer's role is part of what is signed: `origin` is `observed` only
//! for statements `probe --record` made (`producer.command` is `probe`, with
//! the mode that matches the kind, the machine and the result as seen), and
//! `reported` for `evidence add` (an outcome, a URL, text; no machine, no
//! result). A statement whose origin disagrees with its producer or its
//! contents is refused, and changing `origin` breaks the signature, so a
//! reported statement can never be shown as observed. Owns the shape,
//! signing and checking; must not read or write files.
use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::cache::sign::{self, PublicKey, SecretKey};
use forge_model::ladder::Kind;
use forge_os::error::Failure;

const B64: base64::engine::general_purpose::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The DSSE payload type of an in-toto statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// The predicate type of this project's evidence, versioned (docs/evidence.md).
pub const PREDICATE_TYPE: &str = "https://deepep-forge.dev/evidence/v1";
/// The prefix every version of the predicate type shares.
pub const PREDICATE_FAMILY: &str = "https://deepep-forge.dev/evidence/";
/// The largest envelope read (a real one is a few KiB; 64 ranks' hosts fit easily).
pub const MAX_BYTES: u64 = 1 << 20;
/// The most rule rows, figures, ranks or links one statement may hold.
pub const MAX_ITEMS: usize = 1024;
/// The longest free text (evidence rows, reported text).
pub const MAX_TEXT: usize = 4096;
/// The longest short field (names, hosts, versions, URLs).
pub const MAX_SHORT: usize = 512;

/// Who saw it: the tool (`probe --record`) or someone reporting (`evidence add`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    Observed,
    Reported,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Observed => "observed",
            Origin::Reported => "reported",
        }
    }
}

/// The in-toto Statement v1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    #[serde(rename = "_type")]
    pub type_: String,
    pub subject: Vec<Subject>,
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    pub predicate: Predicate,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Subject {
    pub name: String,
    pub digest: Digest,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Digest {
    pub sha256: String,
}

/// The predicate (`https://deepep-forge.dev/evidence/v1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Predicate {
    pub kind: Kind,
    /// The kind's limits, as [`Kind::does_not_show`] says them when it was made.
    pub does_not_show: String,
    pub origin: Origin,
    pub producer: Producer,
    /// RFC 3339 UTC of when the statement was made.
    pub time: String,
    pub request: Option<Judged>,
    /// The machine as the tool observed it (observed statements only).
    pub machine: Option<Machine>,
    /// The verdict (observed statements only).
    pub result: Option<Outcome>,
    /// What someone reported (reported statements only).
    pub reported: Option<Reported>,
}

/// What made the statement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Producer {
    /// `probe` or `evidence add`.
    pub command: String,
    /// For `probe`: `static`, `image`, `run` or `run --deep-ep`.
    pub mode: Option<String>,
    /// `deepep-forge 0.1.0`.
    pub tool: String,
    /// The tool's git commit when it was built with one (`DEEPEP_FORGE_GIT_COMMIT`).
    pub commit: Option<String>,
}

/// The request judged: a topology, and the recipe it came from when one was read.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Judged {
    /// Where the request came from (`flags`, `preset h100-8g`, a recipe path).
    pub source: String,
    pub ep: Option<u32>,
    pub nodes: Option<u32>,
    pub gpus_per_node: Option<u32>,
    pub ranks_per_domain: Option<u32>,
    pub mnnvl: Option<bool>,
    pub gpu: Option<String>,
    pub recipe: Option<Recipe>,
}

impl Judged {
    /// The statement's form of `r` (`topology::Request` owns what a request
    /// is; this is its wire form, the one conversion to it). What a request
    /// carries only for the verdict's wording (the dispatcher, the notes) is
    /// not kept. Short fields are cut by `cut` (control characters, length).
    pub fn of(r: &forge_model::topology::Request, recipe: Option<Recipe>, cut: impl Fn(&str) -> String) -> Judged {
        // Every field named: a field added to Request is decided on here.
        let forge_model::topology::Request {
            source,
            ep,
            nodes,
            gpus_per_node,
            ranks_per_domain,
            mnnvl,
            gpu,
            dispatcher: _,
            defaults_follow_ep: _,
            notes: _,
        } = r;
        Judged {
            source: cut(source),
            ep: *ep,
            nodes: *nodes,
            gpus_per_node: *gpus_per_node,
            ranks_per_domain: *ranks_per_domain,
            mnnvl: *mnnvl,
            gpu: gpu.map(|g| g.to_string()),
            recipe,
        }
    }

    /// The request this statement judged, back as a `topology::Request` (a
    /// GPU name this build does not know is `None`: it matches no need).
    pub fn request(&self) -> forge_model::topology::Request {
        forge_model::topology::Request {
            source: self.source.clone().into(),
            ep: self.ep,
            nodes: self.nodes,
            gpus_per_node: self.gpus_per_node,
            ranks_per_domain: self.ranks_per_domain,
            mnnvl: self.mnnvl,
            gpu: self.gpu.as_deref().and_then(|g| g.parse().ok()),
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    pub path: String,
    pub sha256: String,
}

/// The machine as observed, never as claimed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Machine {
    /// `x86_64`, `aarch64`.
    pub host_arch: String,
    /// Distinct hosts of the run (1 for a static probe).
    pub nodes: u32,
    /// Processes of the run (0 for a static probe: nothing ran on a GPU).
    pub ranks: u32,
    /// Every rank's host and GPU (rank 0 first); empty for a static probe.
    pub rank_gpus: Vec<RankGpu>,
    /// GPU model of rank 0's node (`NVIDIA H200`), None when no GPU was used.
    pub gpu_model: Option<String>,
    pub gpu_count: u32,
    /// SM numbers of every GPU seen (90, 100).
    pub sm: Vec<u32>,
    /// CUDA driver API version (`13000`).
    pub driver: Option<String>,
    /// Peer access between the GPUs of rank 0's node.
    pub links: Vec<PeerLink>,
    /// NCCL and NVSHMEM as loaded by the run (None: not loaded or not known).
    pub nccl: Option<String>,
    pub nvshmem: Option<String>,
    /// The host's RDMA path as the probe read it for a request across NVLink
    /// domains (devices, ports, the registration path); empty otherwise and in
    /// older statements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rdma: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankGpu {
    pub rank: u32,
    pub host: String,
    pub gpu: String,
    pub sm: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PeerLink {
    pub from: i32,
    pub to: i32,
    pub access: bool,
    pub performance_rank: i32,
}

/// The verdict: MATCH/MISMATCH, every rule row, measured figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    /// `MATCH` or `MISMATCH`.
    pub verdict: String,
    pub rules: Vec<RuleRow>,
    pub figures: Vec<Figure>,
}

impl Outcome {
    pub fn matched(&self) -> bool {
        self.verdict == "MATCH"
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleRow {
    pub rule: String,
    /// `pass`, `warn`, `fail` or `skip`.
    pub status: String,
    pub evidence: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    pub name: String,
    pub value: f64,
    pub unit: String,
}

/// A result reported from outside the tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reported {
    /// `20/20 steps`.
    pub outcome: String,
    pub url: Option<String>,
    pub text: Option<String>,
}

/// The DSSE envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// base64 of the statement's bytes.
    pub payload: String,
    pub signatures: Vec<Signature>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    pub keyid: String,
    /// base64 of the 64-byte ed25519 signature over [`pae`].
    pub sig: String,
}

/// DSSE's pre-authentication encoding of `payload` under `payload_type`.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!("DSSEv1 {} {} {} ", payload_type.len(), payload_type, payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// The tool, as statements name it.
pub fn tool() -> String {
    concat!("deepep-forge ", env!("CARGO_PKG_VERSION")).to_string()
}

/// The tool's git commit, when the build was given one.
pub fn commit() -> Option<String> {
    option_env!("DEEPEP_FORGE_GIT_COMMIT").map(str::to_string)
}

/// A statement about the wheel `name` with `sha256`.
pub fn new(name: &str, sha256: &str, predicate: Predicate) -> Statement {
    Statement {
        type_: forge_wheel::attest::STATEMENT_TYPE.into(),
        subject: vec![Subject { name: name.into(), digest: Digest { sha256: sha256.into() } }],
        predicate_type: PREDICATE_TYPE.into(),
        predicate,
    }
}

/// Check every field, then sign: the envelope's JSON text (pretty, one trailing newline).
pub fn sign(s: &Statement, key: &SecretKey) -> Result<Vec<u8>, Failure> {
    validate(s)?;
    let payload = serde_json::to_vec(s).expect("plain JSON");
    let signed = key.sign(&pae(PAYLOAD_TYPE, &payload));
    let (keyid, sig) = signed.split_once(':').expect("NAME:BASE64");
    let env = Envelope {
        payload_type: PAYLOAD_TYPE.into(),
        payload: B64.encode(&payload),
        signatures: vec![Signature { keyid: keyid.into(), sig: sig.into() }],
    };
    let mut text = serde_json::to_vec_pretty(&env).expect("plain JSON");
    text.push(b'\n');
    Ok(text)
}

/// What reading an envelope gave.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // one per statement read, never stored in bulk
pub enum Opened {
    /// Signed by this trusted key; the statement checked.
    Trusted { signer: String, statement: Statement },
    /// No signature by a trusted key (names of the keys that did sign): not read further.
    NotTrusted(Vec<String>),
}

/// Check the envelope's signature against `trusted`, then parse and validate
/// the statement. A signature that claims a trusted key's name but does not
/// verify is a forgery: an error, like every malformed statement.
pub fn open(bytes: &[u8], trusted: &[PublicKey]) -> Result<Opened, Failure> {
    if bytes.len() as u64 > MAX_BYTES {
        return Err(Failure::usage(format!("{} bytes, more than the {MAX_BYTES} allowed", bytes.len())));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| Failure::usage("not UTF-8 text"))?;
    let env: Envelope = serde_json::from_str(text)
        .map_err(|e| Failure::usage(format!("not a DSSE envelope (payloadType, payload, signatures): {e}")))?;
    if env.payload_type != PAYLOAD_TYPE {
        return Err(Failure::usage(format!(
            "payloadType `{}` is not {PAYLOAD_TYPE}",
            forge_os::input::excerpt(&env.payload_type, 60)
        )));
    }
    if env.signatures.len() > 16 {
        return Err(Failure::usage(format!("{} signatures, at most 16 are read", env.signatures.len())));
    }
    let payload = B64.decode(&env.payload).map_err(|_| Failure::usage("the payload is not base64"))?;
    let sigs: Vec<String> = env.signatures.iter().map(|s| format!("{}:{}", s.keyid, s.sig)).collect();
    let signer = match sign::verify(trusted, &sigs, &pae(&env.payload_type, &payload)) {
        sign::Verdict::Trusted(name) => name,
        sign::Verdict::Unsigned => return Ok(Opened::NotTrusted(vec![])),
        sign::Verdict::Untrusted(names) => return Ok(Opened::NotTrusted(names)),
        sign::Verdict::Invalid(name) => {
            return Err(Failure::usage(format!(
                "the signature by `{name}` does not verify: the statement was changed after signing, or forged"
            )))
        }
    };
    let statement = parse(&payload)?;
    Ok(Opened::Trusted { signer, statement })
}

/// The statement's bytes, parsed: known types only, then typed and validated.
fn parse(payload: &[u8]) -> Result<Statement, Failure> {
    let text = std::str::from_utf8(payload).map_err(|_| Failure::usage("the payload is not UTF-8"))?;
    // serde_json stops at 128 levels of nesting: a deep document is an error, not a stack overflow.
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| Failure::usage(format!("the payload is not JSON: {e}")))?;
    let t = v["_type"].as_str().unwrap_or("(none)");
    if t != forge_wheel::attest::STATEMENT_TYPE {
        return Err(Failure::usage(format!(
            "_type `{}` is not {}",
            forge_os::input::excerpt(t, 80),
            forge_wheel::attest::STATEMENT_TYPE
        )));
    }
    let p = v["predicateType"].as_str().unwrap_or("(none)");
    if p != PREDICATE_TYPE {
        let why = if p.starts_with(PREDICATE_FAMILY) {
            "a version of the evidence predicate this deepep-forge does not read"
        } else {
            "not an evidence predicate"
        };
        return Err(Failure::usage(format!(
            "predicateType `{}`: {why} (this deepep-forge reads {PREDICATE_TYPE})",
            forge_os::input::excerpt(p, 80)
        ))
        .hint("read it with the deepep-forge version that wrote it"));
    }
    let s: Statement = serde_json::from_value(v)
        .map_err(|e| Failure::usage(format!("the statement does not have the v1 shape: {e}")))?;
    validate(&s)?;
    Ok(s)
}

/// Every field of a statement, checked (signing and reading alike).
pub fn validate(s: &Statement) -> Result<(), Failure> {
    let [subject] = &s.subject[..] else {
        return Err(Failure::usage(format!("{} subjects: evidence names exactly one wheel", s.subject.len())));
    };
    crate::cache::check_wheel_name(&subject.name)?;
    check_sha256(&subject.digest.sha256, "the subject's sha256")?;
    let p = &s.predicate;
    short(&p.time, "time")?;
    short(&p.producer.command, "producer.command")?;
    short(&p.producer.tool, "producer.tool")?;
    for o in [&p.producer.mode, &p.producer.commit].into_iter().flatten() {
        short(o, "producer")?;
    }
    text(&p.does_not_show, "doesNotShow")?;
    if let Some(r) = &p.request {
        check_request(r)?;
    }
    if let Some(m) = &p.machine {
        check_machine(m)?;
    }
    if let Some(o) = &p.result {
        check_outcome(o)?;
    }
    if let Some(r) = &p.reported {
        check_reported(r)?;
    }
    check_role(p)
}

/// The signer's role: observed statements are the probe's, with machine and
/// result; reported ones are `evidence add`'s, with an outcome and neither.
fn check_role(p: &Predicate) -> Result<(), Failure> {
    let refuse = |why: String| Err(Failure::usage(format!("claims `{}` but {why}", p.origin.as_str())));
    match p.origin {
        Origin::Observed => {
            if p.producer.command != "probe" {
                return refuse(format!(
                    "was made by `{}`: only `probe --record` observes",
                    forge_os::input::excerpt(&p.producer.command, 40)
                ));
            }
            let want = mode_kind(p.producer.mode.as_deref().unwrap_or(""));
            if want != Some(p.kind) {
                return refuse(format!(
                    "its kind `{}` is not what probe mode `{}` observes",
                    p.kind,
                    forge_os::input::excerpt(p.producer.mode.as_deref().unwrap_or("(none)"), 40)
                ));
            }
            if p.machine.is_none() || p.result.is_none() || p.reported.is_some() {
                return refuse("it lacks the machine or the result, or carries a reported outcome".into());
            }
        }
        Origin::Reported => {
            if p.producer.command != "evidence add" || p.reported.is_none() {
                return refuse("was not made by `evidence add` with a reported outcome".into());
            }
            if p.machine.is_some() || p.result.is_some() {
                return refuse("carries an observed machine or result".into());
            }
        }
    }
    Ok(())
}

/// The kind each `probe` mode observes.
pub fn mode_kind(mode: &str) -> Option<Kind> {
    match mode {
        "static" | "image" => Some(Kind::Static),
        "run" => Some(Kind::Kernel),
        "run --deep-ep" => Some(Kind::DeepEpRoundTrip),
        _ => None,
    }
}

fn check_request(r: &Judged) -> Result<(), Failure> {
    short(&r.source, "request.source")?;
    if let Some(g) = &r.gpu {
        short(g, "request.gpu")?;
    }
    if let Some(rc) = &r.recipe {
        short(&rc.path, "request.recipe.path")?;
        check_sha256(&rc.sha256, "request.recipe.sha256")?;
    }
    Ok(())
}

fn check_machine(m: &Machine) -> Result<(), Failure> {
    short(&m.host_arch, "machine.hostArch")?;
    count(m.rank_gpus.len(), "machine.rankGpus")?;
    count(m.links.len(), "machine.links")?;
    count(m.sm.len(), "machine.sm")?;
    for r in &m.rank_gpus {
        short(&r.host, "machine.rankGpus.host")?;
        short(&r.gpu, "machine.rankGpus.gpu")?;
    }
    count(m.rdma.len(), "machine.rdma")?;
    for r in &m.rdma {
        short(r, "machine.rdma")?;
    }
    for o in [&m.gpu_model, &m.driver, &m.nccl, &m.nvshmem].into_iter().flatten() {
        short(o, "machine")?;
    }
    Ok(())
}

fn check_outcome(o: &Outcome) -> Result<(), Failure> {
    if o.verdict != "MATCH" && o.verdict != "MISMATCH" {
        return Err(Failure::usage("result.verdict must be MATCH or MISMATCH"));
    }
    count(o.rules.len(), "result.rules")?;
    count(o.figures.len(), "result.figures")?;
    for r in &o.rules {
        short(&r.rule, "result.rules.rule")?;
        if !["pass", "warn", "fail", "skip"].contains(&r.status.as_str()) {
            return Err(Failure::usage("result.rules.status must be pass, warn, fail or skip"));
        }
        text(&r.evidence, "result.rules.evidence")?;
    }
    for f in &o.figures {
        short(&f.name, "result.figures.name")?;
        short(&f.unit, "result.figures.unit")?;
        if !f.value.is_finite() {
            return Err(Failure::usage("result.figures.value must be a finite number"));
        }
    }
    Ok(())
}

fn check_reported(r: &Reported) -> Result<(), Failure> {
    if r.outcome.trim().is_empty() {
        return Err(Failure::usage("reported.outcome is empty"));
    }
    short(&r.outcome, "the outcome")?;
    if let Some(u) = &r.url {
        check_url(u)?;
    }
    if let Some(t) = &r.text {
        text(t, "the text")?;
    }
    Ok(())
}

/// An `http(s)://` URL of plain printable ASCII without quotes, brackets or spaces.
pub fn check_url(u: &str) -> Result<(), Failure> {
    short(u, "the URL")?;
    let ok_scheme = u.starts_with("https://") || u.starts_with("http://");
    let ok_chars = u.bytes().all(|b| b.is_ascii_graphic() && !b"\"'<>()[]{}`\\|^".contains(&b));
    if !ok_scheme || !ok_chars || u.len() <= "https://".len() {
        return Err(Failure::usage(format!(
            "the URL `{}` must be http(s):// followed by printable ASCII without quotes, brackets, backslashes or spaces",
            forge_os::input::excerpt(u, 80)
        ))
        .hint("percent-encode such characters (%20 for a space, %28 for `(`)"));
    }
    Ok(())
}

fn check_sha256(s: &str, what: &str) -> Result<(), Failure> {
    if s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(())
    } else {
        Err(Failure::usage(format!("{what} `{}` is not 64 lowercase hex digits", forge_os::input::excerpt(s, 80))))
    }
}

fn count(n: usize, what: &str) -> Result<(), Failure> {
    if n > MAX_ITEMS {
        return Err(Failure::usage(format!("{what}: {n} items, at most {MAX_ITEMS}")));
    }
    Ok(())
}

fn short(s: &str, what: &str) -> Result<(), Failure> {
    bounded(s, what, MAX_SHORT)
}

fn text(s: &str, what: &str) -> Result<(), Failure> {
    bounded(s, what, MAX_TEXT)
}

/// Text of at most `max` bytes with no control characters (a tab and, in long
/// text, newlines aside) and no line that starts a CI workflow command.
fn bounded(s: &str, what: &str, max: usize) -> Result<(), Failure> {
    if s.len() > max {
        return Err(Failure::usage(format!("{what}: {} bytes, at most {max}", s.len())));
    }
    let newline_ok = max == MAX_TEXT;
    if let Some(c) = s.chars().find(|&c| c.is_control() && c != '\t' && !(newline_ok && c == '\n')) {
        return Err(Failure::usage(format!(
            "{what} holds the control character {} (terminal escapes and line tricks are refused): `{}`",
            c.escape_unicode(),
            forge_os::input::excerpt(s, 60)
        )));
    }
    if s.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with("::") || l.starts_with("##[")
    }) {
        return Err(Failure::usage(format!(
            "{what} has a line starting with `::` or `##[` (a CI workflow command): `{}`",
            forge_os::input::excerpt(s, 60)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judged_is_the_wire_form_of_a_topology_request() {
        let r = forge_model::topology::Request {
            source: "preset gb200-nvl72".into(),
            ep: Some(72),
            nodes: Some(18),
            gpus_per_node: Some(4),
            ranks_per_domain: Some(72),
            mnnvl: Some(true),
            gpu: Some("gb200".parse().unwrap()),
            notes: vec!["not kept".into()],
            ..Default::default()
        };
        let j = Judged::of(&r, None, str::to_string);
        let json = serde_json::to_value(&j).unwrap();
        let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["ep", "gpu", "gpusPerNode", "mnnvl", "nodes", "ranksPerDomain", "recipe", "source"]);
        let back = j.request();
        assert_eq!(
            (back.source, back.ep, back.nodes, back.gpus_per_node, back.ranks_per_domain, back.mnnvl, back.gpu),
            (r.source, r.ep, r.nodes, r.gpus_per_node, r.ranks_per_domain, r.mnnvl, r.gpu)
        );
    }

    fn reported() -> Statement {
        new(
            "deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl",
            &"a".repeat(64),
            Predicate {
                kind: Kind::Training,
                does_not_show: Kind::Training.does_not_show().into(),
                origin: Origin::Reported,
                producer: Producer { command: "evidence add".into(), mode: None, tool: tool(), commit: None },
                time: "2026-12-01T00:00:00Z".into(),
                request: None,
                machine: None,
                result: None,
                reported: Some(Reported { outcome: "20/20 steps".into(), url: None, text: None }),
            },
        )
    }

    #[test]
    fn pae_is_dsse_v1() {
        assert_eq!(pae("a/b", b"xyz"), b"DSSEv1 3 a/b 3 xyz".to_vec());
    }

    #[test]
    fn sign_open_and_tamper() {
        let sk = SecretKey::generate("ev-1").unwrap();
        let env = sign(&reported(), &sk).unwrap();
        match open(&env, &[sk.public()]).unwrap() {
            Opened::Trusted { signer, statement } => {
                assert_eq!(signer, "ev-1");
                assert_eq!(statement, reported());
            }
            o => panic!("{o:?}"),
        }
        assert_eq!(open(&env, &[]).unwrap(), Opened::NotTrusted(vec!["ev-1".into()]));
        // An upgrade to `observed` changes the payload: the signature no longer verifies.
        let mut e: Envelope = serde_json::from_slice(&env).unwrap();
        let p = String::from_utf8(B64.decode(&e.payload).unwrap()).unwrap().replace("\"reported\"", "\"observed\"");
        e.payload = B64.encode(p);
        let err = open(&serde_json::to_vec(&e).unwrap(), &[sk.public()]).unwrap_err();
        assert!(err.message.contains("does not verify"), "{}", err.message);
    }

    #[test]
    fn roles_and_fields_are_checked_before_signing() {
        let sk = SecretKey::generate("ev-1").unwrap();
        let mut s = reported();
        s.predicate.origin = Origin::Observed;
        assert!(sign(&s, &sk).unwrap_err().message.contains("only `probe --record` observes"));
        let mut s = reported();
        s.predicate.reported.as_mut().unwrap().text = Some("ok\n::error::pwned".into());
        assert!(sign(&s, &sk).unwrap_err().message.contains("workflow command"));
        let mut s = reported();
        s.predicate.reported.as_mut().unwrap().outcome = "\x1b]0;title\x07".into();
        assert!(sign(&s, &sk).unwrap_err().message.contains("control character"));
        assert!(check_url("javascript:alert(1)").is_err());
        assert!(check_url("https://ci.example.org/job/1").is_ok());
    }
}
