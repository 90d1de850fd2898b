//! `probe --image REF`: a built image's deep-ep, read through the builder
//! (`podman image mount`, or a buildah working container mounted), without
//! running anything from the image. Finds the wheel and its in-toto statement
//! at the fixed path `/wheels/` (docker/Dockerfile keeps them there), checks
//! the statement's subject against the wheel's sha256 and the installed
//! extensions against the wheel's RECORD; the caller runs the static probe on
//! the wheel. The image is hostile input: no link is followed, reads are
//! bounded, names are checked. Must not judge (the rules do).
use std::path::{Path, PathBuf};

use anyhow::Result;

use forge_os::error::Failure;
use forge_os::fs::{Kind, Tree};
use forge_os::process::engine::Builder;
use forge_os::process::Cmd;

/// Where docker/Dockerfile keeps the wheel and `<wheel>.intoto.json` in the image.
pub const WHEELS: &str = "wheels";
/// The most entries read from one folder of the image.
const MAX_ENTRIES: usize = 4096;
/// The largest installed extension hashed.
const MAX_SO: u64 = 4 << 30;

/// The image's filesystem, mounted read-only through the builder until dropped.
pub struct Mounted {
    pub root: PathBuf,
    pub reference: String,
    program: PathBuf,
    builder: Builder,
    container: Option<String>,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = match (&self.container, self.builder) {
            (Some(c), _) => {
                let _ = Cmd::new(&self.program, "unmount the image").args(["umount", c]).capture();
                Cmd::new(&self.program, "remove the working container").args(["rm", c]).capture()
            }
            (None, _) => {
                Cmd::new(&self.program, "unmount the image").args(["image", "unmount", &self.reference]).capture()
            }
        };
    }
}

/// What `probe --image` found in the image. The image's tree is closed before
/// the image is unmounted (fields drop in this order).
pub struct Found {
    /// The wheel at `/wheels/<name>`, opened once: hashed, checked and read from this one file.
    pub wheel: forge_wheel::wheel::Wheel,
    /// The image's file system, every read confined to it.
    pub tree: Tree,
    /// `REF:/wheels/<name>`, the subject the verdict names.
    pub subject: String,
    /// Installed extensions checked against the wheel's RECORD.
    pub installed: usize,
    /// The wheel's file name and sha256.
    pub wheel_id: (String, String),
    pub mounted: Mounted,
}

/// An image reference: registry/name[:tag][@digest] characters only, not an option.
fn check_reference(r: &str) -> Result<()> {
    let ok = !r.is_empty()
        && r.len() <= 256
        && r.starts_with(|c: char| c.is_ascii_alphanumeric())
        && r.chars().all(|c| c.is_ascii_alphanumeric() || "._-/:@".contains(c));
    if ok {
        return Ok(());
    }
    Err(Failure::usage(format!("--image {}: not an image reference", forge_os::input::excerpt(r, 80)))
        .hint("pass a name such as localhost/deepep-forge/deep-ep:h100-1.2.1-17cfb81, or an image id")
        .into())
}

/// Mount `reference` through `builder` (exit 3 without it; the builder's own
/// error when the image does not exist).
pub fn mount(reference: &str, builder: Builder) -> Result<Mounted> {
    check_reference(reference)?;
    if builder == Builder::Docker {
        return Err(Failure::usage("probe --image reads images through podman or buildah")
            .hint("pass --image-builder podman|buildah (a docker image: `docker save REF | podman load` first)")
            .into());
    }
    let program = forge_os::process::engine::find(builder)?;
    let mut m = Mounted { root: PathBuf::new(), reference: reference.to_string(), program, builder, container: None };
    let out = if builder == Builder::Podman {
        Cmd::new(&m.program, format!("mount image {reference}")).args(["image", "mount", reference]).output()
    } else {
        let c = Cmd::new(&m.program, format!("open image {reference}"))
            .args(["from", "--pull-never", reference])
            .output()
            .map_err(|e| Failure::usage(format!("{e:#}")).hint("build the image first, or pass its exact reference"))?;
        m.container = Some(c.trim().to_string());
        Cmd::new(&m.program, format!("mount image {reference}")).args(["mount", c.trim()]).output()
    }
    .map_err(|e| {
        Failure::usage(format!("{e:#}"))
            .hint("build the image first (deepep-forge docker build --builder podman), or pass its exact reference")
    })?;
    m.root = PathBuf::from(out.trim());
    if !m.root.is_absolute() {
        anyhow::bail!("{} printed no mount point for {reference}", builder.program());
    }
    Ok(m)
}

