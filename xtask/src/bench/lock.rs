//! `cargo xtask bench lock`: `deepep-forge lock check --no-pins` as a whole
//! process (the release binary users install) on the largest NeMo-RL uv.lock
//! of the fixtures, against Python's `tomllib` parsing the same pyproject.toml
//! and uv.lock, timed in-process (`time.perf_counter` around the two
//! `tomllib.load` calls, one interpreter, the same number of runs): the parse
//! alone, without the interpreter's start. Also a lock of 4x the packages made
//! from the real one ([`scaled`]), for linearity. Prints the medians, the ratio
//! (goal <= 0.10) and the 4x growth (goal <= 4.5); exits 1 when the ratio
//! exceeds `--max-ratio` or the growth `--max-growth`, 3 when the fixtures
//! are missing (`DEEPEP_FORGE_NEMO_RL`, the shared fixtures folder or
//! `target/nemo-rl`). `DEEPEP_FORGE_BIN` names another deepep-forge binary
//! (then nothing is built).
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use forge_os::error::Exit;
use xshell::{cmd, Shell};

#[derive(Debug, clap::Args)]
pub struct LockArgs {
    /// `lock`: fail (exit 1) when deepep-forge / tomllib exceeds this.
    #[arg(long, default_value_t = 0.3)]
    pub max_ratio: f64,
    /// `lock`: fail (exit 1) when the 4x lock takes more than this many times the real one.
    #[arg(long, default_value_t = 6.0)]
    pub max_growth: f64,
    /// `lock`: runs of each measurement (medians).
    #[arg(long, default_value_t = 11)]
    pub runs: usize,
    /// `lock`: the cargo profile of the binary measured: `release` (what users
    /// install, thin LTO), `ci-bench` (the same code without LTO) or `dev` (the
    /// debug binary `cargo test` builds, with the lock-reading crates optimised:
    /// what .ci/run measures, with `DEEPEP_FORGE_BIN=target/debug/deepep-forge`,
    /// so CI builds nothing more; Cargo.toml says what each changes).
    #[arg(long, default_value = "release", value_parser = ["release", "ci-bench", "dev"])]
    pub profile: String,
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The folder under target/ of a cargo profile's binaries (`dev` builds into `debug`).
fn profile_dir(profile: &str) -> &str {
    if profile == "dev" {
        "debug"
    } else {
        profile
    }
}

/// The fixtures folder, if any of the places CI and dev keep it holds one.
fn fixtures(root: &Path) -> Option<PathBuf> {
    let env = std::env::var_os("DEEPEP_FORGE_NEMO_RL").map(PathBuf::from);
    env.into_iter().chain([root.join("../shared/fixtures/nemo-rl"), root.join("target/nemo-rl")]).find(|p| p.is_dir())
}

/// The case with the largest uv.lock.
fn largest(fixtures: &Path) -> Result<Option<PathBuf>> {
    let mut best: Option<(u64, PathBuf)> = None;
    for e in std::fs::read_dir(fixtures)? {
        let dir = e?.path();
        if let Ok(m) = std::fs::metadata(dir.join("uv.lock")) {
            if dir.join("pyproject.toml").is_file() && best.as_ref().is_none_or(|b| m.len() > b.0) {
                best = Some((m.len(), dir));
            }
        }
    }
    Ok(best.map(|b| b.1))
}

/// uv.lock with `k` copies of every `[[package]]` table but the project's own
/// (`editable = "."` / `virtual = "."`): copy `i` renames every `name = "x"` in
/// its table to `x-s<i>`, and the project's table gets each of its dependency
/// lines once per copy, renamed the same way, so the graph the check walks is
/// `k` times the real one (versions, markers and files unchanged).
pub fn scaled(text: &str, k: usize) -> String {
    let starts: Vec<usize> = text.match_indices("\n[[package]]\n").map(|(i, _)| i + 1).collect();
    let Some(&first) = starts.first() else { return text.to_string() };
    let mut out = String::with_capacity(text.len() * k);
    out.push_str(&text[..first]);
    let blocks: Vec<&str> =
        starts.iter().enumerate().map(|(j, &s)| &text[s..starts.get(j + 1).copied().unwrap_or(text.len())]).collect();
    let own = |b: &str| b.contains("source = { editable = \".\" }") || b.contains("source = { virtual = \".\" }");
    for b in &blocks {
        if own(b) {
            for line in b.split_inclusive('\n') {
                out.push_str(line);
                if line.starts_with("    { name = \"") {
                    for i in 1..k {
                        out.push_str(&rename(line, i));
                    }
                }
            }
        } else {
            out.push_str(b);
        }
    }
    for i in 1..k {
        for b in blocks.iter().filter(|b| !own(b)) {
            out.push_str(&rename(b, i));
        }
    }
    out
}

/// Every `name = "x"` in `s` as `name = "x-s<i>"`.
fn rename(s: &str, i: usize) -> String {
    let key = "name = \"";
    let mut out = String::with_capacity(s.len() + 64);
    let mut rest = s;
    while let Some(p) = rest.find(key) {
        let after = &rest[p + key.len()..];
        let end = after.find('"').unwrap_or(after.len());
        out.push_str(&rest[..p + key.len()]);
        out.push_str(&after[..end]);
        out.push_str(&format!("-s{i}"));
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Median wall time of `exe lock check --no-pins --project dir` (findings: exit 1, fine).
fn forge(sh: &Shell, exe: &Path, dir: &Path, runs: usize) -> Result<Duration> {
    let mut out = Vec::with_capacity(runs);
    for i in 0..=runs {
        let c = cmd!(sh, "{exe} lock check --no-pins --format json --project {dir}").quiet().ignore_status();
        let t = Instant::now();
        let o = c.output().context("running deepep-forge lock check")?;
        let dt = t.elapsed();
        let code = o.status.code().unwrap_or(-1);
        if code != 0 && code != 1 {
            bail!("lock check on {} exited {code}: {}", dir.display(), String::from_utf8_lossy(&o.stderr));
        }
        if i > 0 {
            out.push(dt);
        }
    }
    Ok(median(out))
}

/// Median of `runs` in-process parses of the two files by tomllib.
fn tomllib(sh: &Shell, python: &Path, dir: &Path, runs: usize) -> Result<Duration> {
    let script = "import sys, time, tomllib\n\
                  runs = int(sys.argv[1])\n\
                  ts = []\n\
                  for i in range(runs + 1):\n\
                  \x20   t = time.perf_counter()\n\
                  \x20   for f in sys.argv[2:]:\n\
                  \x20       with open(f, 'rb') as fh: tomllib.load(fh)\n\
                  \x20   ts.append(time.perf_counter() - t)\n\
                  ts = sorted(ts[1:])\n\
                  print(ts[len(ts) // 2])\n";
    let (py, lock, n) = (dir.join("pyproject.toml"), dir.join("uv.lock"), runs.to_string());
    let out = cmd!(sh, "{python} -c {script} {n} {py} {lock}").quiet().read()?;
    let s: f64 = out.trim().parse().with_context(|| format!("tomllib timing: {out}"))?;
    Ok(Duration::from_secs_f64(s))
}

pub fn run(root: &Path, a: &LockArgs) -> Result<Exit> {
    let Some(case) = fixtures(root).map(|f| largest(&f)).transpose()?.flatten() else {
        eprintln!(
            "error: no NeMo-RL fixtures (a folder with pyproject.toml and uv.lock): set DEEPEP_FORGE_NEMO_RL, or run .ci/fetch-nemo-rl"
        );
        return Ok(Exit::Environment);
    };
    let runs = a.runs.max(1);
    let sh = Shell::new()?;
    sh.change_dir(root);
    let exe = match std::env::var_os("DEEPEP_FORGE_BIN") {
        Some(b) => PathBuf::from(b),
        None => {
            let profile = &a.profile;
            cmd!(sh, "cargo build --quiet --profile {profile} -p deepep-forge").run()?;
            root.join("target").join(profile_dir(profile)).join("deepep-forge")
        }
    };
    let venv = root.join("target/tools-venv/bin/python");
    let python = if venv.exists() { venv } else { PathBuf::from("python3") };
    let tmp = tempfile::tempdir()?;
    let big = tmp.path().join("x4");
    std::fs::create_dir_all(&big)?;
    std::fs::copy(case.join("pyproject.toml"), big.join("pyproject.toml"))?;
    let text = std::fs::read_to_string(case.join("uv.lock"))?;
    std::fs::write(big.join("uv.lock"), scaled(&text, 4))?;

    let f1 = forge(&sh, &exe, &case, runs)?;
    let p1 = tomllib(&sh, &python, &case, runs)?;
    let f4 = forge(&sh, &exe, &big, runs)?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (ratio, growth) = (f1.as_secs_f64() / p1.as_secs_f64(), f4.as_secs_f64() / f1.as_secs_f64());
    let size = |d: &Path| std::fs::metadata(d.join("uv.lock")).map(|m| m.len()).unwrap_or(0);
    println!(
        "lock check --no-pins on {} (uv.lock {} bytes; {}; medians of {runs})",
        case.display(),
        size(&case),
        exe.display()
    );
    println!("  deepep-forge lock check (whole process)         {:9.2} ms", ms(f1));
    println!("  python tomllib, both files (in-process parse)   {:9.2} ms", ms(p1));
    println!("  ratio {ratio:.3} (goal <= 0.10, fails above {})", a.max_ratio);
    println!("  4x lock ({} bytes): deepep-forge {:9.2} ms", size(&big), ms(f4));
    println!("  growth {growth:.2}x for 4x the packages (goal <= 4.5, fails above {})", a.max_growth);
    if ratio > a.max_ratio || growth > a.max_growth {
        eprintln!(
            "error: lock check is slower than its bound (ratio {ratio:.3} > {} or growth {growth:.2} > {})",
            a.max_ratio, a.max_growth
        );
        return Ok(Exit::Problems);
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_copies_every_table_but_the_projects_and_roots_the_copies() {
        let lock = "version = 1\n\n[[package]]\nname = \"app\"\nsource = { editable = \".\" }\ndependencies = [\n    { name = \"a\" },\n]\n\n[[package]]\nname = \"a\"\ndependencies = [\n    { name = \"b\", marker = \"x\" },\n]\n";
        let s = scaled(lock, 3);
        assert_eq!(s.matches("[[package]]").count(), 4, "the project once, `a` three times");
        for n in ["\"a-s1\"", "\"a-s2\"", "\"b-s1\"", "\"b-s2\""] {
            assert!(s.contains(&format!("    {{ name = {n}")), "{n}: {s}");
        }
        assert!(s.contains("name = \"a-s2\"\ndependencies") && !s.contains("app-s1"), "{s}");
    }
}
