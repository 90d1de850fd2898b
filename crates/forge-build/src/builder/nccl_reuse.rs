//! NCCL built once per submodule commit. DeepEP's DOCA multinode path runs
//! `make -j src.build NVCC_GENCODE=...` in `third-party/nccl` (about 600 CUDA
//! compiles for real NCCL) and links the doca-gpunetio objects it leaves in
//! `third-party/nccl/build`. That folder depends only on the submodule commit,
//! NVCC_GENCODE (from TORCH_CUDA_ARCH_LIST, as setup.py derives it), nvcc, the
//! host compiler and the variables that reach NCCL's make: [`attach`] keys it
//! on exactly those (the plan's [`NcclReuse`] step); [`before`] puts a stored
//! folder in place in the fresh checkout (every file newer than the sources,
//! so setup.py's own `make src.build` finds it up to date: DeepEP's source is
//! never changed), [`after`] stores the folder a fresh build made. The wheel's
//! bytes and its cache key are the same with and without it; a refused entry
//! (corrupt, hostile) is a note, and NCCL is built from source.
//! Must not decide the build's argv or environment, nor change its key.
use std::collections::BTreeMap;
use std::path::Path;

use super::plan::{EnvOrigin, NcclKeyInputs, NcclReuse, Plan};
use forge_os::fs::{Kind, Tree};
use forge_store::cache::{tree::Trees, Key};

pub const SUBMODULE: &str = "third-party/nccl";
/// The folder NCCL's make writes (`BUILDDIR ?= $(abspath ./build)`).
pub const BUILD_DIR: &str = "build";

/// Names NCCL's makefiles read (makefiles/common.mk, src/Makefile at the
/// submodule commit DeepEP's hybrid-ep pins): a DeepEP knob of one of these
/// names reaches NCCL's build and is keyed; other knobs are DeepEP's alone.
const NCCL_MAKE_VARS: &[&str] = &[
    "ASAN",
    "BUILDDIR",
    "CC",
    "CUDA_HOME",
    "CUDA_INC",
    "CUDA_LIB",
    "CUDARTLIB",
    "CXX",
    "CXXFLAGS",
    "DEBUG",
    "DOCA_HOME",
    "EMIT_LLVM_IR",
    "GCOV",
    "KEEP",
    "LDFLAGS",
    "MAX_EXT_NET_PLUGINS",
    "MLX5DV",
    "NET_PROFILER",
    "NVCC",
    "NVCC_GENCODE",
    "NVCUFLAGS",
    "NVTX",
    "PREFIX",
    "PROFAPI",
    "RDMA_CORE",
    "TRACE",
    "UBSAN",
    "VERBOSE",
    "WERROR",
];
/// Keyed variables of the plan that never reach NCCL's objects: the commit time (NCCL's
/// sources use no `__DATE__`/`__TIME__`), pip's configuration, torch's nvcc.
const NOT_NCCL: &[&str] = &["SOURCE_DATE_EPOCH", "PIP_CONFIG_FILE", "PYTORCH_NVCC"];

/// Give the plan its NCCL step when it builds NCCL from the submodule under a
/// build root (this user's: the same absolute paths in each of their builds,
/// which make's dependency files record; the root is in the key) and `on`.
/// `setup_py`: DeepEP's setup.py at the pin.
pub fn attach(pl: &mut Plan, setup_py: Option<&str>, cache_dir: &Path, on: bool) {
    pl.nccl_reuse = None;
    let (Some(setup), Some(commit), Some(tc)) = (setup_py, pl.source.submodules.get(SUBMODULE), pl.toolchain()) else {
        return;
    };
    if !on || pl.hooks.is_none() || !setup.contains("src.build") {
        return;
    }
    let arch_list =
        pl.run.env.get("TORCH_CUDA_ARCH_LIST").cloned().unwrap_or_else(|| pl.variant.cuda_arch_list.clone());
    let Some(nvcc_gencode) = nvcc_gencode(&arch_list) else { return };
    let inputs = NcclKeyInputs {
        tool: concat!("deepep-forge ", env!("CARGO_PKG_VERSION")).into(),
        root: pl.build_dir().to_string_lossy().into_owned(),
        commit: commit.clone(),
        nvcc_gencode: nvcc_gencode.clone(),
        recipe: recipe_digest(setup),
        nvcc: tc.nvcc_version.clone(),
        compilers: tc.compilers.iter().map(|(k, c)| (k.clone(), c.version.clone())).collect(),
        host: std::env::consts::ARCH.into(),
        env: make_env(pl),
    };
    let key = forge_os::input::sha256_hex(&serde_json::to_vec(&inputs).expect("plain data serialises"));
    let entry = Trees::at(cache_dir).entry_path(&Key::parse(&key).expect("a sha256 is a key"));
    pl.nccl_reuse = Some(NcclReuse {
        submodule: SUBMODULE.into(),
        build_dir: BUILD_DIR.into(),
        commit: commit.clone(),
        nvcc_gencode,
        key,
        inputs,
        entry,
    });
}