/// The folder `rel` of the image, reached without following any link (its path in the tree).
fn real_dir(tree: &Tree, rel: &str) -> Result<PathBuf> {
    no_links(tree, Path::new(""), rel, true).ok_or_else(|| {
        Failure::usage(format!("the image has no folder /{rel} (or it is a link)"))
            .hint("build the image with deepep-forge docker build: it keeps the wheel and its statement in /wheels/")
            .into()
    })
}

/// The names in the image's folder `dir` of kind `want` (a regular file or a
/// folder; never a link), sorted, at most [`MAX_ENTRIES`].
fn names_of(tree: &Tree, dir: &Path, want: fn(Kind) -> bool) -> Result<Vec<String>> {
    let listing = tree.list(dir, MAX_ENTRIES)?;
    Ok(listing.entries.into_iter().filter(|e| want(e.kind)).filter_map(|e| e.name.into_string().ok()).collect())
}

/// Mount the image, find its one wheel and statement, check both and the installed extensions.
pub fn open(reference: &str, builder: Builder) -> Result<Found> {
    let mounted = mount(reference, builder)?;
    let tree = Tree::open(&mounted.root, "image")?;
    let dir = real_dir(&tree, WHEELS)?;
    let files = names_of(&tree, &dir, Kind::is_file)?;
    let wheels: Vec<&String> = files.iter().filter(|f| f.ends_with(".whl")).collect();
    let [name] = wheels[..] else {
        return Err(Failure::usage(format!("{reference}: /{WHEELS}/ holds {} wheels, expected one", wheels.len()))
            .hint("probe an image built from docker/Dockerfile (one variant, one wheel)")
            .into());
    };
    if forge_wheel::wheel::read::bad_member_name(name).is_some() || !name.starts_with("deep_ep-") {
        return Err(Failure::usage(format!(
            "{reference}: /{WHEELS}/{}: not a deep-ep wheel name",
            forge_os::input::excerpt(name, 80)
        ))
        .hint("probe an image built from docker/Dockerfile")
        .into());
    }
    let mut wheel = forge_wheel::wheel::read::open_in(&tree, &dir.join(name))?;
    let (sha, _) = wheel.sha256()?;
    check_statement(reference, &tree, &dir, name, &sha)?;
    let installed = check_installed(reference, &tree, &mut wheel)?;
    let subject = format!("{reference}:/{WHEELS}/{name}");
    Ok(Found { wheel, tree, subject, installed, wheel_id: (name.clone(), sha), mounted })
}

/// `<wheel>.intoto.json` beside the wheel: its subject is this wheel (name and sha256), else exit 1.
fn check_statement(reference: &str, tree: &Tree, dir: &Path, name: &str, sha: &str) -> Result<()> {
    let file = format!("{name}{}", forge_wheel::attest::SUFFIX);
    let rel = dir.join(&file);
    if !tree.kind(&rel).is_ok_and(Kind::is_file) {
        return Err(Failure::problems(format!("{reference}: no in-toto statement /{WHEELS}/{file} beside the wheel"))
            .hint("rebuild the image with deepep-forge docker build (the builder stage and the index stage keep it)")
            .into());
    }
    let (f, _) = tree.open_file_nofollow(&rel, forge_os::input::cap::TEXT)?;
    let bytes = forge_os::fs::named::read_opened(f, &tree.join(&rel), "in-toto statement", forge_os::input::cap::TEXT)?;
    let j: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| Failure::usage(format!("{reference}: /{WHEELS}/{file}: not JSON: {e}")))?;
    let subject = &j["subject"][0];
    let (s_name, s_sha) = (subject["name"].as_str(), subject["digest"]["sha256"].as_str());
    if s_name != Some(name) || s_sha != Some(sha) {
        return Err(Failure::problems(format!(
            "{reference}: /{WHEELS}/{file} does not describe the wheel: subject {} sha256 {}, the wheel is {name} sha256 {sha}",
            forge_os::input::excerpt(s_name.unwrap_or("(none)"), 120),
            forge_os::input::excerpt(s_sha.unwrap_or("(none)"), 80)
        ))
        .hint("the image's wheel is not the one its statement attests: rebuild the image from a published or freshly built wheel")
        .into());
    }
    Ok(())
}

