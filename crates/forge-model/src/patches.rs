//! Source patches: pins.toml's `patches = [...]` lists (a pin's, then a
//! variant's), their shape (`check_path`, `check_list`), the files read
//! next to pins.toml (`load`: inside its git repository, no link on the way,
//! bounded, the recorded sha256), what a patch's text may do (`inspect`: text
//! only, no binary hunk, no link, every path inside the tree) and the identity
//! of an ordered set (`set_digest`, `label`). Must not run git or apply
//! anything (`builder::patch` applies).
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use forge_os::error::Failure;
use forge_wheel::provenance::SourcePatch;

/// At most this many patches in one build (a pin's and its variant's together).
pub const MAX_PATCHES: usize = 64;
/// At most this many bytes per patch file.
pub const MAX_BYTES: u64 = 1 << 20;

/// One `patches` entry of pins.toml: a path relative to pins.toml, optionally
/// with the sha256 its bytes must have (`{ path = "...", sha256 = "..." }`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// 1-based line of the entry in pins.toml.
    pub line: usize,
    /// The patch's text when it does not come from a file (`verify`: from the wheel's provenance).
    #[serde(skip)]
    pub text: Option<String>,
}

/// Why `path` cannot name a patch file: empty, absolute, `..`, odd characters. `None`: fine.
pub fn check_path(path: &str) -> Option<String> {
    if path.is_empty() || path.len() > 255 {
        return Some("expected a relative path of 1 to 255 characters".into());
    }
    if path.starts_with('/') {
        return Some("is absolute: expected a path relative to pins.toml, inside its repository".into());
    }
    if !path.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-+/".contains(&b)) {
        return Some("expected letters, digits and `._-+/` only".into());
    }
    for part in path.split('/') {
        match part {
            ".." => return Some("contains `..`: patches live beside or below pins.toml".into()),
            "" | "." | ".git" => {
                return Some("expected plain folder and file names (no `.`, `.git`, or empty parts)".into())
            }
            _ => {}
        }
    }
    None
}

/// Why `sha256` cannot be a recorded digest. `None`: 64 lowercase hex.
pub fn check_sha256(sha256: &str) -> Option<String> {
    let ok = sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (!ok).then(|| "expected 64 lowercase hex characters (`sha256sum FILE`)".into())
}

/// The first entry that repeats an earlier one's path, or a list over [`MAX_PATCHES`].
pub fn check_list(entries: &[&Entry]) -> Option<(usize, String)> {
    if entries.len() > MAX_PATCHES {
        let e = entries[MAX_PATCHES];
        return Some((e.line, format!("more than {MAX_PATCHES} patches: split the work upstream or into a fork")));
    }
    for (i, e) in entries.iter().enumerate() {
        if entries[..i].iter().any(|p| p.path == e.path) {
            return Some((e.line, format!("patch `{}` is listed twice: each patch applies once", e.path)));
        }
    }
    None
}

/// The patches of one build, in order: each entry's text (from `text`, else
/// the file beside `pins`), checked and inspected.
pub fn load(pins: &Path, entries: &[&Entry]) -> Result<Vec<SourcePatch>> {
    if let Some((line, msg)) = check_list(entries) {
        return Err(Failure::usage(format!("{}:{line}: {msg}", pins.display())).into());
    }
    let base = pins.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for e in entries {
        let at = format!("{}:{}", pins.display(), e.line);
        if let Some(why) = check_path(&e.path) {
            return Err(Failure::usage(format!("{at}: patch `{}` {why}", forge_os::input::excerpt(&e.path, 80))).into());
        }
        let text = match &e.text {
            Some(t) => t.clone(),
            None => read_file(base, &e.path, &at)?,
        };
        out.push(checked(e, text, &at)?);
    }
    Ok(out)
}

/// A patch file beside pins.toml: inside pins.toml's git repository, no link
/// on the way, a regular file of at most [`MAX_BYTES`], UTF-8 text. Read
/// through pins.toml's folder as a tree (nothing resolved out of it).
fn read_file(base: &Path, rel: &str, at: &str) -> Result<String> {
    use forge_os::fs::Kind;
    let real = forge_os::fs::named::canonical(base, "pins.toml's folder")?;
    if !real.ancestors().any(|a| forge_os::fs::named::kind(&a.join(".git")) != Kind::Missing) {
        return Err(Failure::usage(format!(
            "{at}: patch `{rel}`: pins.toml is not inside a git repository, and patches must be committed beside it"
        ))
        .hint("keep pins.toml and its patches in the repository that reviews them")
        .into());
    }
    let tree = forge_os::fs::Tree::open(&real, "pins.toml's folder")?;
    let mut p = std::path::PathBuf::new();
    for c in Path::new(rel).components() {
        p.push(c);
        if tree.kind(&p)? == Kind::Link {
            return Err(Failure::usage(format!(
                "{at}: patch `{rel}`: {} is a symbolic link; a patch file must be a plain file inside pins.toml's repository",
                forge_os::input::excerpt(&tree.join(&p).display().to_string(), 120)
            ))
            .into());
        }
    }
    let bytes = match tree.read_opt(rel, MAX_BYTES) {
        Ok(Some(b)) => b,
        Ok(None) => return Err(Failure::usage(format!("{at}: patch `{rel}` not found beside pins.toml")).into()),
        Err(e) => {
            return Err(Failure::usage(format!("{at}: patch `{rel}`: {e:#}"))
                .hint(format!("a patch is a text file of at most {} KiB", MAX_BYTES >> 10))
                .into())
        }
    };
    String::from_utf8(bytes).map_err(|_| {
        Failure::usage(format!("{at}: patch `{rel}` is not UTF-8 text: binary patches are refused")).into()
    })
}