/// The variables that reach NCCL's make, path-free (see [`NcclKeyInputs::env`]).
fn make_env(pl: &Plan) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = pl
        .portable
        .env
        .iter()
        .filter(|(k, _)| !NOT_NCCL.contains(&k.as_str()))
        .filter(|(k, _)| pl.run.env_origin.get(*k) != Some(&EnvOrigin::Knob) || NCCL_MAKE_VARS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(v) = pl.run.env.get("MAKEFLAGS") {
        env.insert("MAKEFLAGS".into(), pl.roots.portable(v));
    }
    env
}

/// DeepEP's `to_nvcc_gencode`: `9.0 10.0a` -> `-gencode=arch=compute_90,code=sm_90
/// -gencode=arch=compute_100a,code=sm_100a` (`+PTX` adds the PTX, as the fixture's does).
/// None for an entry setup.py would refuse.
pub fn nvcc_gencode(arch_list: &str) -> Option<String> {
    let mut flags = Vec::new();
    for part in arch_list.split([',', ' ', '\t', '\n', ';']).filter(|p| !p.is_empty()) {
        let (v, ptx) = match part.strip_suffix("+PTX") {
            Some(v) => (v, true),
            None => (part, false),
        };
        let (major, rest) = v.split_once('.')?;
        let digits = rest.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        let suffix = &rest[digits.len()..];
        let num = |s: &str| (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse::<u32>().ok())?;
        if suffix.len() > 1 {
            return None;
        }
        let arch = format!("{}{}{}", num(major)?, num(digits)?, suffix.to_ascii_lowercase());
        flags.push(format!("-gencode=arch=compute_{arch},code=sm_{arch}"));
        if ptx {
            flags.push(format!("-gencode=arch=compute_{arch},code=compute_{arch}"));
        }
    }
    (!flags.is_empty()).then(|| flags.join(" "))
}

/// sha256 of [`recipe`]: the part of the NCCL key setup.py gives.
pub fn recipe_digest(setup: &str) -> String {
    forge_os::input::sha256_hex(recipe(setup).as_bytes())
}

/// What in setup.py decides NCCL's build, without the layout around it: the function
/// deriving NVCC_GENCODE (a `def` whose name holds `gencode`), the make command's
/// argument list (the `[...]` holding `src.build`) and any `env=` within three lines of
/// it, each line trimmed. (`cwd=`, `check=True` or a changed indent change nothing.)
fn recipe(setup: &str) -> String {
    let lines: Vec<&str> = setup.lines().collect();
    let mut out = Vec::new();
    let mut in_def = false;
    for (i, l) in lines.iter().enumerate() {
        if !l.starts_with([' ', '\t']) && !l.trim().is_empty() {
            in_def = l.starts_with("def ") && l.contains("gencode");
        }
        if in_def && !l.trim().is_empty() {
            out.push(l.trim().to_string());
        }
        if let Some(at) = l.find("src.build") {
            let open = l[..at].rfind('[');
            let close = l[at..].find(']').map(|c| at + c);
            out.push(match (open, close) {
                (Some(o), Some(c)) => l[o..=c].to_string(),
                _ => l.trim().to_string(),
            });
            let near = lines[i.saturating_sub(3)..(i + 4).min(lines.len())].iter();
            out.extend(near.filter(|n| n.contains("env=")).map(|n| n.trim().to_string()));
        }
    }
    out.join("\n")
}

/// What [`before`] did.
pub enum Before {
    /// No NCCL step in the plan.
    Off,
    /// Restored: nothing to store after the build.
    Restored,
    /// Not stored (or refused): store after a fresh build.
    Store,
}

