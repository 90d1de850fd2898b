//! Honest platform tags (docs/platform-tags.md): the manylinux policy the tool
//! computes for a wheel's binaries, held against the real `auditwheel show`
//! (6.8.2, the version whose policy table the tool carries; installed into a
//! throwaway venv from PyPI by the tools venv's uv) on wheels whose shared
//! libraries gcc/g++ compiles here: one needing a glibc-only symbol version,
//! one a libstdc++ symbol version, one an external (excluded) library and one
//! a library no policy allows. The fixture is rebuilt in each test's tempdir.
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::tiny_wheel::{shared_library, tiny_wheel};
use crate::support::{exe, root, stderr, stdout, tools_venv};

/// A venv with auditwheel (and pyelftools, its ELF reader) in `dir`.
fn auditwheel(dir: &Path) -> PathBuf {
    let tools = require!(tools_venv(), "the tools venv (uv)");
    let venv = dir.join("aw");
    let uv = |args: &[&str]| {
        let o = Command::new(tools.join("bin/uv"))
            .args(args)
            .env("UV_CACHE_DIR", root().join("target/uv-cache"))
            .output()
            .unwrap();
        assert!(o.status.success(), "uv {args:?}: {}", stderr(&o));
    };
    uv(&["venv", "-q", venv.to_str().unwrap(), "--python", tools.join("bin/python").to_str().unwrap()]);
    let py = venv.join("bin/python");
    uv(&["pip", "install", "-q", "--python", py.to_str().unwrap(), "auditwheel==6.8.2", "pyelftools"]);
    venv.join("bin/auditwheel")
}