/// `text` as entry `e`'s patch: the recorded sha256 matches, the text is inspected.
fn checked(e: &Entry, text: String, at: &str) -> Result<SourcePatch> {
    if text.len() as u64 > MAX_BYTES {
        return Err(Failure::usage(format!("{at}: patch `{}` is over {} KiB", e.path, MAX_BYTES >> 10)).into());
    }
    let sha256 = forge_os::input::sha256_hex(text.as_bytes());
    if let Some(want) = &e.sha256 {
        if want != &sha256 {
            return Err(Failure::usage(format!(
                "{at}: patch `{}` has sha256 {sha256}, but pins.toml records {want}",
                e.path
            ))
            .hint("the patch changed after it was reviewed: review it, then record its new sha256 (`sha256sum FILE`)")
            .into());
        }
    }
    let files = inspect(&text).map_err(|why| Failure::usage(format!("{at}: patch `{}`: {}", e.path, why.message)))?;
    let build_files = files.iter().filter(|f| is_build_file(f)).cloned().collect();
    Ok(SourcePatch { name: e.path.clone(), sha256, files, build_files, text })
}

/// The files a patch touches (as `git apply -p1` reads it), or why it is refused:
/// binary hunks, links, paths outside the tree, `.git`, quoted names, no change at all.
pub fn inspect(text: &str) -> std::result::Result<Vec<String>, Failure> {
    if text.contains('\0') {
        return Err(Failure::usage("holds NUL bytes: binary patches are refused"));
    }
    let mut files: Vec<String> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        if line.starts_with("GIT binary patch") || (line.starts_with("Binary files ") && line.ends_with(" differ")) {
            return Err(Failure::usage(format!(
                "line {n}: a binary hunk: binary patches are refused (patch text only)"
            )));
        }
        if header_mode(line).is_some_and(is_link_or_submodule) {
            return Err(Failure::usage(format!(
                "line {n}: creates, changes or retargets a symbolic link or submodule: refused"
            )));
        }
        for path in header_paths(line) {
            let path = path.map_err(|why| Failure::usage(format!("line {n}: {}", why.message)))?;
            if !files.contains(&path) {
                files.push(path);
            }
        }
    }
    if files.is_empty() {
        return Err(Failure::usage(
            "changes no file: expected a unified diff (`git diff` / `git format-patch` output)",
        ));
    }
    Ok(files)
}

/// The mode a git header line states (`new file mode`, `new mode`, `old mode`,
/// `deleted file mode`, or the mode after `index a..b`), read as git reads it:
/// octal digits, leading zeros allowed. A mode that is not octal reads as a
/// link (refused: git would refuse or misread it too).
fn header_mode(line: &str) -> Option<u32> {
    let m = ["new file mode ", "new mode ", "old mode ", "deleted file mode "]
        .iter()
        .find_map(|p| line.strip_prefix(p))
        .or_else(|| line.strip_prefix("index ").and_then(|r| r.split_whitespace().nth(1)))?;
    let m = m.trim();
    Some(u32::from_str_radix(m, 8).ok().filter(|_| !m.is_empty()).unwrap_or(LINK_MODE))
}

const LINK_MODE: u32 = 0o120000;
const SUBMODULE_MODE: u32 = 0o160000;

/// A git mode whose file type is a symbolic link or a submodule (gitlink).
pub fn is_link_or_submodule(mode: u32) -> bool {
    matches!(mode & 0o170000, LINK_MODE | SUBMODULE_MODE)
}

