//! `publish --variant-wheels`: every variant as a PEP 825 variant wheel in one
//! index. A variant's label is its pins.toml name (`-` as `_`, checked by
//! `wheel::is_label`); its properties are `nvidia :: sm_arch` from
//! `cuda_arch_list` (`9.0` is `90_real`, `+PTX` adds `90_virtual`, the NVIDIA
//! provider's values; it has none for arch-specific `a` targets, so `10.0a`
//! is `100_real` there too), `deepep_forge :: cuda_arch` the exact targets
//! (`sm_100a`, `sm_103`, `compute_90` for `+PTX`), `nvidia :: cuda_version_lower_bound` /
//! `cuda_version_upper_bound` from `[toolchain] cuda` (at least the toolkit's
//! major.minor, below the next major), and the static `deepep_forge :: build ::
//! singlenode|multinode` with `deepep_forge :: transport` for a multinode build.
//! A variant wheel is the built wheel with `.dist-info/variant.json` added by
//! `wheel::stamp` (same epoch, same bytes every time); `{name}-{version}-variants.json`
//! maps every label of a version to its properties. Reading (`parse`,
//! `read_wheel_variant_json`, `check_wheel`) is bounded and refuses what this
//! module would not write. Must not build, nor write anything but the new
//! wheel file `relabel` is given (through `wheel::stamp`).
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{json, Value};

use forge_model::pins::{Pins, Variant};
use forge_os::error::Failure;

/// The schema uv 0.13.9 knows for variant metadata (PEP 850's v0.2.0).
pub const SCHEMA_URL: &str = "https://variants-schema.wheelnext.dev/peps/850/v0.2.0.json";
/// The project's own namespace of static properties.
pub const NAMESPACE: &str = "deepep_forge";
/// The NVIDIA provider's namespace (built into uv 0.13.9).
pub const NVIDIA: &str = "nvidia";
/// The member added to `.dist-info/`.
pub const DIST_INFO_FILE: &str = "variant.json";
/// The largest variants.json read (a real one is a few KiB).
pub const MAX_VARIANTS_JSON: u64 = 256 << 10;
/// The most labels one variants.json may hold.
pub const MAX_LABELS: usize = 256;

/// namespace -> feature -> values, all sorted: the JSON is the same every time.
pub type Properties = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// A variant's label: its name with `-` as `_` (PEP 825 allows `0-9 a-z . _`).
pub fn label(variant: &str) -> Result<String, Failure> {
    let l = variant.to_ascii_lowercase().replace('-', "_");
    if forge_wheel::wheel::is_label(&l) && variant.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
        return Ok(l);
    }
    Err(Failure::usage(format!(
        "variant `{}` gives no PEP 825 label: a label is 1 to {} of 0-9 a-z . _ (a `-` becomes `_`), not `null`",
        crate::cache::excerpt(variant),
        forge_wheel::wheel::MAX_LABEL
    ))
    .hint("rename the variant in pins.toml, or publish it without --variant-wheels"))
}

/// Every variant's label, refused when two variants give the same one.
pub fn labels<'a>(variants: impl IntoIterator<Item = &'a Variant>) -> Result<BTreeMap<String, &'a Variant>, Failure> {
    let mut out: BTreeMap<String, &Variant> = BTreeMap::new();
    for v in variants {
        let l = label(&v.name)?;
        if let Some(other) = out.get(&l) {
            return Err(Failure::usage(format!(
                "variants `{}` (pins.toml line {}) and `{}` (line {}) both give the variant label `{l}`",
                other.name, other.line, v.name, v.line
            ))
            .hint("rename one of them: a label names one build in the index"));
        }
        out.insert(l, v);
    }
    Ok(out)
}