/// The installed `deep_ep*.dist-info` in the image's venv (`/opt/venv/lib/python3.*/site-packages`):
/// every extension its RECORD lists has the sha256 the wheel's RECORD gives. Returns how many.
fn check_installed(reference: &str, tree: &Tree, w: &mut forge_wheel::wheel::Wheel) -> Result<usize> {
    let lib = real_dir(tree, "opt/venv/lib")?;
    let py =
        names_of(tree, &lib, |k| k == Kind::Dir)?.into_iter().find(|n| n.starts_with("python3")).ok_or_else(|| {
            Failure::usage(format!("{reference}: no /opt/venv/lib/python3.* in the image"))
                .hint("probe an image built from docker/Dockerfile")
        })?;
    let site = real_dir(tree, &format!("opt/venv/lib/{py}/site-packages"))?;
    let dist_info = w.dist_info()?;
    let record = w.member(&format!("{dist_info}/RECORD"), forge_os::input::cap::TEXT)?.unwrap_or_default();
    let record = String::from_utf8_lossy(&record).into_owned();
    let mut checked = 0;
    for line in record.lines() {
        let mut cols = line.split(',');
        let (Some(path), Some(hash)) = (cols.next(), cols.next()) else { continue };
        if !path.ends_with(".so") || forge_wheel::wheel::read::bad_member_name(path).is_some() {
            continue;
        }
        let installed = no_links(tree, &site, path, false);
        let want = hash.strip_prefix("sha256=").unwrap_or(hash);
        let got = hash_regular(tree, installed.as_deref())?;
        if got.as_deref() != Some(want) {
            return Err(Failure::problems(format!(
                "{reference}: the installed {path} is {} but the wheel's RECORD says {want}",
                got.map(|g| format!("sha256 {g}")).unwrap_or_else(|| "missing (or a link)".into())
            ))
            .hint("the image's environment is not the wheel in /wheels/: rebuild the image")
            .into());
        }
        checked += 1;
    }
    Ok(checked)
}

/// `base/rel` in the image when no part on the way is a link (the last part
/// a folder when `folder`); None otherwise or when missing.
fn no_links(tree: &Tree, base: &Path, rel: &str, folder: bool) -> Option<PathBuf> {
    let mut p = base.to_path_buf();
    let parts: Vec<&str> = rel.split('/').filter(|s| !s.is_empty()).collect();
    for (i, part) in parts.iter().enumerate() {
        p.push(part);
        let kind = tree.kind(&p).ok()?;
        let last = i + 1 == parts.len();
        if kind == Kind::Missing || ((!last || folder) && kind != Kind::Dir) {
            return None;
        }
    }
    Some(p)
}

/// The urlsafe-base64 sha256 (RECORD's form) of a regular file of the image
/// reached without links; None when it is missing or not a regular file.
fn hash_regular(tree: &Tree, rel: Option<&Path>) -> Result<Option<String>> {
    use base64::Engine;
    let Some(rel) = rel else { return Ok(None) };
    if !tree.kind(rel).is_ok_and(Kind::is_file) {
        return Ok(None);
    }
    let (f, _) = tree.open_file_nofollow(rel, MAX_SO)?;
    let (digest, _) = forge_os::input::sha256_reader(f, MAX_SO)?;
    Ok(Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)))
}

