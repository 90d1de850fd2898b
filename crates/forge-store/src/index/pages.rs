//! The static pages of one variant's index, rendered from its manifest:
//! `simple/index.html` + `simple/index.json` (the project list) and
//! `simple/deep-ep/index.html` + `index.json` (PEP 503 HTML with
//! `#sha256=` fragments and PEP 658/714 `data-core-metadata` /
//! `data-dist-info-metadata`; PEP 691 JSON, api-version 1.1, with `hashes`,
//! `core-metadata`, `size`, `versions`). Wheels, `.metadata` and
//! `.intoto.json` files lie next to the project page, so every link is a bare
//! file name. Pure: same manifest, same bytes. Must not read or write files.
use serde_json::json;

use super::manifest::{Manifest, PROJECT};

/// The media type of the JSON pages (PEP 691).
pub const JSON_TYPE: &str = "application/vnd.pypi.simple.v1+json";

/// `(path under <variant>/, bytes)` of every page.
pub fn render(m: &Manifest) -> Vec<(String, Vec<u8>)> {
    vec![
        ("simple/index.html".into(), project_list_html().into_bytes()),
        (
            "simple/index.json".into(),
            json_bytes(&json!({ "meta": { "api-version": "1.1" }, "projects": [{ "name": PROJECT }] })),
        ),
        (format!("simple/{PROJECT}/index.html"), project_html(m).into_bytes()),
        (format!("simple/{PROJECT}/index.json"), project_json(m)),
    ]
}

fn json_bytes(v: &serde_json::Value) -> Vec<u8> {
    let mut b = serde_json::to_vec_pretty(v).expect("plain JSON");
    b.push(b'\n');
    b
}

fn project_list_html() -> String {
    format!(
        "<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"1.1\">\n    <title>Simple index</title>\n  </head>\n  <body>\n    <a href=\"{PROJECT}/\">{PROJECT}</a>\n  </body>\n</html>\n"
    )
}

/// Wheels sorted by file name, so the page does not depend on publish order.
fn sorted(m: &Manifest) -> Vec<&super::manifest::WheelEntry> {
    let mut w: Vec<_> = m.wheels.iter().collect();
    w.sort_by(|a, b| a.wheel.cmp(&b.wheel));
    w
}

fn project_html(m: &Manifest) -> String {
    let mut s = format!(
        "<!DOCTYPE html>\n<html>\n  <head>\n    <meta name=\"pypi:repository-version\" content=\"1.1\">\n    <title>Links for {PROJECT}</title>\n  </head>\n  <body>\n    <h1>Links for {PROJECT}</h1>\n"
    );
    // Wheel names were validated (ASCII letters, digits, `._+-!`): nothing to escape but `+` in the href.
    for w in sorted(m) {
        s.push_str(&format!(
            "    <a href=\"{}#sha256={}\" data-dist-info-metadata=\"sha256={}\" data-core-metadata=\"sha256={}\">{}</a><br>\n",
            href(&w.wheel),
            w.sha256,
            w.metadata_sha256,
            w.metadata_sha256,
            w.wheel
        ));
    }
    // PEP 825: the variants.json of each version is linked on the same page.
    for f in &m.variants_json {
        s.push_str(&format!("    <a href=\"{}#sha256={}\">{}</a><br>\n", href(&f.file), f.sha256, f.file));
    }
    s.push_str("  </body>\n</html>\n");
    s
}

/// A file name as a relative URL (`+` is `%2B`, as PyPI writes local versions).
pub fn href(name: &str) -> String {
    name.replace('+', "%2B")
}

fn project_json(m: &Manifest) -> Vec<u8> {
    let files: Vec<_> = sorted(m)
        .into_iter()
        .map(|w| {
            json!({
                "filename": w.wheel,
                "url": href(&w.wheel),
                "hashes": { "sha256": w.sha256 },
                "core-metadata": { "sha256": w.metadata_sha256 },
                "dist-info-metadata": { "sha256": w.metadata_sha256 },
                "size": w.size,
            })
        })
        .chain(
            m.variants_json
                .iter()
                .map(|f| json!({ "filename": f.file, "url": href(&f.file), "hashes": { "sha256": f.sha256 } })),
        )
        .collect();
    let mut versions: Vec<&str> = m.wheels.iter().map(|w| w.provenance.version.as_str()).collect();
    versions.sort();
    versions.dedup();
    json_bytes(&json!({ "meta": { "api-version": "1.1" }, "name": PROJECT, "versions": versions, "files": files }))
}