/// The properties pins.toml describes for `v` (`cuda`: `[toolchain] cuda`, when pinned).
pub fn properties(v: &Variant, cuda: Option<&str>) -> Properties {
    let mut nvidia: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut sm: Vec<String> = Vec::new();
    for a in &v.cuda_arch_list.0 {
        sm.push(format!("{}_real", a.sm_number()));
        if a.ptx {
            sm.push(format!("{}_virtual", a.sm_number()));
        }
    }
    sm.sort();
    sm.dedup();
    nvidia.insert("sm_arch".into(), sm);
    if let Some((major, minor)) = cuda.and_then(|c| c.split_once('.')) {
        if let Some((m, next)) = major.parse::<u32>().ok().and_then(|m| Some((m, m.checked_add(1)?))) {
            nvidia.insert("cuda_version_lower_bound".into(), vec![format!("{m}.{minor}")]);
            nvidia.insert("cuda_version_upper_bound".into(), vec![format!("{next}")]);
        }
    }
    let mut own: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // The exact targets, `a`/`f` included (`sm_100a`, `compute_90` for `+PTX`):
    // the NVIDIA provider's `sm_arch` has no arch-specific values, so `10.0a`
    // and `10.0` both give `100_real` there; this feature tells them apart.
    let mut exact: Vec<String> = v.cuda_arch_list.targets().iter().map(|t| t.name()).collect();
    exact.sort();
    exact.dedup();
    own.insert("cuda_arch".into(), exact);
    own.insert("build".into(), vec![if v.multinode { "multinode" } else { "singlenode" }.into()]);
    if v.multinode {
        own.insert("transport".into(), vec![v.transport.as_str().into()]);
    }
    BTreeMap::from([(NVIDIA.to_string(), nvidia), (NAMESPACE.to_string(), own)])
}

/// The providers and priorities every file of the index names: NVIDIA's (built
/// into uv) first, then the project's static namespace, single node preferred.
fn common(static_values: &BTreeMap<String, Vec<String>>) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert("$schema".into(), json!(SCHEMA_URL));
    m.insert("default-priorities".into(), json!({ "namespace": [NVIDIA, NAMESPACE] }));
    m.insert(
        "providers".into(),
        json!({
            NVIDIA: { "requires": ["nvidia-variant-provider"], "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin" },
            NAMESPACE: own_provider(static_values),
        }),
    );
    m
}

/// The project's static provider: its values, and (uv requires it for more than
/// one feature) the feature order, `build` before `transport`.
fn own_provider(static_values: &BTreeMap<String, Vec<String>>) -> Value {
    let mut p = json!({ "static-properties": static_values });
    if static_values.len() > 1 {
        p["feature-order"] = json!(static_values.keys().collect::<Vec<_>>());
    }
    p
}

/// The static values of the project's namespace the index serves, in
/// preference order: `singlenode` before `multinode`, transports sorted.
fn static_values(all: &BTreeMap<String, Properties>) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in all.values() {
        for (f, vals) in p.get(NAMESPACE).into_iter().flatten() {
            out.entry(f.clone()).or_default().extend(vals.iter().cloned());
        }
    }
    for (f, vals) in out.iter_mut() {
        vals.sort_by_key(|v| (f == "build" && v == "multinode", v.clone()));
        vals.dedup();
    }
    out
}

fn render(mut m: serde_json::Map<String, Value>, variants: &BTreeMap<String, Properties>) -> Vec<u8> {
    m.insert("variants".into(), json!(variants));
    let mut b = serde_json::to_vec_pretty(&Value::Object(m)).expect("plain JSON");
    b.push(b'\n');
    b
}

/// `.dist-info/variant.json` of the wheel labelled `label` (the index's
/// providers, one variant).
pub fn variant_json(label: &str, props: &Properties) -> Vec<u8> {
    let one = BTreeMap::from([(label.to_string(), props.clone())]);
    render(common(&static_values(&one)), &one)
}

/// `{name}-{version}-variants.json`: every label the index serves for a version.
pub fn variants_json(all: &BTreeMap<String, Properties>) -> Vec<u8> {
    render(common(&static_values(all)), all)
}

/// `deep_ep-<version>-variants.json`.
pub fn variants_json_name(dist: &str, version: &str) -> String {
    format!("{dist}-{version}-variants.json")
}

/// The variant wheel's file name: the built wheel's with `-<label>` before `.whl`.
pub fn wheel_name(built: &str, label: &str) -> Result<String, Failure> {
    forge_wheel::wheel::WheelName::parse(built)
        .filter(|n| n.variant.is_none())
        .ok_or_else(|| Failure::usage(format!("`{}` is not a plain wheel name", crate::cache::excerpt(built))))?;
    Ok(format!("{}-{label}.whl", built.trim_end_matches(".whl")))
}

/// Write the variant wheel of `built` to `out` (a new file): `variant.json`
/// added to `.dist-info/`, RECORD rewritten, every member's time the build's
/// SOURCE_DATE_EPOCH, so the same wheel always gives the same bytes.
pub fn relabel(built: &Path, out: &Path, label: &str, props: &Properties) -> Result<()> {
    add_variant_json(built, out, variant_json(label, props))
}

