//! git, hardened once for every caller. Every git child:
//! - refuses the `ext::` transport (it runs a command) and, for a repository
//!   named in a file (pins.toml, a consumer's `.gitmodules`), every transport
//!   but https, ssh and git, so such a file cannot make git read a local
//!   repository or run anything (`file://` and local paths are allowed only
//!   for a repository the user named on the command line, `--source`);
//! - never prompts (no terminal prompt, no askpass program, ssh in batch mode
//!   unless the user configured ssh themselves), runs no hooks and no fsmonitor;
//! - gets values that come from files after `--end-of-options` or `--`
//!   (callers use [`Git::value_args`] / put paths after `--`), so a value that
//!   starts with `-` is never an option.
//!
//! Must not decide what to fetch.
use std::path::Path;

use super::Cmd;
use crate::error::Failure;

/// Who named the repository git talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// The user, on the command line (`--source`): local paths and `file://` work.
    User,
    /// A file that may come from a pull request (pins.toml): https, ssh and git only.
    File,
}

/// A hardened git command in `dir` with a purpose for its errors.
pub fn git(dir: &Path, trust: Trust, purpose: impl Into<String>) -> Cmd {
    let mut c = Cmd::new("git", purpose);
    c.args(["-c", "protocol.ext.allow=never", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"]);
    match trust {
        Trust::User => {
            c.args(["-c", "protocol.file.allow=always"]);
        }
        Trust::File => {
            let file = if local_mirrors_allowed() { "protocol.file.allow=always" } else { "protocol.file.allow=never" };
            c.args([
                "-c",
                "protocol.allow=never",
                "-c",
                "protocol.https.allow=always",
                "-c",
                "protocol.ssh.allow=always",
                "-c",
                "protocol.git.allow=always",
                "-c",
                file,
            ]);
            c.env("GIT_PROTOCOL_FROM_USER", "0");
        }
    }
    c.args(["-c", "advice.detachedHead=false"]).dir(dir);
    c.env("GIT_TERMINAL_PROMPT", "0").env("GIT_ASKPASS", "").env("SSH_ASKPASS", "").env("SSH_ASKPASS_REQUIRE", "never");
    if crate::environ::var_os("GIT_SSH_COMMAND").is_none() && crate::environ::var_os("GIT_SSH").is_none() {
        c.env("GIT_SSH_COMMAND", "ssh -o BatchMode=yes");
    }
    c
}

/// The user's opt-in (environment, never a file) to local mirrors for
/// repositories named in files: `DEEPEP_FORGE_GIT_ALLOW_LOCAL=1` lets
/// `url.<local>.insteadOf` in the user's git config serve pins.toml's repo and
/// its submodules offline.
pub const ALLOW_LOCAL_ENV: &str = "DEEPEP_FORGE_GIT_ALLOW_LOCAL";

fn local_mirrors_allowed() -> bool {
    crate::environ::var_os(ALLOW_LOCAL_ENV).is_some_and(|v| v == "1")
}

/// Where a git URL or path may come from: validates a repository named in a
/// file. Accepted: `https://`, `ssh://`, `git://`, and scp-like `user@host:path`;
/// never a value starting with `-`, `ext::`, `file:`, or a local path.
/// `Err` says what is accepted.
pub fn check_file_url(url: &str) -> Result<(), Failure> {
    const ACCEPTED: &str =
        "a remote git URL: https://host/path, ssh://[user@]host/path, git://host/path or user@host:path \
        (a local path or file:// only through --source on the command line)";
    let bad = |why: &str| Err(Failure::usage(format!("{why}; expected {ACCEPTED}")));
    if url.is_empty() {
        return bad("empty");
    }
    if url.starts_with('-') {
        return bad("starts with `-` (git would read it as an option)");
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return bad("contains whitespace or control characters");
    }
    if let Some((scheme, rest)) = url.split_once("://") {
        let scheme = scheme.to_ascii_lowercase();
        if !matches!(scheme.as_str(), "https" | "ssh" | "git") {
            return bad(&format!("the `{scheme}` scheme is not allowed"));
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host = authority.rsplit('@').next().unwrap_or_default();
        if host.is_empty() {
            return bad("no host");
        }
        if authority.split(['@', ':']).any(option_shaped) {
            return bad("a user or host starts with `-` (ssh would read it as an option)");
        }
        if !rest.contains('/') || rest.ends_with('/') && rest.matches('/').count() == 1 {
            return bad("no repository path");
        }
        return Ok(());
    }
    if url.contains("::") {
        return bad("a git remote helper (`<transport>::<address>`) is not allowed");
    }
    // scp-like `user@host:path`: git treats it as ssh when the part before the
    // first `:` has no `/` (otherwise it is a local path).
    if let Some((host, path)) = url.split_once(':') {
        if host.split('@').any(option_shaped) {
            return bad("a user or host starts with `-` (ssh would read it as an option)");
        }
        let hostname = host.rsplit('@').next().unwrap_or_default();
        let host_ok = !host.contains('/')
            && !hostname.is_empty()
            && !hostname.starts_with('-')
            && hostname.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']'));
        if host_ok && host.contains('@') && !path.is_empty() && !path.starts_with('-') {
            return Ok(());
        }
        if host.eq_ignore_ascii_case("file") {
            return bad("a file: URL is not allowed in a file");
        }
    }
    bad("a local path is not allowed in a file")
}

/// A user or host part ssh would take for an option: a leading `-`, also percent-encoded.
fn option_shaped(part: &str) -> bool {
    let p = part.to_ascii_lowercase();
    p.starts_with('-') || p.starts_with("%2d")
}

#[cfg(test)]
mod tests {
    use super::check_file_url;

    #[test]
    fn only_remote_urls_pass() {
        for ok in [
            "https://github.com/deepseek-ai/DeepEP.git",
            "ssh://git@github.com/deepseek-ai/DeepEP.git",
            "git://example.org/x.git",
            "git@github.com:deepseek-ai/DeepEP.git",
            "HTTPS://github.com/x/y",
        ] {
            assert!(check_file_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "--upload-pack=touch x",
            "-uhttps://x/y",
            "ext::sh -c touch% x",
            "file:///tmp/x",
            "file:x",
            "/tmp/x",
            "../DeepEP",
            "DeepEP",
            "http://example.org/x.git",
            "fd::17",
            "https://-oProxyCommand=x/y",
            "ssh://-oProxyCommand=x/y",
            "git@-oProxyCommand=x:y",
            "ssh://-oProxyCommand=x@host/x",
            "ssh://user@-host/x",
            "ssh://%2DoProxyCommand=x@host/x",
            "ssh://-u:pw@host/x",
            "https://-user@host/x",
            "-oProxyCommand=x:y",
            "-oProxy@host:x",
            "https://github.com",
            "https://a b/c",
            "",
            "./a:b",
            "a/b:c@d",
        ] {
            assert!(check_file_url(bad).is_err(), "{bad}");
        }
    }
}
