//! The adversarial suite: hostile pins.toml, consumer files, Dockerfiles,
//! recipes, wheels and flags, each run through the real binary. Every case
//! asserts the exit code, a message fragment, no panic, and that nothing on
//! disk changed or appeared (harness: tests/it/support/hostile.rs). Big inputs
//! are generated cheaply (sparse files, declared sizes, repeated text).
use crate::support;
use std::path::Path;

use crate::support::hostile::{run_all, Case};

const PINS: &str = include_str!("../../pins.toml");
const REPO_LINE: &str = "repo = \"https://github.com/deepseek-ai/DeepEP.git\"";
const RDMA_REPO_LINE: &str = "repo = \"https://github.com/linux-rdma/rdma-core.git\"";
const PYPROJECT: &str = include_str!("../fixtures/consumer-unified/pyproject.toml");
const UVLOCK: &str = include_str!("../fixtures/consumer-unified/uv.lock");
const SPLIT_PY: &str = include_str!("../fixtures/consumer-split/pyproject.toml");
const SPLIT_LOCK: &str = include_str!("../fixtures/consumer-split/uv.lock");
const REV: &str = "17cfb817bccec3a9c247013360cc550c2bac441e";

/// `text` with the first `from` replaced by `to`; `from` must be there (a
/// case whose edit silently did nothing would test the shipped file instead).
fn swap(text: &str, from: &str, to: &str, n: usize) -> String {
    assert!(text.contains(from), "the shipped pins.toml no longer holds {from:?}");
    text.replacen(from, to, n)
}

/// The shipped pins with `source.repo` replaced by a TOML string literal.
fn pins_repo(literal: &str) -> String {
    swap(PINS, REPO_LINE, &format!("repo = {literal}"), 1)
}

fn fifo(p: &Path) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo {}", p.display());
}

fn symlink(target: &str, link: &Path) {
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, link).unwrap();
}

/// A sparse file of `len` bytes (costs no disk, reads as zeros).
fn sparse(p: &Path, len: u64) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::File::create(p).unwrap().set_len(len).unwrap();
}

/// A `.git` folder marks a repository root for the recipe loader (it never runs git).
fn git_root(p: &Path) {
    std::fs::create_dir_all(p.join(".git")).unwrap();
}

// ---- a minimal zip writer (hostile layouts the zip crate refuses to write) ----

struct Member {
    name: String,
    method: u16,
    data: Vec<u8>,
    crc: u32,
    /// Declared uncompressed size.
    size: u32,
}

fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0xEDB8_8320 } else { c >> 1 };
        }
    }
    !c
}

fn stored(name: &str, data: &[u8]) -> Member {
    Member { name: name.into(), method: 0, data: data.to_vec(), crc: crc32(data), size: data.len() as u32 }
}