/// `built` with `variant_json` added as `.dist-info/variant.json`, written to `out`
/// (a new file), every member's time the build's SOURCE_DATE_EPOCH.
pub fn add_variant_json(built: &Path, out: &Path, variant_json: Vec<u8>) -> Result<()> {
    let epoch = build_epoch(built)?;
    let changes = forge_wheel::wheel::stamp::Changes {
        add_dist_info: BTreeMap::from([(DIST_INFO_FILE.to_string(), variant_json)]),
        epoch,
        ..Default::default()
    };
    forge_wheel::wheel::stamp::stamp(built, out, &changes)
}

/// The SOURCE_DATE_EPOCH the wheel's provenance records.
fn build_epoch(wheel: &Path) -> Result<i64> {
    let bytes = forge_wheel::wheel::read::open(wheel)?.provenance_bytes()?;
    let p: forge_wheel::provenance::Provenance =
        serde_json::from_slice(&bytes).with_context(|| format!("{}: unreadable provenance", wheel.display()))?;
    Ok(p.times.source_date_epoch)
}

/// A variants.json (or variant.json) read back: its labels and properties.
/// Refused: over [`MAX_VARIANTS_JSON`] bytes, not JSON, another schema, a
/// namespace other than `nvidia` and `deepep_forge`, a bad label or value.
pub fn parse(bytes: &[u8], what: &str) -> Result<BTreeMap<String, Properties>, Failure> {
    let bad = |why: String| Failure::usage(format!("{what}: {why}"));
    if bytes.len() as u64 > MAX_VARIANTS_JSON {
        return Err(bad(format!("{} bytes, over the {MAX_VARIANTS_JSON}-byte bound", bytes.len()))
            .hint("a variants.json of this index is a few KiB: this one is not deepep-forge's"));
    }
    let v: Value = serde_json::from_slice(bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    if v.get("$schema").and_then(Value::as_str) != Some(SCHEMA_URL) {
        return Err(bad(format!("`$schema` is not {SCHEMA_URL}")));
    }
    let providers = v.get("providers").and_then(Value::as_object).ok_or_else(|| bad("no `providers` table".into()))?;
    if let Some(ns) = providers.keys().find(|k| *k != NVIDIA && *k != NAMESPACE) {
        return Err(bad(format!("unknown namespace `{}` in `providers`", crate::cache::excerpt(ns)))
            .hint("deepep-forge writes only the `nvidia` and `deepep_forge` namespaces"));
    }
    let variants: BTreeMap<String, Properties> =
        serde_json::from_value(v.get("variants").cloned().unwrap_or(Value::Null))
            .map_err(|e| bad(format!("`variants` is not label -> namespace -> feature -> [values]: {e}")))?;
    if variants.len() > MAX_LABELS {
        return Err(bad(format!("{} labels, over the bound of {MAX_LABELS}", variants.len())));
    }
    for (l, props) in &variants {
        if !forge_wheel::wheel::is_label(l) {
            return Err(bad(format!("`{}` is not a variant label (0-9 a-z . _, 1 to 16)", crate::cache::excerpt(l))));
        }
        if let Some(ns) = props.keys().find(|k| *k != NVIDIA && *k != NAMESPACE) {
            return Err(bad(format!("label `{l}` has unknown namespace `{}`", crate::cache::excerpt(ns))));
        }
        let plain = |s: &str| {
            !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b"._".contains(&b))
        };
        if let Some(x) =
            props.values().flat_map(|f| f.iter().flat_map(|(k, vs)| std::iter::once(k).chain(vs))).find(|s| !plain(s))
        {
            return Err(bad(format!(
                "label `{l}` has the feature or value `{}` (expected 0-9 a-z . _)",
                crate::cache::excerpt(x)
            )));
        }
    }
    Ok(variants)
}

/// A variant wheel's own `variant.json`, checked: one variant, the file name's label.
pub fn read_wheel_variant_json(wheel: &Path) -> Result<Vec<u8>, Failure> {
    let file = wheel.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let bad = |why: String| Failure::problems(format!("{}: {why}", wheel.display()));
    let name = forge_wheel::wheel::WheelName::parse(file).ok_or_else(|| bad("not a wheel file name".into()))?;
    let label = name.variant.clone().ok_or_else(|| bad("has no variant label".into()))?;
    let member = format!("{}/{DIST_INFO_FILE}", name.dist_info());
    let bytes = forge_wheel::wheel::read::open(wheel)
        .and_then(|mut w| w.member(&member, MAX_VARIANTS_JSON + 1))
        .map_err(|e| bad(format!("{e:#}")))?
        .ok_or_else(|| bad(format!("has no {member}")))?;
    let got = parse(&bytes, &format!("{} {member}", wheel.display()))?;
    match got.keys().collect::<Vec<_>>().as_slice() {
        [l] if **l == label => Ok(bytes),
        [l] => Err(bad(format!("{member} describes label `{l}`, the file name says `{label}`"))),
        _ => Err(bad(format!("{member} must describe exactly one variant"))),
    }
}