/// `auditwheel show --json`.
fn show(aw: &Path, wheel: &Path) -> serde_json::Value {
    let o = Command::new(aw).args(["show", "--json"]).arg(wheel).output().unwrap();
    assert!(o.status.success(), "auditwheel show: {}{}", stdout(&o), stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

/// The `platform-tag` checks of `probe --wheel --format json`.
fn probe(wheel: &Path) -> Vec<serde_json::Value> {
    let o = Command::new(exe()).args(["probe", "--wheel"]).arg(wheel).args(["--format", "json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    v["checks"].as_array().unwrap().iter().filter(|c| c["rule"] == "platform-tag").cloned().collect()
}

/// The tag the tool computes: `... the binaries need <tag> ...` in the platform-tag check.
fn computed(checks: &[serde_json::Value]) -> String {
    let text = checks.iter().map(|c| c["evidence"].as_str().unwrap()).find(|t| t.contains("the binaries need "));
    let text = text.unwrap_or_else(|| panic!("{checks:?}"));
    let rest = text.split("the binaries need ").nth(1).unwrap();
    rest.split([' ', ':']).next().unwrap().to_string()
}

/// A `linux_x86_64` wheel holding `fx/_ext.so` (plus `extra` members).
fn wheel(dir: &Path, ext: Vec<u8>, extra: &[(String, Vec<u8>)]) -> PathBuf {
    let mut files = vec![("fx/_ext.so".to_string(), ext)];
    files.extend(extra.iter().cloned());
    let w = tiny_wheel(&dir.join("w"), "fx", "1.0", &[], &files);
    let tagged = dir.join("fx-1.0-cp311-cp311-linux_x86_64.whl");
    std::fs::rename(w, &tagged).unwrap();
    tagged
}

/// gcc/g++ `src` (C or C++ by `lang`) into a shared library linking `-L<dir> -l<libs>`.
fn compile(work: &Path, lang: &str, src: &str, libs: &[&str]) -> Vec<u8> {
    std::fs::create_dir_all(work).unwrap();
    let (s, out) = (work.join(format!("ext.{lang}")), work.join("ext.so"));
    std::fs::write(&s, src).unwrap();
    let mut c = Command::new(if lang == "cc" { "g++" } else { "gcc" });
    c.args(["-shared", "-fPIC", "-O1", "-o"]).arg(&out).arg(&s).arg(format!("-L{}", work.display()));
    c.args(libs.iter().map(|l| format!("-l{l}")));
    let o = c.output().unwrap();
    assert!(o.status.success(), "compile: {}", stderr(&o));
    std::fs::read(out).unwrap()
}

/// A stub `lib<name>.so` (soname `soname`) to link against.
fn stub(work: &Path, name: &str, soname: &str) {
    let data = shared_library(&work.join("stub"), soname, "int stub_fn(void) { return 1; }\n");
    std::fs::write(work.join(format!("lib{name}.so")), data).unwrap();
}

const PTHREAD: &str = "#include <pthread.h>\nstatic void *f(void *x) { return x; }\n\
    int go(void) { pthread_t t; pthread_create(&t, 0, f, 0); return pthread_join(t, 0); }\n";
/// [`PTHREAD`] calling the stub library's function (so the linker keeps its NEEDED).
const CALLS_STUB: &str = "#include <pthread.h>\nstatic void *f(void *x) { return x; }\nint stub_fn(void);\n\
    int go(void) { pthread_t t; pthread_create(&t, 0, f, 0); return pthread_join(t, 0) + stub_fn(); }\n";

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (uv) and PyPI for auditwheel")]
fn computed_tags_agree_with_auditwheel_show() {
    let tmp = tempfile::tempdir().unwrap();
    let aw = auditwheel(tmp.path());

    // 1. A glibc-only symbol version (pthread_create@GLIBC_2.34, glibc >= 2.34 here).
    let d = tmp.path().join("glibc");
    let w = wheel(&d, compile(&d, "c", PTHREAD, &[]), &[]);
    let (ours, theirs) = (probe(&w), show(&aw, &w));
    assert_eq!(computed(&ours), theirs["overall_tag"].as_str().unwrap(), "{ours:?} {theirs}");
    assert!(ours[0]["evidence"].as_str().unwrap().contains("GLIBC_2.34 from libc.so.6 (pthread_create"), "{ours:?}");
    // Only old versions: the oldest policy, with its legacy alias in the tag set.
    let d = tmp.path().join("old");
    let w = wheel(&d, compile(&d, "c", "#include <string.h>\nint n(const char *s) { return strlen(s); }\n", &[]), &[]);
    let (ours, theirs) = (probe(&w), show(&aw, &w));
    assert_eq!(computed(&ours), "manylinux_2_5_x86_64.manylinux1_x86_64", "{ours:?}");
    assert_eq!(theirs["overall_tag"], "manylinux_2_5_x86_64", "{theirs}");

    // 2. A libstdc++ symbol version (std::string of the C++11 ABI: GLIBCXX_3.4.21).
    let d = tmp.path().join("cxx");
    let cxx = "#include <string>\nextern \"C\" int n(const char *s) { std::string x(s); x += s; return x.size(); }\n";
    let w = wheel(&d, compile(&d, "cc", cxx, &[]), &[]);
    let (ours, theirs) = (probe(&w), show(&aw, &w));
    assert_eq!(computed(&ours), theirs["overall_tag"].as_str().unwrap(), "{ours:?} {theirs}");
    assert!(theirs["versioned_symbols"]["libstdc++.so.6"].as_array().is_some_and(|v| !v.is_empty()), "{theirs}");

    // 3. An external library (libtorch.so): auditwheel's symbol tag (show does not exclude;
    //    `repair --exclude libtorch.so` would), it names the library it cannot place.
    let d = tmp.path().join("external");
    stub(&d, "torch", "libtorch.so");
    let w = wheel(&d, compile(&d, "c", CALLS_STUB, &["torch"]), &[]);
    let (ours, theirs) = (probe(&w), show(&aw, &w));
    assert_eq!(computed(&ours), theirs["sym_tag"].as_str().unwrap(), "{ours:?} {theirs}");
    assert!(theirs["external_libs"].get("libtorch.so").is_some(), "{theirs}");
    assert!(ours.iter().all(|c| !c["evidence"].as_str().unwrap().contains("no manylinux policy")), "{ours:?}");

    // 4. A library no policy allows and not external: auditwheel says linux; the tool names it.
    let d = tmp.path().join("forbidden");
    stub(&d, "foo", "libfoo.so.1");
    let w = wheel(&d, compile(&d, "c", CALLS_STUB, &["foo"]), &[]);
    let (ours, theirs) = (probe(&w), show(&aw, &w));
    assert_eq!(theirs["overall_tag"], "linux_x86_64", "{theirs}");
    assert!(theirs["external_libs"].get("libfoo.so.1").is_some(), "{theirs}");
    let named = ours
        .iter()
        .any(|c| c["status"] == "warn" && c["evidence"].as_str().unwrap().contains("fx/_ext.so needs libfoo.so.1"));
    assert!(named, "{ours:?}");
    // A member of the wheel is not external: shipped beside the extension, libfoo is fine.
    let lib = std::fs::read(d.join("libfoo.so")).unwrap();
    let w = wheel(&d.join("shipped"), compile(&d, "c", CALLS_STUB, &["foo"]), &[("fx/libfoo.so.1".into(), lib)]);
    let ours = probe(&w);
    assert!(ours.iter().all(|c| !c["evidence"].as_str().unwrap().contains("libfoo")), "{ours:?}");
}

#[test]
fn a_tag_that_claims_less_than_the_binaries_need_fails_the_probe() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let w = wheel(d, compile(d, "c", PTHREAD, &[]), &[]);
    let hand = d.join("fx-1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl");
    std::fs::rename(&w, &hand).unwrap();
    let checks = probe(&hand);
    let fail = checks.iter().find(|c| c["status"] == "fail").unwrap_or_else(|| panic!("{checks:?}"));
    let text = fail["evidence"].as_str().unwrap();
    assert!(text.contains("claims less than the binaries need: manylinux_2_34_x86_64"), "{text}");
    assert!(text.contains("GLIBC_2.34"), "{text}");
}

/// The floor journey: pins.toml `[toolchain] manylinux = "2_28"` and a build on this machine
/// (whose gcc and glibc 2.36 give the fixture GLIBC_2.34) fails naming the symbols, writes
/// nothing; the floor the docs say to set when the users run 2.34 builds a wheel tagged
/// `manylinux_2_34_x86_64` (file name, WHEEL, RECORD, provenance) that `twine check` passes;
/// a floor no policy names is bad input at its line and column.
#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc and uv)")]
fn a_build_above_the_floor_fails_naming_its_symbols_and_a_tagged_wheel_passes_twine() {
    let (tools, cuda) =
        (require!(tools_venv(), "the tools venv (nvcc)"), require!(crate::support::cuda_home(), "nvcc"));
    let d = tempfile::tempdir().unwrap();
    let p = |rel: &str| d.path().join(rel);
    let pins = |floor: &str| {
        let demo = std::fs::read_to_string(root().join("tests/fixtures/demo-pins.toml")).unwrap();
        let toolchain = format!("\n[toolchain]\ntorch = \"2.11.0\"\ncuda = \"13.0\"\nmanylinux = \"{floor}\"\n");
        std::fs::write(p("pins.toml"), demo + &toolchain).unwrap();
    };
    let path_env = format!("{}:{}", tools.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let source = root().join("tests/fixtures/mini-deepep");
    let build = || {
        let mut c = Command::new(exe());
        c.args(["build-wheel", "--pins", "pins.toml", "--variant", "demo", "--source", source.to_str().unwrap()])
            .args(["--python", tools.join("bin/python").to_str().unwrap(), "--out", "dist"])
            .current_dir(d.path())
            .env("DEEPEP_FORGE_CACHE_DIR", p("cache"))
            .env("CUDA_HOME", &cuda)
            .env("PATH", &path_env);
        for k in ["TORCH_CUDA_ARCH_LIST", "HYBRID_EP_MULTINODE", "NVSHMEM_DIR", "MAX_JOBS", "CC", "CXX"] {
            c.env_remove(k);
        }
        c.output().unwrap()
    };
    pins("2_99");
    let o = Command::new(exe()).args(["pins", "check", "--pins", "pins.toml"]).current_dir(d.path()).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("pins.toml:") && stderr(&o).contains("toolchain.manylinux `2_99`"), "{}", stderr(&o));

    pins("2_28");
    let o = build();
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("needs manylinux_2_34 but pins.toml's floor is manylinux_2_28"), "{err}");
    assert!(err.contains("GLIBC_2.34 from libc.so.6"), "{err}");
    assert!(err.contains("older glibc"), "{err}");
    assert!(!p("dist").join("SHA256SUMS").exists(), "nothing delivered");

    pins("2_34");
    let o = build();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let wheel = p("dist/deep_ep-1.2.1+0bfa6c2-cp311-cp311-manylinux_2_34_x86_64.whl");
    assert!(wheel.is_file(), "{}", stdout(&o));
    let mut z = zip::ZipArchive::new(std::fs::File::open(&wheel).unwrap()).unwrap();
    let mut read = |m: &str| {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut z.by_name(m).unwrap(), &mut s).unwrap();
        s
    };
    let di = "deep_ep-1.2.1+0bfa6c2.dist-info";
    let w = read(&format!("{di}/WHEEL"));
    assert!(w.contains("Tag: cp311-cp311-manylinux_2_34_x86_64\n") && !w.contains("linux_x86_64\n\n"), "{w}");
    assert!(!w.contains("Tag: cp311-cp311-linux_x86_64"), "{w}");
    let prov: serde_json::Value = serde_json::from_str(&read(&format!("{di}/deepep-forge-provenance.json"))).unwrap();
    assert_eq!(prov["platform"]["tag"], "manylinux_2_34_x86_64", "{prov}");
    assert_eq!(prov["platform"]["policy"], "manylinux_2_34", "{prov}");
    assert!(read(&format!("{di}/RECORD")).contains(&format!("{di}/WHEEL,sha256=")));

    // twine check, from a throwaway venv (twine is not in the tools venv).
    let venv = p("twine");
    let uv = |args: &[&str]| {
        let o = Command::new(tools.join("bin/uv"))
            .args(args)
            .env("UV_CACHE_DIR", root().join("target/uv-cache"))
            .output()
            .unwrap();
        assert!(o.status.success(), "uv {args:?}: {}", stderr(&o));
    };
    uv(&["venv", "-q", venv.to_str().unwrap(), "--python", tools.join("bin/python").to_str().unwrap()]);
    uv(&["pip", "install", "-q", "--python", venv.join("bin/python").to_str().unwrap(), "twine"]);
    // Not `--strict`: the fixture's setup.py (like DeepEP's) gives no long_description, a warning there.
    let o = Command::new(venv.join("bin/twine")).args(["check"]).arg(&wheel).output().unwrap();
    assert!(o.status.success(), "twine check: {}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("PASSED"), "{}", stdout(&o));
}