/// Local headers and data in order, then a central directory whose entries
/// point at `offsets_of[i]` (an index into the members: the same index twice
/// makes two entries share one member's bytes).
fn zip_bytes(members: &[Member], central: &[(usize, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offsets = Vec::new();
    for m in members {
        offsets.push(out.len() as u32);
        out.extend(0x0403_4b50u32.to_le_bytes());
        out.extend(20u16.to_le_bytes());
        out.extend(0u16.to_le_bytes());
        out.extend(m.method.to_le_bytes());
        out.extend([0, 0, 0x21, 0]);
        out.extend(m.crc.to_le_bytes());
        out.extend((m.data.len() as u32).to_le_bytes());
        out.extend(m.size.to_le_bytes());
        out.extend((m.name.len() as u16).to_le_bytes());
        out.extend(0u16.to_le_bytes());
        out.extend(m.name.as_bytes());
        out.extend(&m.data);
    }
    let cd_start = out.len() as u32;
    for (i, name) in central {
        let m = &members[*i];
        out.extend(0x0201_4b50u32.to_le_bytes());
        out.extend(20u16.to_le_bytes());
        out.extend(20u16.to_le_bytes());
        out.extend(0u16.to_le_bytes());
        out.extend(m.method.to_le_bytes());
        out.extend([0, 0, 0x21, 0]);
        out.extend(m.crc.to_le_bytes());
        out.extend((m.data.len() as u32).to_le_bytes());
        out.extend(m.size.to_le_bytes());
        out.extend((name.len() as u16).to_le_bytes());
        out.extend([0u8; 12]);
        out.extend(offsets[*i].to_le_bytes());
        out.extend(name.as_bytes());
    }
    let cd_len = out.len() as u32 - cd_start;
    out.extend(0x0605_4b50u32.to_le_bytes());
    out.extend([0u8; 4]);
    out.extend((central.len() as u16).to_le_bytes());
    out.extend((central.len() as u16).to_le_bytes());
    out.extend(cd_len.to_le_bytes());
    out.extend(cd_start.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    out
}

fn zip_of(members: &[Member]) -> Vec<u8> {
    let central: Vec<(usize, &str)> = members.iter().enumerate().map(|(i, m)| (i, m.name.as_str())).collect();
    zip_bytes(members, &central)
}

const WHEEL: &str = "deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl";

// ---- cases ------------------------------------------------------------------

/// Ways a file can be unreadable, each placed at `rel`.
fn unreadable(rel: &'static str) -> Vec<(&'static str, Case)> {
    // Past every cap (a wheel's is 4 GiB); sparse, so it costs no disk.
    let big = 5u64 << 30;
    vec![
        ("directory", Case::new("").setup(move |d| std::fs::create_dir_all(d.join(rel)).unwrap()).says("a directory")),
        ("/dev/zero", Case::new("").setup(move |d| symlink("/dev/zero", &d.join(rel))).says("not a regular file")),
        ("FIFO", Case::new("").setup(move |d| fifo(&d.join(rel))).says("not a regular file")),
        (
            "symlink loop",
            Case::new("").setup(move |d| {
                let p = d.join(rel);
                symlink(p.file_name().unwrap().to_str().unwrap(), &p)
            }),
        ),
        ("not UTF-8", Case::new("").file(rel, b"# \xff\xfe\n".to_vec()).says("not UTF-8")),
        ("oversize", Case::new("").setup(move |d| sparse(&d.join(rel), big)).says("more than")),
    ]
}

/// A file of a project (or of the pins file's folder) is read through that
/// folder: its link to /dev/zero leads out of it and is refused as such (issue 54).
fn in_tree(cases: Vec<Case>) -> Vec<Case> {
    cases
        .into_iter()
        .map(|mut c| {
            if c.name.ends_with("/dev/zero") {
                c.says.retain(|s| s != "not a regular file");
                c.says.push("outside".into());
            }
            c
        })
        .collect()
}

/// The unreadable ways for one input, under one command line.
fn unreadable_cases(what: &str, rel: &'static str, args: &[&str], extra: &[(&'static str, &'static str)]) -> Vec<Case> {
    unreadable(rel)
        .into_iter()
        .map(|(how, mut c)| {
            c.name = format!("{what}: {how}");
            for (p, t) in extra {
                c = c.file(p, *t);
            }
            c.args(args).says(rel.rsplit('/').next().unwrap())
        })
        .collect()
}

fn pins_cases() -> Vec<Case> {
    let marker = "{dir}/pwned";
    let mut v = vec![
        Case::new("pins: shipped file is fine").file("pins.toml", PINS).args(&["pins", "check"]).exit(0).says("ok"),
        Case::new("pins: not TOML").file("pins.toml", "schema = [").args(&["pins", "check"]).says("pins.toml:1:"),
        Case::new("pins: missing").args(&["pins", "check"]).says("pins file not found"),
        Case::new("pins: --pins /dev/zero").args(&["pins", "check", "--pins", "/dev/zero"]).says("not a regular file"),
        Case::new("pins: --pins a non-UTF-8 path")
            .args(&["pins", "check", "--pins"])
            .arg_bytes(b"pins-\xff.toml")
            .says("pins-\\xff.toml")
            .says("not UTF-8"),
        Case::new("pins: NUL bytes").file("pins.toml", "schema = 1\0\n").args(&["pins", "check"]).says("pins.toml:"),
        Case::new("pins: schema 99")
            .file("pins.toml", swap(PINS, "schema = 2", "schema = 99", 1))
            .args(&["pins", "check"])
            .says("schema = 99"),
        Case::new("pins: a Python list with a duplicate minor")
            .file("pins.toml", swap(PINS, "python = \"3.12\"", "python = [\"3.11\", \"3.12\", \"3.011\"]", 1))
            .args(&["pins", "check"])
            .says("pins.toml:23:27: toolchain.python lists Python 3.11 twice"),
        Case::new("pins: a Python list with a path")
            .file("pins.toml", swap(PINS, "python = \"3.12\"", "python = [\"3.12\", \"../bin/python3\"]", 1))
            .args(&["pins", "check"])
            .says("pins.toml:23:19: toolchain.python `../bin/python3`: a list holds Python minors"),
        Case::new("pins: a Python list with a patch release")
            .file("pins.toml", swap(PINS, "python = \"3.12\"", "python = [\"3.12.1\"]", 1))
            .args(&["pins", "check"])
            .says("pins.toml:23:11: toolchain.python `3.12.1`"),
        Case::new("pins: an empty Python list")
            .file("pins.toml", swap(PINS, "python = \"3.12\"", "python = []", 1))
            .args(&["pins", "check"])
            .says("toolchain.python lists 0 Pythons"),
        Case::new("pins: a Python list of numbers")
            .file("pins.toml", swap(PINS, "python = \"3.12\"", "python = [3.12]", 1))
            .args(&["pins", "check"])
            .says("pins.toml:23:"),
        Case::new("pins: rev is an option")
            .file("pins.toml", swap(PINS, &format!("rev = \"{REV}\""), "rev = \"--output=x\"", 1))
            .args(&["pins", "check"])
            .says("not a full commit"),
        Case::new("pins: an arch list the variant's own GPU cannot run")
            .file("pins.toml", swap(PINS, "cuda_arch_list = \"10.3\"", "cuda_arch_list = \"10.0a\"", 1))
            .args(&["pins", "check"])
            .exit(2)
            .says("gb300 (sm_103, compute capability 10.3), which cuda_arch_list \"10.0a\" cannot run on: add 10.3 or 10.3a, or use 10.0f"),
        Case::new("pins: an unknown GPU names the known ones")
            .file("pins.toml", swap(PINS, "gpu = \"gb300\"", "gpu = \"gb400\"", 1))
            .args(&["pins", "check"])
            .exit(2)
            .says("unknown GPU `gb400`: expected h100, h200, b200, gb200, b300, gb300"),
        Case::new("pins: a 1 MB rev is quoted cut")
            .file(
                "pins.toml",
                swap(PINS, &format!("rev = \"{REV}\""), &format!("rev = \"{}\"", "z".repeat(1 << 20)), 1),
            )
            .args(&["pins", "check"])
            .says("more bytes")
            .hides(&"z".repeat(200)),
        Case::new("pins: unknown key")
            .file("pins.toml", swap(PINS, "[source]", "[source]\nupload_pack = \"x\"", 1))
            .args(&["pins", "check"])
            .says("unknown field"),
        Case::new("pins: variant name with a path")
            .file("pins.toml", swap(PINS, "name = \"h100\"", "name = \"../../h100\"", 1))
            .args(&["pins", "check"])
            .says("variant name"),
        Case::new("pins: variant name is an option")
            .file("pins.toml", swap(PINS, "name = \"h100\"", "name = \"--output\"", 1))
            .args(&["pins", "check"])
            .says("variant name"),
        Case::new("pins: number past u32")
            .file(
                "pins.toml",
                swap(PINS, "nodes = 1, gpus_per_node = 8, ep = 8", "nodes = 99999999999, gpus_per_node = 8, ep = 8", 1),
            )
            .args(&["pins", "check"])
            .says("pins.toml:"),
        Case::new("pins: topology product does not wrap")
            .file(
                "pins.toml",
                swap(PINS, "nodes = 1, gpus_per_node = 8, ep = 8", "nodes = 65536, gpus_per_node = 65536, ep = 8", 1),
            )
            .args(&["pins", "check"])
            .says("topology.nodes = 65536: expected 1 to 4096"),
        Case::new("pins: topology zero")
            .file("pins.toml", swap(PINS, "nodes = 1, gpus_per_node = 8", "nodes = 0, gpus_per_node = 8", 1))
            .args(&["pins", "check"])
            .says("at least 1"),
        Case::new("pins: deeply nested array")
            .file("pins.toml", format!("{PINS}\nx = {}{}\n", "[".repeat(20_000), "]".repeat(20_000)))
            .args(&["pins", "check"])
            .says("pins.toml"),
        Case::new("pins: rdma_core ref is an option")
            .file("pins.toml", swap(PINS, "ref = \"v60.0\"", "ref = \"--upload-pack=touch pwned\"", 1))
            .args(&["pins", "check"])
            .says("rdma_core.ref"),
        Case::new("pins: rdma_core ref climbs")
            .file("pins.toml", swap(PINS, "ref = \"v60.0\"", "ref = \"../../x\"", 1))
            .args(&["pins", "check"])
            .says("rdma_core.ref"),
        Case::new("pins: rdma_core repo is an option")
            .file("pins.toml", swap(PINS, RDMA_REPO_LINE, &format!("repo = \"--upload-pack=touch {marker}\""), 1))
            .args(&["pins", "check"])
            .says("rdma_core.repo")
            .absent("pwned"),
        Case::new("pins: toolchain python is a path")
            .file("pins.toml", swap(PINS, "python = \"3.12\"", "python = \"./evil.sh\"", 1))
            .file("evil.sh", "#!/bin/sh\ntouch pwned\n")
            .args(&["plan", "--all", "--toolchain", "registry"])
            .says("toolchain.python")
            .absent("pwned"),
        Case::new("pins: toolchain python is an option")
            .file("pins.toml", swap(PINS, "python = \"3.12\"", "python = \"--system\"", 1))
            .args(&["pins", "check"])
            .says("toolchain.python"),
        Case::new("pins: rdma_core repo is local")
            .file("pins.toml", swap(PINS, RDMA_REPO_LINE, "repo = \"/srv/rdma-core\"", 1))
            .args(&["docker", "bake", "--check"])
            .says("rdma_core.repo"),
    ];
    // Hostile source.repo values, each under every command that reads pins.toml.
    let repos: Vec<(&str, String, &str)> = vec![
        ("--upload-pack", format!("\"--upload-pack=touch {marker}\""), "starts with `-`"),
        ("-u", format!("\"-utouch {marker}\""), "starts with `-`"),
        ("ext::", format!("\"ext::sh -c touch% {marker}\""), "whitespace"),
        ("ext:: no space", "\"ext::sh\"".into(), "remote helper"),
        ("fd::", "\"fd::3\"".into(), "remote helper"),
        ("file://", "\"file:///srv/DeepEP.git\"".into(), "`file` scheme"),
        ("file:", "\"file:DeepEP\"".into(), "file: URL"),
        ("absolute path", "\"/srv/DeepEP\"".into(), "local path"),
        ("relative path", "\"../DeepEP\"".into(), "local path"),
        ("bare name", "\"DeepEP\"".into(), "local path"),
        ("http", "\"http://example.org/DeepEP.git\"".into(), "`http` scheme"),
        ("ssh proxy host", format!("\"ssh://-oProxyCommand=touch%20{marker}/x\""), "starts with `-`"),
        ("scp proxy host", "\"-oProxyCommand=x:y\"".into(), "starts with `-`"),
        ("newline", "\"https://github.com/x/y\\n--upload-pack=x\"".into(), "control"),
        ("empty", "\"\"".into(), "empty"),
        ("no path", "\"https://github.com\"".into(), "no repository path"),
    ];
    let commands: [&[&str]; 5] = [
        &["pins", "check"],
        &["plan", "--variant", "h100"],
        &["build-wheel", "--variant", "h100"],
        &["docker", "bake", "--check"],
        &["lock", "check", "--project", "consumer"],
    ];
    for (i, (what, literal, says)) in repos.iter().enumerate() {
        // Every value under `pins check`; the option-shaped ones under every command.
        let cmds: &[&[&str]] = if i < 3 { &commands } else { &commands[..1] };
        for args in cmds {
            v.push(
                Case::new(format!("pins: repo {what} under {}", args.join(" ")))
                    .file("pins.toml", pins_repo(literal))
                    .file("consumer/pyproject.toml", PYPROJECT)
                    .args(args)
                    .says("source.repo")
                    .says(says)
                    .says("pins.toml:8:")
                    .absent("pwned"),
            );
        }
    }
    v.extend(unreadable_cases("pins: pins check", "pins.toml", &["pins", "check"], &[]));
    v.extend(unreadable_cases("pins: pins show json", "pins.toml", &["pins", "show", "--format", "json"], &[]));
    v.extend(unreadable_cases("pins: plan", "pins.toml", &["plan", "--all"], &[]));
    v
}

fn lock_cases() -> Vec<Case> {
    let base = [("pins.toml", PINS), ("consumer/uv.lock", UVLOCK)];
    let mut v = Vec::new();
    for fmt in ["human", "json", "github"] {
        let args = ["lock", "check", "--project", "consumer", "--format", fmt];
        v.extend(in_tree(unreadable_cases(&format!("lock {fmt}: pyproject"), "consumer/pyproject.toml", &args, &base)));
    }
    let with_py = [("pins.toml", PINS), ("consumer/pyproject.toml", PYPROJECT)];
    v.extend(in_tree(unreadable_cases(
        "lock: uv.lock",
        "consumer/uv.lock",
        &["lock", "check", "--project", "consumer", "--format", "json"],
        &with_py,
    )));
    let lock = |name: &str, py: &str| {
        Case::new(format!("lock: {name}")).file("pins.toml", PINS).file("consumer/pyproject.toml", py).args(&[
            "lock",
            "check",
            "--project",
            "consumer",
        ])
    };
    v.extend([
        lock("pyproject garbage", "[project\nname = ").says("pyproject.toml:"),
        lock("pyproject deeply nested", &format!("x = {}{}", "[".repeat(20_000), "]".repeat(20_000)))
            .says("pyproject.toml"),
        lock("requirement not PEP 508", "[project]\nname = \"c\"\ndependencies = [\"deep_ep @@ git+x\"]\n")
            .says("pyproject.toml:3"),
        lock(
            "requirement URL shaped as an option",
            &format!(
                "[project]\nname = \"c\"\ndependencies = [\"deep_ep @ git+--upload-pack=touch {{dir}}/pwned@{REV}\"]\n"
            ),
        )
        .exit(2)
        .absent("pwned"),
        lock(
            "a 3 MB requirement",
            &format!("[project]\nname = \"c\"\ndependencies = [\"deep_ep @ git+https://x/{}\"]\n", "a".repeat(3 << 20)),
        )
        .exit(1)
        .says("pyproject.toml:3"),
        lock("uv.lock garbage", "[project]\nname = \"c\"\ndependencies = [\"deep_ep\"]\n")
            .file("consumer/uv.lock", "version = 1\n[[package]\nname=")
            .says("uv.lock"),
        // pep508_rs panicked slicing this marker (found by fuzz/ lockfiles).
        lock("uv.lock marker with a U+FEFF", SPLIT_PY)
            .file(
                "consumer/uv.lock",
                SPLIT_LOCK.replacen(
                    "(platform_machine != 'x86_64' and extra == 'extra-8-consumer-moe') or",
                    "(platform_machine != 'x86_64' and extra == 'extra-8-consumer-moe') o\u{feff}r",
                    1,
                ),
            )
            .says("not ASCII"),
        lock(
            "pyproject marker with a U+FEFF",
            &SPLIT_PY.replacen("platform_machine == 'aarch64'", "platform_machine == 'aarch64' \u{feff}", 1),
        )
        .file("consumer/uv.lock", SPLIT_LOCK)
        .says("not ASCII"),
        lock("uv.lock not UTF-8 deep inside", PYPROJECT)
            .file("consumer/uv.lock", [UVLOCK.as_bytes(), b"\n# \xc3\x28\n"].concat())
            .says("not UTF-8"),
        lock("--dockerfile a directory", PYPROJECT)
            .file("consumer/uv.lock", UVLOCK)
            .setup(|d| std::fs::create_dir_all(d.join("consumer/Dockerfile.x")).unwrap())
            .args(&["--dockerfile", "consumer/Dockerfile.x"])
            .says("Dockerfile"),
        lock("--dockerfile /dev/zero", PYPROJECT)
            .file("consumer/uv.lock", UVLOCK)
            .args(&["--dockerfile", "/dev/zero"])
            .says("/dev/zero"),
        lock("--pins a FIFO", PYPROJECT)
            .file("consumer/uv.lock", UVLOCK)
            .setup(|d| fifo(&d.join("fifo.toml")))
            .args(&["--pins", "fifo.toml"])
            .says("fifo.toml"),
    ]);
    // A discovered Dockerfile that is a FIFO is skipped (not a regular file), never opened.
    v.push(
        lock("discovered FIFO Dockerfile", PYPROJECT)
            .file("consumer/uv.lock", UVLOCK)
            .setup(|d| fifo(&d.join("consumer/Dockerfile")))
            .exit(0),
    );
    v
}

fn dockerfile_cases() -> Vec<Case> {
    let lock = |name: &str, dockerfile: Vec<u8>| {
        Case::new(format!("dockerfile: {name}"))
            .file("pins.toml", PINS)
            .file("consumer/pyproject.toml", PYPROJECT)
            .file("consumer/uv.lock", UVLOCK)
            .file("consumer/Dockerfile", dockerfile)
            .args(&["lock", "check", "--project", "consumer"])
            .memory(512 << 20)
    };
    // 60 KB of nested defaults: quadratic copies took 1.5 GB.
    let nested = format!("FROM b\nARG A\nENV TORCH_CUDA_ARCH_LIST={}x{}\n", "${A:-".repeat(10_000), "}".repeat(10_000));
    // Each ARG doubles the previous one: 2^200 bytes unless bounded.
    let mut doubling = String::from("FROM b\nARG A0=xxxxxxxxxxxxxxxx\n");
    for i in 1..200 {
        doubling.push_str(&format!("ARG A{i}=${{A{}}}${{A{}}}\n", i - 1, i - 1));
    }
    doubling.push_str("ENV TORCH_CUDA_ARCH_LIST=${A199}\nRUN git checkout ${A199}\n");
    let continuations = format!("FROM b\nRUN echo \\\n{}  done\n", "  x \\\n".repeat(200_000));
    let heredocs = format!("FROM b\n{}", "RUN <<A <<B <<C\n".repeat(50_000));
    vec![
        lock("nested ${A:-", nested.into_bytes()).exit(0),
        lock("doubling ARGs", doubling.into_bytes()).exit(0),
        lock("200k continuation lines", continuations.into_bytes()).exit(0),
        lock("unterminated heredocs", heredocs.into_bytes()).exit(0),
        lock("not UTF-8", b"FROM b\nARG X=\xff\n".to_vec()).says("not UTF-8"),
        lock("escape directive garbage", b"# escape=\nFROM b\nARG X=\"${A:-\n".to_vec()).exit(0),
        lock(
            "${ unclosed at the end of the file",
            format!("FROM b\nARG DEEPEP_REV={REV}\nRUN git checkout ${{DEEPEP_REV").into_bytes(),
        )
        .exit(0),
        // A RUN that changes the pinned value on its way builds another revision: never ok.
        lock(
            "${REV%?}0 in a RUN",
            format!("FROM b\nARG DEEPEP_REV={REV}\nRUN pip install \"git+https://github.com/deepseek-ai/DeepEP.git@${{DEEPEP_REV%?}}0\"\n").into_bytes(),
        )
        .exit(1)
        .says("dockerfile-rev"),
        lock(
            "${REV/x/y} in a RUN",
            format!("FROM b\nARG DEEPEP_REV={REV}\nRUN cd DeepEP && git checkout ${{DEEPEP_REV/17/29}}\n").into_bytes(),
        )
        .exit(1)
        .says("cannot verify"),
        lock(
            "${#REV} in a RUN",
            format!("FROM b\nARG DEEPEP_REV={REV}\nRUN cd DeepEP && git checkout ${{#DEEPEP_REV}}\n").into_bytes(),
        )
        .exit(1)
        .says("`40`"),
        lock("oversize", Vec::new()).setup(|d| sparse(&d.join("consumer/Dockerfile"), 8 << 20)).says("more than"),
    ]
}

fn recipe_cases() -> Vec<Case> {
    let probe = |name: &str| {
        Case::new(format!("recipe: {name}"))
            .args(&["probe", "--recipe", "repo/r.yaml", "--gpu", "h100"])
            .setup(|d| git_root(&d.join("repo")))
    };
    let mut v: Vec<Case> = unreadable("repo/r.yaml")
        .into_iter()
        .map(|(how, mut c)| {
            c.name = format!("recipe: {how}");
            c.setup(|d| git_root(&d.join("repo")))
                .args(&["probe", "--recipe", "repo/r.yaml", "--gpu", "h100"])
                .says("r.yaml")
        })
        .collect();
    // 10k-file chain: r -> c1 -> c2 -> ... (stack overflow before).
    let chain = |d: &Path| {
        for i in 1..10_000 {
            std::fs::write(d.join(format!("repo/c{i}.yaml")), format!("defaults: c{}.yaml\n", i + 1)).unwrap();
        }
        std::fs::write(d.join("repo/c10000.yaml"), "cluster: {num_nodes: 1}\n").unwrap();
    };
    // Each level names the next twice: 2^40 loads without memoising.
    let fan = |d: &Path| {
        for i in 1..40 {
            std::fs::write(d.join(format!("repo/f{i}.yaml")), format!("defaults: [f{0}.yaml, f{0}.yaml]\n", i + 1))
                .unwrap();
        }
        std::fs::write(d.join("repo/f40.yaml"), "cluster: {num_nodes: 2, gpus_per_node: 8}\n").unwrap();
    };
    let secret = format!("SECRET-{}", "s3cr3t".repeat(200));
    let laughs = {
        let mut y = String::from("a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
        for i in 1..12 {
            y.push_str(&format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); 9].join(",")));
        }
        y
    };
    let interp = {
        let mut y = String::from("cluster:\n  num_nodes: ${k0}\n");
        for i in 0..25 {
            y.push_str(&format!("k{i}: \"${{k{0}}}${{k{0}}}${{k{0}}}\"\n", i + 1));
        }
        y.push_str("k25: \"8\"\n");
        y
    };
    v.extend([
        probe("defaults: /etc/passwd").file("repo/r.yaml", "defaults: /etc/passwd\n").says("outside").hides("root:"),
        probe("defaults: ../outside.yaml")
            .file("repo/r.yaml", "defaults: ../outside.yaml\n")
            .file("outside.yaml", "a: 1\n")
            .says("outside"),
        probe("defaults through a symlink out")
            .file("repo/r.yaml", "defaults: link.yaml\n")
            .file("outside.yaml", "a: 1\n")
            .setup(|d| symlink("../outside.yaml", &d.join("repo/link.yaml")))
            .says("outside"),
        probe("10k-deep defaults chain").file("repo/r.yaml", "defaults: c1.yaml\n").setup(chain).says("more than 64"),
        probe("defaults [next, next] x 40").file("repo/r.yaml", "defaults: f1.yaml\n").setup(fan).exit(0).says("2"),
        probe("defaults cycle").file("repo/r.yaml", "defaults: [r.yaml]\n").says("comes back to itself"),
        probe("defaults is a number").file("repo/r.yaml", "defaults: 7\n").says("`defaults:` is a number"),
        probe("defaults missing").file("repo/r.yaml", "defaults: nope.yaml\n").says("nope.yaml"),
        probe("defaults a FIFO")
            .file("repo/r.yaml", "defaults: p.yaml\n")
            .setup(|d| fifo(&d.join("repo/p.yaml")))
            .says("not a regular file"),
        probe("top level is a list").file("repo/r.yaml", "- 1\n- 2\n").says("expected a mapping"),
        probe("YAML garbage").file("repo/r.yaml", "a: [\n").says("r.yaml"),
        probe("billion laughs").file("repo/r.yaml", laughs).memory(512 << 20).says("r.yaml"),
        probe("deep YAML nesting")
            .file("repo/r.yaml", format!("a: {}{}\n", "[".repeat(50_000), "]".repeat(50_000)))
            .says("r.yaml"),
        probe("interpolated secret is cut")
            .file("repo/p.yaml", format!("secret: \"{secret}\"\n"))
            .file("repo/r.yaml", "defaults: p.yaml\ncluster:\n  num_nodes: ${secret}\n")
            .says("SECRET-s3cr3t")
            .says("more bytes")
            .hides(&secret[..300]),
        probe("exponential interpolation").file("repo/r.yaml", interp).exit(0).says("too many interpolations"),
        probe("--recipe-root elsewhere")
            .file("repo/r.yaml", "a: 1\n")
            .args(&["--recipe-root", "/nonexistent"])
            .says("--recipe-root"),
        probe("--recipe-root not holding the recipe")
            .file("repo/r.yaml", "a: 1\n")
            .setup(|d| std::fs::create_dir_all(d.join("other")).unwrap())
            .args(&["--recipe-root", "other"])
            .says("outside"),
        // NeMo-RL's layout: a recipe four folders down names ../../../base.yaml (allowed: same repository).
        Case::new("recipe: NeMo-RL ../../../ parent in the repository")
            .setup(|d| git_root(&d.join("rl")))
            .file("rl/examples/configs/base.yaml", "cluster: {num_nodes: 2, gpus_per_node: 8}\n")
            .file("rl/examples/configs/recipes/llm/performance/r.yaml", "defaults: ../../../base.yaml\n")
            .args(&[
                "probe",
                "--recipe",
                "rl/examples/configs/recipes/llm/performance/r.yaml",
                "--gpu",
                "h100",
                "--format",
                "json",
            ])
            .exit(0)
            .says("\"nodes\": 2"),
        Case::new("recipe: no git root, parent above the folder")
            .file("x/y/r.yaml", "defaults: ../base.yaml\n")
            .file("x/base.yaml", "a: 1\n")
            .args(&["probe", "--recipe", "x/y/r.yaml", "--gpu", "h100"])
            .says("--recipe-root"),
        Case::new("recipe: no git root, --recipe-root widens")
            .file("x/y/r.yaml", "defaults: ../base.yaml\n")
            .file("x/base.yaml", "cluster: {num_nodes: 3}\n")
            .args(&["probe", "--recipe", "x/y/r.yaml", "--recipe-root", "x", "--gpu", "h100", "--format", "json"])
            .exit(0)
            .says("\"nodes\": 3"),
    ]);
    v
}

fn meta2() -> Member {
    stored("deep_ep-1.2.1.dist-info/METADATA", b"Version: 1.2.1\n")
}

/// A minimal ELF64 object: one `.data` section of `n` bytes (zeros, then
/// `last`) at 0x1000, and `.shstrtab`.
fn elf_with_section(n: u64, last: u8) -> Vec<u8> {
    let mut e = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    e.extend(1u16.to_le_bytes()); // ET_REL
    e.extend(62u16.to_le_bytes()); // x86-64
    e.extend(1u32.to_le_bytes());
    e.extend(0u64.to_le_bytes()); // entry
    e.extend(0u64.to_le_bytes()); // phoff
    e.extend(64u64.to_le_bytes()); // shoff
    e.extend(0u32.to_le_bytes());
    for v in [64u16, 0, 0, 64, 3, 2] {
        e.extend(v.to_le_bytes());
    }
    let sh = |name: u32, ty: u32, off: u64, size: u64| {
        let mut h = Vec::new();
        h.extend(name.to_le_bytes());
        h.extend(ty.to_le_bytes());
        h.extend(0u64.to_le_bytes());
        h.extend(0u64.to_le_bytes());
        h.extend(off.to_le_bytes());
        h.extend(size.to_le_bytes());
        h.extend([0u8; 8]);
        h.extend(1u64.to_le_bytes());
        h.extend(0u64.to_le_bytes());
        h
    };
    e.extend([0u8; 64]);
    e.extend(sh(1, 1, 0x1000, n));
    e.extend(sh(7, 3, 256, 17));
    e.extend(b"\0.data\0.shstrtab\0");
    e.resize(0x1000 + n as usize, 0);
    *e.last_mut().unwrap() = last;
    e
}

/// A wheel (written with the zip crate, stored) holding `member` = `data`.
fn write_wheel(path: &Path, member: &str, data: &[u8]) {
    use std::io::Write;
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let o = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    z.start_file(member, o).unwrap();
    z.write_all(data).unwrap();
    z.finish().unwrap();
}

fn wheel_cases() -> Vec<Case> {
    let probe = |name: &str, bytes: Vec<u8>| {
        Case::new(format!("wheel: {name}")).file(WHEEL, bytes).args(&["probe", "--wheel", WHEEL]).memory(512 << 20)
    };
    let mut v: Vec<Case> = unreadable(WHEEL)
        .into_iter()
        .filter(|(how, _)| *how != "not UTF-8")
        .map(|(how, mut c)| {
            c.name = format!("wheel: {how}");
            c.args(&["probe", "--wheel", WHEEL]).says(WHEEL)
        })
        .collect();
    // Declares 1 GiB from 1 MB (what a real deflate bomb's header says).
    let bomb = Member { name: "deep_ep/x.so".into(), method: 8, data: vec![0u8; 1 << 20], crc: 0, size: 1 << 30 };
    let meta = stored("deep_ep-1.2.1.dist-info/METADATA", b"Version: 1.2.1\n");
    let over = zip_bytes(&[stored("deep_ep/a.py", &[b'x'; 4096])], &[(0, "deep_ep/a.py"), (0, "deep_ep/b.py")]);
    // Declares 10 bytes, holds 4 KiB stored.
    let liar = Member { name: "deep_ep/liar.py".into(), method: 0, data: vec![b'y'; 4096], crc: 0, size: 10 };
    let many: Vec<Member> = (0..50_001).map(|i| stored(&format!("m{i}"), b"")).collect();
    let diff = |name: &str, bytes: Vec<u8>| {
        Case::new(format!("wheel diff: {name}"))
            .file(WHEEL, bytes)
            .file("b.whl", zip_of(&[stored("deep_ep/a.py", b"x")]))
            .args(&["diff", WHEEL, "b.whl"])
            .memory(512 << 20)
    };
    v.extend([
        diff("/dev/zero", Vec::new())
            .setup(|d| {
                std::fs::remove_file(d.join(WHEEL)).unwrap();
                symlink("/dev/zero", &d.join(WHEEL))
            })
            .says("not a regular file"),
        diff(
            "1 GiB from 1 MB",
            zip_of(&[Member {
                name: "deep_ep/x.so".into(),
                method: 8,
                data: vec![0u8; 1 << 20],
                crc: 0,
                size: 1 << 30,
            }]),
        )
        .says("inflates"),
        diff(
            "overlapping members",
            zip_bytes(&[stored("deep_ep/a.py", &[b'x'; 4096])], &[(0, "deep_ep/a.py"), (0, "deep_ep/b.py")]),
        )
        .says("overlap"),
        diff("a damaged member (CRC)", zip_of(&[Member { crc: 7, ..stored("deep_ep/a.py", b"hello") }]))
            .says(WHEEL)
            .says("member deep_ep/a.py is damaged"),
        diff(
            "a damaged member (deflate garbage)",
            zip_of(&[Member { name: "deep_ep/a.py".into(), method: 8, data: vec![0xff; 64], crc: 0, size: 1000 }]),
        )
        .says(WHEEL)
        .says("is damaged"),
        diff(
            "400 members at the size floor",
            zip_of(
                &(0..400)
                    .map(|i| Member {
                        name: format!("deep_ep/m{i}.so"),
                        method: 8,
                        data: vec![0u8; 1024],
                        crc: 0,
                        size: 16 << 20,
                    })
                    .collect::<Vec<_>>(),
            ),
        )
        .says("inflate to")
        .says("from a file of"),
        // Two 160 MiB ELF members that differ in one byte: compared streamed,
        // never held whole (the child's address space is 400 MiB).
        Case::new("wheel diff: a huge ELF section stays within memory")
            .setup(|d| {
                write_wheel(&d.join(WHEEL), "deep_ep/deep_ep_cpp.so", &elf_with_section(160 << 20, 1));
                write_wheel(&d.join("b.whl"), "deep_ep/deep_ep_cpp.so", &elf_with_section(160 << 20, 2));
            })
            .args(&["diff", WHEEL, "b.whl"])
            .memory(400 << 20)
            .exit(1)
            .says("1 bytes differ"),
    ]);
    v.extend([
        probe("empty file", Vec::new()).says("not a readable wheel"),
        probe("garbage", b"PK\x03\x04 not really".to_vec()).says("not a readable wheel"),
        probe("truncated", zip_of(&[meta])[..40].to_vec()).says("not a readable wheel"),
        probe("1 GiB from 1 MB", zip_of(&[bomb])).says("inflates"),
        probe("overlapping members", over).says("overlap"),
        probe("lying sizes", zip_of(&[liar])).exit(1).says("RECORD"),
        probe("50001 members", zip_of(&many)).says("members"),
        probe("member climbs out", zip_of(&[stored("../../../../tmp/evil.so", b"\x7fELF")]))
            .says("evil.so")
            .says("`..`"),
        probe(
            "member named ../.. beside a good one",
            zip_of(&[meta2(), stored("deep_ep/../../hybrid_ep_cpp.so", b"\x7fELF")]),
        )
        .says("deep_ep/../../hybrid_ep_cpp.so")
        .says("`..` step"),
        probe("absolute member", zip_of(&[meta2(), stored("/usr/lib/deep_ep_cpp.so", b"\x7fELF")]))
            .says("/usr/lib/deep_ep_cpp.so")
            .says("an absolute path"),
        probe("backslash member", zip_of(&[stored("..\\..\\x.so", b"\x7fELF")])).says("backslash"),
        probe(
            "ELF garbage extension",
            zip_of(&[stored("deep_ep/hybrid_ep_cpp.so", &[0x7f, b'E', b'L', b'F', 2, 1, 1])]),
        )
        .exit(1)
        .says("hybrid_ep_cpp"),
        probe(
            "provenance garbage",
            zip_of(&[stored("deep_ep-1.2.1.dist-info/deepep-forge-provenance.json", b"{\"x\": [")]),
        )
        .exit(1),
    ]);
    v
}

fn flag_cases() -> Vec<Case> {
    let probe = |name: &str, args: &[&str]| Case::new(format!("flags: {name}")).args(&["probe"]).args(args);
    vec![
        probe(
            "65536 x 65536 GPUs do not wrap",
            &[
                "--nodes",
                "65536",
                "--gpus-per-node",
                "65536",
                "--ep",
                "1048576",
                "--ranks-per-domain",
                "8",
                "--gpu",
                "h100",
            ],
        )
        .exit(1)
        .says("fit 65536 node(s) x 65536 GPUs"),
        probe("EP past the range", &["--ep", "4294967296", "--gpu", "h100"]).says("--ep"),
        probe("zero nodes", &["--nodes", "0", "--gpu", "h100"]).says("--nodes"),
        probe("negative GPUs", &["--gpus-per-node=-1", "--gpu", "h100"]).says("--gpus-per-node"),
        probe("zero R", &["--ranks-per-domain", "0", "--ep", "8", "--gpu", "h100"]).says("--ranks-per-domain"),
        probe("huge tokens", &["--run", "--tokens", "4000000000"]).says("--tokens"),
        probe("huge timeout", &["--run", "--timeout", "18446744073709551615"]).says("--timeout"),
        Case::new("flags: --jobs 0").file("pins.toml", PINS).args(&["plan", "--all", "--jobs", "0"]).says("--jobs"),
        Case::new("flags: --jobs huge")
            .file("pins.toml", PINS)
            .args(&["plan", "--all", "--jobs", "99999999999999"])
            .says("--jobs"),
    ]
}

fn misc_cases() -> Vec<Case> {
    let env = |name: &str, record: &str| {
        Case::new(format!("installed env: {name}"))
            .file("site/deep_ep/__init__.py", "")
            .file("site/deep_ep-1.2.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: deep_ep\nVersion: 1.2.1\n")
            .file("site/deep_ep-1.2.1.dist-info/RECORD", format!("deep_ep-1.2.1.dist-info/METADATA,,\n{record}"))
            .env("PYTHONPATH", "{dir}/site")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .args(&["probe", "--python", "python3"])
            .exit(1)
    };
    // Values that reach the CI log on stderr (outside the report's stopped-commands block).
    let planted = |name: &str, project: &str| {
        Case::new(format!("ci log: {name}")).file("pins.toml", PINS).args(&[
            "lock",
            "check",
            "--format",
            "github",
            "--project",
            project,
        ])
    };
    vec![
        planted("a newline plants no annotation", "nope\n::error file=x::pwned")
            .says("\\::error file=x::pwned")
            .hides("\n::error file=x::pwned"),
        planted("old-style commands and leading blanks", "nope\n  ##[warning]pwned\n\t::warning::pwned")
            .hides("\n  ##[warning]")
            .hides("\n\t::warning"),
        planted("CR and ESC are shown escaped", "nope\r::error::cr\x1b]0;title\x07\x1b[2J")
            .says("\\r::error::cr\\u{1b}]0;title\\u{7}\\u{1b}[2J")
            .hides("\r")
            .hides("\x1b"),
        env("RECORD names /dev/zero", "/dev/zero,sha256=AAAA,1\n").says("not a regular file"),
        env("RECORD names a FIFO", "../fifo,sha256=AAAA,1\n")
            .setup(|d| fifo(&d.join("fifo")))
            .says("not a regular file"),
        Case::new("docker bake --check: bake file is /dev/zero")
            .file("pins.toml", PINS)
            .setup(|d| symlink("/dev/zero", &d.join("docker/docker-bake.json")))
            .args(&["docker", "bake", "--check"])
            // read through its folder's tree: a link out of it is refused, never opened
            .says("docker-bake.json leads outside the folder"),
        Case::new("docker bake --check: bake file is a FIFO")
            .file("pins.toml", PINS)
            .setup(|d| fifo(&d.join("docker/docker-bake.json")))
            .args(&["docker", "bake", "--check"])
            .says("not a regular file"),
    ]
}

fn pin_set_cases() -> Vec<Case> {
    let set = |name: &str| {
        Case::new(format!("pin set: {name}")).file("pins.toml", PINS).args(&[
            "pin",
            "set",
            REV,
            "--project",
            "consumer",
        ])
    };
    let mut v = in_tree(unreadable_cases(
        "pin set: pyproject",
        "consumer/pyproject.toml",
        &["pin", "set", REV, "--project", "consumer"],
        &[("pins.toml", PINS)],
    ));
    v.extend(in_tree(
        unreadable("pins.toml")
            .into_iter()
            .map(|(how, mut c)| {
                c.name = format!("pin set: pins {how}");
                c.file("consumer/pyproject.toml", PYPROJECT)
                    .args(&["pin", "set", REV, "--project", "consumer"])
                    .says("pins.toml")
            })
            .collect(),
    ));
    v.extend([
        set("--source is an option").file("consumer/pyproject.toml", PYPROJECT).args(&["--source", "--upload-pack=touch {dir}/pwned"]).absent("pwned"),
        set("--source ext::").file("consumer/pyproject.toml", PYPROJECT).args(&["--source", "ext::sh -c touch% {dir}/pwned"]).says("not a URL").absent("pwned"),
        set("rev is an option").file("consumer/pyproject.toml", PYPROJECT).args(&["--source", ".", "--", "--output=x"]).absent("x"),
        set("escaped requirement reports its line")
            .file(
                "consumer/pyproject.toml",
                "[project]\nname = \"c\"\n\ndependencies = [\n  \"deep\\u005Fep @ git+https://github.com/deepseek-ai/DeepEP.git@v1 ; platform_machine == 'x86_64' and python_version > '3'\",\n]\n",
            )
            .says("pyproject.toml:5:"),
    ]);
    v
}

// ---- journal: `pin set` journals, project locks, verify's trust (issue 20, section 8) ----

const X86_REV: &str = "29d31c095796f3c8ece47ee9cdcc167051bbeed9";

/// A repository `repo/` (pins.toml inside) whose pyproject.toml links out of it
/// to `outside/pyproject.toml`, with a committed journal naming that target.
fn pr_with_journal_and_outward_link(d: &Path) {
    git_root(&d.join("repo"));
    std::fs::create_dir_all(d.join("outside")).unwrap();
    std::fs::write(d.join("repo/pins.toml"), PINS).unwrap();
    std::fs::write(d.join("outside/pyproject.toml"), PYPROJECT).unwrap();
    symlink("../outside/pyproject.toml", &d.join("repo/pyproject.toml"));
    let target = d.join("outside/pyproject.toml");
    let journal = format!(
        "{{\"schema\":1,\"pid\":1,\"started\":\"x\",\"command\":\"c\",\"files\":[{{\"path\":{:?},\"old\":\"cHduZWQ=\",\"new_sha256\":null}}]}}",
        target.to_str().unwrap()
    );
    std::fs::write(d.join("repo/.deepep-forge-pin-set.journal"), journal).unwrap();
}

fn journal_cases() -> Vec<Case> {
    let in_repo = ["--project", "repo", "--pins", "repo/pins.toml"];
    vec![
        Case::new("journal: pin set with a committed journal and pyproject.toml linked out of the repository")
            .setup(pr_with_journal_and_outward_link)
            .args(&["pin", "set", X86_REV])
            .args(&in_repo)
            .says("is ignored: a journal in the project tree is never trusted")
            .says("outside {dir}/repo: pin set writes only the project's own files"),
        Case::new("journal: pin recover with a committed journal and pyproject.toml linked out of the repository")
            .setup(pr_with_journal_and_outward_link)
            .args(&["pin", "recover"])
            .args(&in_repo)
            .says("it is not trusted, so nothing was restored"),
        Case::new("journal: pins.toml linked out of the repository")
            .setup(|d| {
                git_root(&d.join("repo"));
                std::fs::write(d.join("repo/pyproject.toml"), PYPROJECT).unwrap();
                std::fs::write(d.join("elsewhere.toml"), PINS).unwrap();
                symlink("../elsewhere.toml", &d.join("repo/pins.toml"));
            })
            .args(&["pin", "set", X86_REV])
            .args(&in_repo)
            .says("repo/pins.toml is a symlink to {dir}/elsewhere.toml, outside {dir}/repo"),
        Case::new("journal: a FIFO as the committed journal does not block pin recover")
            .file("pyproject.toml", PYPROJECT)
            .file("pins.toml", PINS)
            .setup(|d| fifo(&d.join(".deepep-forge-pin-set.journal")))
            .args(&["pin", "recover"])
            .says("it is not trusted"),
        Case::new("journal: a state folder others can enter")
            .file("pyproject.toml", PYPROJECT)
            .file("pins.toml", PINS)
            .setup(|d| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::create_dir_all(d.join("state/deepep-forge/pin-set")).unwrap();
                std::fs::set_permissions(d.join("state/deepep-forge/pin-set"), std::fs::Permissions::from_mode(0o755))
                    .unwrap();
            })
            .env("XDG_STATE_HOME", "{dir}/state")
            .args(&["pin", "set", X86_REV])
            .exit(3)
            .says("is not a private folder of this user's"),
        Case::new("journal: a non-UTF-8 --project is named in the message")
            .file("pins.toml", PINS)
            .args(&["pin", "set", X86_REV, "--project"])
            .arg_bytes(b"nope\xff")
            .says("nope\\xff")
            .says("not UTF-8"),
    ]
}