/// A variant wheel's own `variant.json` against its file name's label and what
/// pins.toml describes for that label; `Err` says what differs.
pub fn check_wheel(wheel: &Path, pins: &Pins) -> Result<(String, Properties), Failure> {
    let bad = |why: String| Failure::problems(format!("{}: {why}", wheel.display()));
    let bytes = read_wheel_variant_json(wheel)?;
    let member = DIST_INFO_FILE;
    // read_wheel_variant_json checked: exactly one variant, the file name's label.
    let (label, props) = parse(&bytes, "variant.json")?.into_iter().next().expect("one variant, checked");
    let by_label = labels(&pins.variants)?;
    let v = by_label.get(&label).ok_or_else(|| bad(format!("label `{label}` is no variant pins.toml describes")))?;
    let want = properties(v, pins.toolchain.as_ref().map(|t| t.cuda.as_str()));
    if props != want {
        return Err(bad(format!(
            "{member} says {}, pins.toml's variant `{}` is {}",
            show(&props),
            v.name,
            show(&want)
        )));
    }
    Ok((label, props))
}

/// `ns :: feature :: value` lines, joined.
pub fn show(p: &Properties) -> String {
    let mut s = Vec::new();
    for (ns, fs) in p {
        for (f, vs) in fs {
            for v in vs {
                s.push(format!("{ns} :: {f} :: {v}"));
            }
        }
    }
    s.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pins(extra: &str) -> Pins {
        let text = format!("{}{extra}", include_str!("../../../../tests/fixtures/demo-pins.toml"));
        Pins::parse(&text, Path::new("pins.toml")).unwrap()
    }

    #[test]
    fn properties_name_the_sm_archs_cuda_bounds_and_the_build() {
        let mut p = pins("");
        let v = p.variants.iter_mut().find(|v| v.name == "demo").unwrap();
        let got = properties(v, Some("13.0"));
        assert_eq!(
            show(&got),
            "deepep_forge :: build :: singlenode, deepep_forge :: cuda_arch :: sm_100, deepep_forge :: cuda_arch :: sm_90, \
             nvidia :: cuda_version_lower_bound :: 13.0, nvidia :: cuda_version_upper_bound :: 14, \
             nvidia :: sm_arch :: 100_real, nvidia :: sm_arch :: 90_real"
        );
        v.multinode = true;
        v.cuda_arch_list = "9.0+PTX".parse().unwrap();
        let mn = properties(v, None);
        assert_eq!(
            show(&mn),
            "deepep_forge :: build :: multinode, deepep_forge :: cuda_arch :: compute_90, deepep_forge :: cuda_arch :: sm_90, \
             deepep_forge :: transport :: doca, nvidia :: sm_arch :: 90_real, nvidia :: sm_arch :: 90_virtual"
        );
        // The exact targets tell a 10.0a build from a plain 10.0 one (the provider's sm_arch cannot).
        v.multinode = false;
        v.cuda_arch_list = "10.0a".parse().unwrap();
        let a = properties(v, None);
        v.cuda_arch_list = "10.0".parse().unwrap();
        let plain = properties(v, None);
        assert_eq!(a[NVIDIA], plain[NVIDIA]);
        assert_eq!(a[NAMESPACE]["cuda_arch"], ["sm_100a"]);
        assert_ne!(a, plain);
        v.cuda_arch_list = "9.0 10.3".parse().unwrap();
        assert_eq!(properties(v, None)[NVIDIA]["sm_arch"], ["103_real", "90_real"]);
    }

    #[test]
    fn labels_that_collide_or_are_no_label_are_refused() {
        let p = pins(
            "\n[[variant]]\nname = \"demo_arm\"\narch = \"aarch64\"\ncuda_arch_list = \"10.0\"\nmultinode = false\n",
        );
        let e = labels(&p.variants).unwrap_err().to_string();
        assert!(
            e.contains("variants `demo-arm` (pins.toml line ") && e.contains("both give the variant label `demo_arm`"),
            "{e}"
        );
        for bad in ["a/b", "..", "null", "x".repeat(17).as_str(), "H100"] {
            let l = label(bad);
            assert!(bad == "H100" && l.as_ref().is_ok_and(|l| l == "h100") || l.is_err(), "{bad}: {l:?}");
        }
        assert!(wheel_name("deep_ep-1-cp312-cp312-linux_x86_64-h100.whl", "b200").is_err());
    }

    /// A wheel file `name` holding `<dist-info>/variant.json` = `vj`.
    fn wheel_with(dir: &Path, name: &str, vj: &[u8]) -> std::path::PathBuf {
        use std::io::Write;
        let path = dir.join(name);
        let mut z = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let di = "deep_ep-1.2.1+0bfa6c2.dist-info";
        for (member, data) in [(format!("{di}/variant.json"), vj.to_vec()), (format!("{di}/RECORD"), vec![])] {
            z.start_file(member, zip::write::SimpleFileOptions::default()).unwrap();
            z.write_all(&data).unwrap();
        }
        z.finish().unwrap();
        path
    }

    #[test]
    fn a_wheel_whose_variant_json_disagrees_with_its_label_or_pins_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let p = pins("");
        let demo = p.variant("demo").unwrap();
        let good = variant_json("demo", &properties(demo, None));
        let stem = "deep_ep-1.2.1+0bfa6c2-cp311-cp311-linux_x86_64";
        let ok = wheel_with(tmp.path(), &format!("{stem}-demo.whl"), &good);
        assert_eq!(check_wheel(&ok, &p).unwrap().0, "demo");
        // The file name says demo_arm, the variant.json says demo.
        let renamed = wheel_with(tmp.path(), &format!("{stem}-demo_arm.whl"), &good);
        let e = check_wheel(&renamed, &p).unwrap_err().to_string();
        assert!(e.contains("describes label `demo`, the file name says `demo_arm`"), "{e}");
        // The label is pins.toml's, the properties are not (multinode claimed).
        let mut mn = demo.clone();
        mn.multinode = true;
        let lying =
            wheel_with(tmp.path(), &format!("{stem}-demo.whl.tmp"), &variant_json("demo", &properties(&mn, None)));
        let lying_whl = tmp.path().join(format!("{stem}-demo.whl"));
        std::fs::rename(lying, &lying_whl).unwrap();
        let e = check_wheel(&lying_whl, &p).unwrap_err().to_string();
        assert!(
            e.contains("says deepep_forge :: build :: multinode")
                && e.contains("pins.toml's variant `demo` is deepep_forge :: build :: singlenode"),
            "{e}"
        );
        // A label no variant of pins.toml gives.
        let foreign =
            wheel_with(tmp.path(), &format!("{stem}-h200.whl"), &variant_json("h200", &properties(demo, None)));
        let e = check_wheel(&foreign, &p).unwrap_err().to_string();
        assert!(e.contains("label `h200` is no variant pins.toml describes"), "{e}");
    }

    #[test]
    fn variants_json_round_trips_and_hostile_ones_are_refused() {
        let p = pins("");
        let all: BTreeMap<String, Properties> =
            labels(&p.variants).unwrap().into_iter().map(|(l, v)| (l, properties(v, Some("12.9")))).collect();
        let bytes = variants_json(&all);
        assert_eq!(bytes, variants_json(&all), "the same input gives the same bytes");
        assert_eq!(parse(&bytes, "v.json").unwrap(), all);
        let big = vec![b' '; MAX_VARIANTS_JSON as usize + 1];
        assert!(parse(&big, "v.json").unwrap_err().to_string().contains("over the 262144-byte bound"));
        let text = String::from_utf8(bytes).unwrap();
        let foreign =
            text.replacen("\"providers\": {\n    \"deepep_forge\": {", "\"providers\": {\n    \"evil\": {", 1);
        assert_ne!(foreign, text, "the provider's namespace was renamed");
        assert!(
            parse(foreign.as_bytes(), "v.json").unwrap_err().to_string().contains("unknown namespace `evil`"),
            "{foreign}"
        );
        let path = text.replacen("\"demo\": {", "\"../x\": {", 1);
        assert!(parse(path.as_bytes(), "v.json").unwrap_err().to_string().contains("`../x` is not a variant label"));
    }
}