/// The tree paths a header line names (`diff --git`, `---`, `+++`, rename/copy), each checked.
fn header_paths(line: &str) -> Vec<std::result::Result<String, Failure>> {
    let strip = |p: &str, prefix: &str| p.strip_prefix(prefix).unwrap_or(p).to_string();
    let raw: Vec<String> = if let Some(rest) = line.strip_prefix("diff --git ") {
        match rest.split_once(" b/") {
            Some((a, b)) => vec![strip(a, "a/"), b.to_string()],
            None => {
                return vec![Err(Failure::usage(format!("`{}`: expected `diff --git a/PATH b/PATH`", excerpt(line))))]
            }
        }
    } else if let Some(p) = line.strip_prefix("--- ").or_else(|| line.strip_prefix("+++ ")) {
        let p = p.split('\t').next().unwrap_or("").trim_end();
        if p == "/dev/null" {
            return Vec::new();
        }
        let p = p.strip_prefix("a/").or_else(|| p.strip_prefix("b/")).unwrap_or(p);
        vec![p.to_string()]
    } else if let Some(p) =
        ["rename from ", "rename to ", "copy from ", "copy to "].iter().find_map(|k| line.strip_prefix(k))
    {
        vec![p.to_string()]
    } else {
        return Vec::new();
    };
    raw.into_iter().map(|p| tree_path(&p).map(|()| p)).collect()
}

/// A path inside the build tree: relative, no `..`, no `.git`, not quoted.
fn tree_path(p: &str) -> std::result::Result<(), Failure> {
    if p.starts_with('"') {
        return Err(Failure::usage(format!("`{}`: a quoted file name: refused (plain names only)", excerpt(p))));
    }
    if p.is_empty() || p.starts_with('/') {
        return Err(Failure::usage(format!(
            "`{}`: an absolute or empty path: a patch changes files inside the tree only",
            excerpt(p)
        )));
    }
    if p.split('/').any(|part| matches!(part, "" | "." | ".." | ".git")) {
        return Err(Failure::usage(format!(
            "`{}`: leaves the tree (`..`, `.git`, empty or `.` parts): refused",
            excerpt(p)
        )));
    }
    Ok(())
}

fn excerpt(s: &str) -> String {
    forge_os::input::excerpt(s, 80)
}

/// A file that changes how DeepEP builds (setup.py, `*.cfg`, CMake, Makefiles): `plan` names it loudly.
pub fn is_build_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    matches!(name, "setup.py" | "pyproject.toml" | "CMakeLists.txt" | "Makefile" | "GNUmakefile" | "makefile")
        || name.ends_with(".cfg")
        || name.ends_with(".cmake")
        || name.ends_with(".mk")
}

/// The identity of an ordered patch set: the first 8 hex of sha256 over each patch's sha256 in order.
pub fn set_digest(patches: &[SourcePatch]) -> Option<String> {
    if patches.is_empty() {
        return None;
    }
    let joined: String = patches.iter().map(|p| format!("{}\n", p.sha256)).collect();
    Some(forge_os::input::sha256_hex(joined.as_bytes())[..8].to_string())
}

/// The version label of a build: `<base>+<short>` exact, `<base>+<short>.p<digest>`
/// patched, in PEP 440's normal form ([`normal_local`]: what setuptools, pip and uv
/// write, so `+0303818` is `+303818`). The ONE place a label is computed: the wheel
/// (`builder`), the bake file's `DEEPEP_VERSION`, labels and tag (`docker::bake`),
/// `publish`, `pin set`'s `deep_ep==LABEL`, `lock check`'s expected label, `probe`'s
/// and `verify`'s provenance check all call it (an index serves the wheels' own names).
pub fn label(base: &str, short: &str, patches: &[SourcePatch]) -> String {
    let local = match set_digest(patches) {
        Some(d) => format!("{short}.p{d}"),
        None => short.to_string(),
    };
    format!("{base}+{}", normal_local(&local))
}

/// A PEP 440 local version label in its normal form: lower case, `-` and `_` read as
/// `.`, and each all-digit segment without its leading zeros (`0303818` -> `303818`,
/// `000` -> `0`), as PEP 440 compares and the build backend writes it.
pub fn normal_local(local: &str) -> String {
    let segments: Vec<String> = local
        .split(['.', '-', '_'])
        .map(|s| {
            if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
                let t = s.trim_start_matches('0');
                if t.is_empty() {
                    "0".to_string()
                } else {
                    t.to_string()
                }
            } else {
                s.to_ascii_lowercase()
            }
        })
        .collect();
    segments.join(".")
}

/// The local part (after `+`) of a version, in normal form (`1.2.1+0303818` -> `303818`).
pub fn local_of(version: &str) -> Option<String> {
    version.split_once('+').map(|(_, l)| normal_local(l))
}