/// Another user's leftover lock file in a shared cache folder: exit 3 naming
/// it, with a hint, never exit 1 "Permission denied". Run as root, the binary
/// runs as nobody (uid 65534) against a lock file root left (0644); run as
/// another user, the lock file is made read-only, which gives the same EACCES
/// when it is opened for writing.
#[test]
fn journal_another_users_lock_file_is_exit_3_with_a_hint() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let d = tempfile::tempdir().unwrap();
    let cache = d.path().join("cache");
    std::fs::create_dir_all(cache.join("tmp/build-left")).unwrap();
    let lock = cache.join("tmp/build-left.lock");
    std::fs::write(&lock, "").unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    // As nobody, the binary must be reachable: the checkout may sit in a 0700 folder
    // (a `mktemp -d` clone), so nobody runs a copy in the test's own folder.
    let exe = if root {
        let copy = d.path().join("deepep-forge");
        std::fs::copy(crate::support::exe(), &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
        copy
    } else {
        crate::support::exe().to_path_buf()
    };
    let mut c = std::process::Command::new(&exe);
    c.args(["cache", "gc", "--cache-dir"]).arg(&cache).env("XDG_CONFIG_HOME", d.path().join("config"));
    if root {
        for p in [d.path(), &cache, &cache.join("tmp")] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o644)).unwrap();
        c.uid(65534).gid(65534).env("HOME", d.path());
    } else {
        std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o444)).unwrap();
    }
    // The copy was just written: a child forked meanwhile may hold it open (ETXTBSY).
    let o = crate::support::output_of_fresh_program(&mut c);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains(&format!("cannot take the lock {}", lock.display())), "{err}");
    assert!(err.contains("hint: another user's run left it"), "{err}");
    assert!(cache.join("tmp/build-left").is_dir(), "nothing removed");
}