/// Before the plan's command, after the checkout: the stored build folder of the
/// key, restored into the submodule (files dated now, after every source file the
/// checkout wrote), else nothing. A refused entry is removed, said in a note, and
/// NCCL is built from source. `checkout`: the plan's checkout ([`Plan::tree`]).
pub fn before(pl: &Plan, checkout: &Tree, cache_dir: &Path, notes: &mut Vec<String>) -> Before {
    let Some(r) = &pl.nccl_reuse else { return Before::Off };
    let Ok(key) = Key::parse(&r.key) else { return Before::Off };
    let rel = Path::new(&r.submodule).join(&r.build_dir);
    let dest = checkout.join(&rel);
    if checkout.kind(&rel).map_or(true, |k| k != Kind::Missing) {
        notes.push(format!("nccl reuse: {} already exists in the checkout; NCCL is built by setup.py", dest.display()));
        return Before::Off;
    }
    let trees = Trees::at(cache_dir);
    let short = &r.commit[..r.commit.len().min(7)];
    match trees.restore(&key, &dest, std::time::SystemTime::now()) {
        Ok(Some(m)) => {
            notes.push(format!(
                "nccl reuse: {}/{} at {short} restored from the cache ({} files, {:.1} MB, key {}) before setup.py's `make src.build`",
                r.submodule,
                r.build_dir,
                m.files,
                m.bytes as f64 / 1e6,
                &r.key[..12]
            ));
            Before::Restored
        }
        Ok(None) => Before::Store,
        Err(e) => {
            let _ = checkout.remove_all(&rel);
            trees.forget(&key);
            notes.push(format!(
                "nccl reuse: the stored build of {} at {short} (key {}) was refused and removed ({e:#}); NCCL is built from source",
                r.submodule,
                &r.key[..12]
            ));
            Before::Store
        }
    }
}

/// After a fresh build that succeeded: the submodule's build folder stored under the
/// key. A folder that cannot be stored is a note, never a failed build.
pub fn after(pl: &Plan, checkout: &Tree, cache_dir: &Path, before: Before, notes: &mut Vec<String>) {
    let (Before::Store, Some(r)) = (before, &pl.nccl_reuse) else { return };
    let Ok(key) = Key::parse(&r.key) else { return };
    let rel = Path::new(&r.submodule).join(&r.build_dir);
    let dir = checkout.join(&rel);
    let short = &r.commit[..r.commit.len().min(7)];
    if checkout.kind(&rel).map_or(true, |k| k != Kind::Dir) {
        notes.push(format!("nccl reuse: the build made no {}/{}: nothing stored", r.submodule, r.build_dir));
        return;
    }
    let label = format!("{}/{} at {short}", r.submodule, r.build_dir);
    match Trees::at(cache_dir).store(&key, &label, &dir) {
        Ok(m) => notes.push(format!(
            "nccl reuse: {label} built by setup.py and stored ({} files, {:.1} MB, key {})",
            m.files,
            m.bytes as f64 / 1e6,
            &r.key[..12]
        )),
        Err(e) => notes.push(format!("nccl reuse: {label} not stored: {e:#}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gencode_as_deep_ep_derives_it() {
        assert_eq!(nvcc_gencode("9.0").as_deref(), Some("-gencode=arch=compute_90,code=sm_90"));
        assert_eq!(
            nvcc_gencode("9.0 10.0a;12.0").as_deref(),
            Some("-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_100a,code=sm_100a -gencode=arch=compute_120,code=sm_120")
        );
        assert_eq!(
            nvcc_gencode("9.0+PTX").as_deref(),
            Some("-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90")
        );
        for bad in ["", "9", "9.x", "sm_90", "9.0ab", "../9.0"] {
            assert_eq!(nvcc_gencode(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_recipe_is_the_gencode_function_and_the_make_command() {
        let setup = "import os\n\ndef to_nvcc_gencode(s):\n    return s\n\ndef other():\n    a = 1\n    subprocess.run(['make', 'src.build'], cwd=d)\n    e = 5\n";
        let r = recipe(setup);
        assert_eq!(r, "def to_nvcc_gencode(s):\nreturn s\n['make', 'src.build']");
        // Layout, other code, cwd= or check= change nothing; the command, the function or an env= does.
        assert_eq!(recipe(&setup.replace("import os", "import sys").replace("cwd=d)", "cwd=d, check=True)")), r);
        assert_eq!(recipe(&setup.replace("    subprocess.run(", "        x = subprocess.run(")), r);
        assert_ne!(recipe(&setup.replace("'src.build'", "'src.build', 'DEBUG=1'")), r);
        assert_ne!(recipe(&setup.replace("return s", "return s + '+PTX'")), r);
        assert_ne!(recipe(&setup.replace("e = 5", "env={'DEBUG': '1'},")), r);
    }
}