/// What a build is, in words: `exact, unpatched` or `patched: N patches (name sha256[..12], ...)`.
pub fn describe(patches: &[SourcePatch]) -> String {
    if patches.is_empty() {
        return "exact, unpatched".into();
    }
    let list: Vec<String> = patches.iter().map(|p| format!("{} {}", p.name, &p.sha256[..12])).collect();
    let n = patches.len();
    format!("patched: {n} patch{} ({})", if n == 1 { "" } else { "es" }, list.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = "diff --git a/csrc/a.cu b/csrc/a.cu\nindex 1..2 100644\n--- a/csrc/a.cu\n+++ b/csrc/a.cu\n@@ -1 +1 @@\n-x\n+y\n";

    #[test]
    fn labels_are_pep440_normal_local_versions() {
        assert_eq!(label("1.2.1", "17cfb81", &[]), "1.2.1+17cfb81");
        assert_eq!(label("2.1.0", "0303818", &[]), "2.1.0+303818");
        assert_eq!(label("2.1.0", "0000000", &[]), "2.1.0+0");
        assert_eq!(label("1.2.1", "ABCDEF0", &[]), "1.2.1+abcdef0");
        assert_eq!(normal_local("0303818.p0a1b2c3d"), "303818.p0a1b2c3d");
        assert_eq!(normal_local("0303818-P0a"), "303818.p0a");
        assert_eq!(local_of("2.1.0+0303818"), Some("303818".into()));
        // What pep440_rs (uv's reader) makes of the same labels.
        for l in ["2.1.0+0303818", "2.1.0+0303818.p0a1b2c3d", "1.2.1+ABCdef0"] {
            let v: pep440_rs::Version = l.parse().unwrap();
            assert_eq!(
                v.to_string(),
                format!("{}+{}", l.split('+').next().unwrap(), normal_local(l.split_once('+').unwrap().1)),
                "{l}"
            );
        }
    }

    #[test]
    fn paths_are_relative_and_plain() {
        assert!(check_path("patches/a.patch").is_none());
        for bad in ["", "/etc/x.patch", "../x.patch", "a/../../x", "./x", "a b", ".git/x", "a//b", "a/"] {
            assert!(check_path(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn inspect_lists_files_and_refuses_escapes() {
        assert_eq!(inspect(ONE).unwrap(), vec!["csrc/a.cu".to_string()]);
        let esc = ONE.replace("csrc/a.cu", "../outside.cu");
        assert!(inspect(&esc).unwrap_err().message.contains("leaves the tree"));
        let abs = "--- /dev/null\n+++ /etc/passwd\n@@ -0,0 +1 @@\n+x\n";
        assert!(inspect(abs).unwrap_err().message.contains("absolute"));
        let bin = format!("{ONE}diff --git a/x.bin b/x.bin\nGIT binary patch\nliteral 3\n");
        assert!(inspect(&bin).unwrap_err().message.contains("binary"));
        let link = "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc\n";
        assert!(inspect(link).unwrap_err().message.contains("symbolic link"));
        for spelling in ["0120000", "00120000", "120777", "160000", "0160000", "12x000"] {
            let t = link.replace("120000", spelling);
            assert!(inspect(&t).unwrap_err().message.contains("symbolic link"), "{spelling}");
        }
        let retarget = "diff --git a/l b/l\nindex 1111111..2222222 120000\n--- a/l\n+++ b/l\n@@ -1 +1 @@\n-/a\n+/etc\n";
        assert!(inspect(retarget).unwrap_err().message.contains("symbolic link"));
        let to_link = "diff --git a/f b/f\nold mode 100644\nnew mode 0120000\n";
        assert!(inspect(to_link).is_err());
        assert!(inspect(&ONE.replace("100644", "0100644")).is_ok());
        let ren = "diff --git a/a b/b\nsimilarity index 100%\nrename from a\nrename to ../b\n";
        assert!(inspect(ren).is_err());
        assert!(inspect("just text\n").unwrap_err().message.contains("changes no file"));
    }

    #[test]
    fn build_files_are_named() {
        for f in ["setup.py", "x/setup.cfg", "CMakeLists.txt", "third-party/Makefile", "a.cmake"] {
            assert!(is_build_file(f), "{f}");
        }
        assert!(!is_build_file("csrc/hybrid_ep/config.cuh"));
    }

    #[test]
    fn the_label_says_patched_and_by_which_set() {
        let e = Entry { path: "p/a.patch".into(), sha256: None, line: 1, text: Some(ONE.into()) };
        let set = vec![checked(&e, ONE.into(), "pins.toml:1").unwrap()];
        let l = label("1.2.1", "17cfb81", &set);
        assert!(l.starts_with("1.2.1+17cfb81.p") && l.len() == "1.2.1+17cfb81.p".len() + 8, "{l}");
        assert_eq!(label("1.2.1", "17cfb81", &[]), "1.2.1+17cfb81");
        assert!(pep440_rs::Version::from_str(&l).is_ok());
        assert!(describe(&set).starts_with("patched: 1 patch (p/a.patch "));
        assert_eq!(describe(&[]), "exact, unpatched");
    }
    use std::str::FromStr;
}