/// The wheel facts of the image's deep-ep (after the checks above), named
/// `REF:/wheels/<wheel>`; the image is unmounted before this returns.
pub fn inspect(reference: &str, builder: Builder) -> Result<super::wheel::WheelFacts> {
    let found = open(reference, builder)?;
    forge_os::note!(
        "{}: statement matches the wheel; {} installed extension(s) match its RECORD",
        found.subject,
        found.installed
    );
    let Found { wheel, tree, subject, wheel_id, mounted, .. } = found;
    let mut facts = super::wheel::read_opened(wheel)?;
    facts.file = subject;
    facts.image_wheel = Some(wheel_id);
    drop(tree);
    drop(mounted);
    Ok(facts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use forge_os::error::{exit_of, Exit};

    #[test]
    fn references_that_could_be_options_or_paths_are_refused() {
        for bad in ["-rf", "--help", "", "a b", "x;y", "../up", "/abs"] {
            assert_eq!(exit_of(&check_reference(bad).unwrap_err()), Exit::Usage, "{bad:?}");
        }
        check_reference("localhost/deepep-forge/deep-ep:h100-1.2.1-17cfb81").unwrap();
        check_reference("registry.example.org:5000/x/y@sha256:abc").unwrap();
    }

    #[test]
    fn a_link_in_the_image_is_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("secret.whl"), b"host file").unwrap();
        std::os::unix::fs::symlink(host.path(), d.path().join(WHEELS)).unwrap();
        let tree = Tree::open(d.path(), "image").unwrap();
        let e = real_dir(&tree, WHEELS).unwrap_err();
        assert_eq!(exit_of(&e), Exit::Usage);
        assert!(format!("{e:#}").contains("no folder /wheels (or it is a link)"), "{e:#}");
        // A link on the way to an installed extension: not hashed, reported missing.
        std::fs::create_dir_all(d.path().join("site")).unwrap();
        std::os::unix::fs::symlink(host.path(), d.path().join("site/deep_ep")).unwrap();
        assert_eq!(no_links(&tree, Path::new("site"), "deep_ep/secret.whl", false), None);
        std::fs::create_dir_all(d.path().join("site/real")).unwrap();
        std::fs::write(d.path().join("site/real/x.so"), b"x").unwrap();
        let real = no_links(&tree, Path::new("site"), "real/x.so", false);
        assert_eq!(real.as_deref(), Some(Path::new("site/real/x.so")));
        assert!(hash_regular(&tree, real.as_deref()).unwrap().is_some());
        // A link as the last part: not hashed.
        std::os::unix::fs::symlink("x.so", d.path().join("site/real/y.so")).unwrap();
        assert_eq!(hash_regular(&tree, Some(Path::new("site/real/y.so"))).unwrap(), None);
    }

    #[test]
    fn a_statement_for_another_wheel_is_exit_1_naming_both() {
        let d = tempfile::tempdir().unwrap();
        let tree = Tree::open(d.path(), "image").unwrap();
        let here = Path::new("");
        let name = "deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl";
        let e = check_statement("img", &tree, here, name, "aa").unwrap_err();
        assert_eq!(exit_of(&e), Exit::Problems, "missing statement: {e:#}");
        let statement = serde_json::json!({"subject": [{"name": name, "digest": {"sha256": "bb"}}]});
        std::fs::write(d.path().join(format!("{name}.intoto.json")), statement.to_string()).unwrap();
        let e = check_statement("img", &tree, here, name, "aa").unwrap_err();
        assert_eq!(exit_of(&e), Exit::Problems);
        assert!(format!("{e:#}").contains("sha256 bb, the wheel is"), "{e:#}");
        check_statement("img", &tree, here, name, "bb").unwrap();
        std::fs::write(d.path().join(format!("{name}.intoto.json")), "not json").unwrap();
        assert_eq!(exit_of(&check_statement("img", &tree, here, name, "bb").unwrap_err()), Exit::Usage);
    }
}