#[test]
fn hostile_inputs_are_refused_cleanly() {
    let mut cases = Vec::new();
    cases.extend(pins_cases());
    cases.extend(lock_cases());
    cases.extend(dockerfile_cases());
    cases.extend(recipe_cases());
    cases.extend(wheel_cases());
    cases.extend(flag_cases());
    cases.extend(pin_set_cases());
    cases.extend(misc_cases());
    cases.extend(journal_cases());
    assert!(cases.len() >= 110, "{} cases", cases.len());
    run_all(cases);
}

/// `deepep-forge ... | head -1`: a closed stdout ends the process by SIGPIPE
/// (the shell's 141), never by a panic (exit 101).
#[test]
fn a_closed_stdout_is_not_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pins.toml"), PINS).unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = support::bin()
        .args(["pins", "show", "--format", "json"])
        .current_dir(dir.path())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(o.status.signal(), Some(libc::SIGPIPE), "{:?}: {err}", o.status);
}

/// git as deepep-forge runs it, on real repositories: a repository named in a
/// file may not use local transports (so a pin's submodules cannot pull local
/// repositories), `ext::` never runs, and a value shaped as an option is not one.
#[test]
fn hardened_git_refuses_local_and_ext_transports_for_file_named_repos() {
    use forge_os::process::git::{git, Trust};
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    support::git_repo_from_fixture("recipes", &src);
    let clone = |trust: Trust, url: &str, to: &str| {
        git(d.path(), trust, "test clone").args(["clone", "-q", "--", url, to]).capture().unwrap()
    };
    let o = clone(Trust::File, src.to_str().unwrap(), "a");
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("not allowed"), "{o:?}");
    let o = clone(Trust::File, &format!("file://{}", src.display()), "b");
    assert!(!o.status.success(), "{o:?}");
    let o = clone(Trust::User, src.to_str().unwrap(), "c");
    assert!(o.status.success(), "{o:?}");
    let marker = d.path().join("pwned");
    for trust in [Trust::User, Trust::File] {
        let o = clone(trust, &format!("ext::sh -c touch% {}", marker.display()), "e");
        assert!(!o.status.success(), "{o:?}");
        assert!(!marker.exists(), "ext:: ran a command");
    }
    // After `--`, `--upload-pack=...` is a (missing) repository, not an option.
    let o = clone(Trust::User, &format!("--upload-pack=touch {}", marker.display()), "f");
    assert!(!o.status.success() && !marker.exists(), "{o:?}");

    // A repository whose submodule is a local path: its checkout under File trust fails.
    let sub = d.path().join("sub");
    support::git_repo_from_fixture("recipes", &sub);
    support::git(&src, &["submodule", "add", "-q", sub.to_str().unwrap(), "third"]);
    support::git(&src, &["commit", "-qm", "sub"]);
    let tree = d.path().join("c");
    support::git(&tree, &["pull", "-q", "origin", "main"]);
    let o = git(&tree, Trust::File, "test submodule")
        .args(["submodule", "update", "--init", "--", "third"])
        .capture()
        .unwrap();
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("not allowed"), "{o:?}");
    let o = git(&tree, Trust::User, "test submodule")
        .args(["submodule", "update", "--init", "--", "third"])
        .capture()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
}

/// A relative `--cache-dir` with a plain-folder `--source`: the snapshot
/// repository is found although git runs inside the source folder.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (.ci/setup-tools): bash .ci/run runs it")]
fn a_relative_cache_dir_works_with_a_folder_source() {
    let python = require!(support::tools_python(), "tools venv");
    let d = tempfile::tempdir().unwrap();
    let o = support::bin()
        .args(["plan", "--all", "--format", "json", "--cache-dir", "rel-cache", "--pins"])
        .arg(support::root().join("tests/fixtures/demo-pins.toml"))
        .arg("--source")
        .arg(support::root().join("tests/fixtures/mini-deepep"))
        .arg("--python")
        .arg(&python)
        .current_dir(d.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", support::stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let repo = j["plans"][0]["source"]["repo"].as_str().unwrap();
    assert!(repo.starts_with(d.path().canonicalize().unwrap().join("rel-cache").to_str().unwrap()), "{repo}");
}
