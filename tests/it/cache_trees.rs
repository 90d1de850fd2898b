//! `cache ls` and `cache gc` over the NCCL build trees (`<cache>/trees/`, real
//! stores made by `Trees::store`) and the image bases (`<cache>/images/base-*`,
//! written as `docker::base` writes them: a real tar and base.json): listing
//! (human and JSON), gc by age and by count, the sweep of objects no entry
//! names (a shared object kept), `--dry-run`, what is in use, and hostile
//! cache contents (escaping names, links, FIFOs, oversized manifests).
use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::support::hostile::{run_all, Case};
use forge_store::cache::tree::Trees;
use forge_store::cache::Key;
use sha2::Digest;

const DAY: u64 = 86_400;
const LABEL: &str = "third-party/nccl/build at 1e0c869";
const MIRROR: &str = "http://deb.debian.org/debian";
const RELEASE: &str = "Sat, 09 Aug 2025 09:00:00 UTC";

fn key(c: char) -> Key {
    Key::parse(&c.to_string().repeat(64)).unwrap()
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Set `p`'s modification time to `days` days ago (a link is never followed: `p` is a file or folder).
fn age(p: &Path, days: u64) {
    let when = SystemTime::now() - Duration::from_secs(days * DAY);
    let f = std::fs::File::options().read(true).open(p).unwrap();
    f.set_modified(when).unwrap();
}

/// A build folder like NCCL's: `shared.o` (the same bytes in every folder), a file of
/// its own, an executable and a link to a plain name.
fn build_dir(at: &Path, own: &str) -> PathBuf {
    std::fs::create_dir_all(at.join("obj/sub")).unwrap();
    std::fs::write(at.join("obj/shared.o"), vec![7u8; 4096]).unwrap();
    std::fs::write(at.join("obj/sub/own.o"), own.repeat(100)).unwrap();
    std::fs::create_dir_all(at.join("lib")).unwrap();
    std::fs::write(at.join("lib/libnccl.so.2"), format!("lib {own}")).unwrap();
    std::os::unix::fs::symlink("libnccl.so.2", at.join("lib/libnccl.so")).unwrap();
    at.to_path_buf()
}

/// A base folder as `docker::base::make_rootfs` leaves it: a deterministic tar of a tiny
/// rootfs, base.json (schema 1), and the lock file `ensure` creates beside it.
fn base(cache: &Path, k: char, suite: &str) -> (String, PathBuf) {
    let key = k.to_string().repeat(64);
    let k16 = key[..16].to_string();
    let images = cache.join("images");
    let dir = images.join(format!("base-{k16}"));
    let rootfs = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(rootfs.path().join("etc")).unwrap();
    std::fs::write(rootfs.path().join("etc/debian_version"), "12.11\n").unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    let tar = dir.join("rootfs.tar");
    let ok = std::process::Command::new("tar")
        .args(["--sort=name", "--mtime=@0", "--owner=0", "--group=0", "--numeric-owner", "-C"])
        .arg(rootfs.path())
        .arg(format!("--file={}", tar.display()))
        .args(["-c", "."])
        .status()
        .unwrap();
    assert!(ok.success());
    let record = serde_json::json!({
        "schema": 1, "key": key, "suite": suite, "mirror": MIRROR, "arch": "amd64",
        "packages": ["python3", "git"], "release_date": RELEASE, "release_sha256": "0".repeat(64),
        "rootfs_sha256": sha(&std::fs::read(&tar).unwrap()),
        "snapshot": "none: the mirror's state on release_date",
    });
    std::fs::write(dir.join("base.json"), serde_json::to_string_pretty(&record).unwrap() + "\n").unwrap();
    std::fs::write(images.join(format!("base-{k16}.lock")), "").unwrap();
    (k16, dir)
}

/// A cache with two trees (a: 10 days old, b: 1 day; they share `shared.o`) and two
/// bases (20 days and 2 days old), a .deb cache and a log.
struct Store {
    _t: tempfile::TempDir,
    cache: PathBuf,
    trees: Trees,
    old_base: (String, PathBuf),
    new_base: (String, PathBuf),
}

fn store() -> Store {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let trees = Trees::at(&cache);
    for (k, own, days) in [('a', "a", 10), ('b', "b", 1)] {
        let dir = build_dir(&t.path().join(format!("build-{own}")), own);
        let moved = trees.store(&key(k), LABEL, &dir).unwrap();
        assert_eq!(moved.files, 3);
        age(&trees.entry_path(&key(k)), days);
    }
    let old_base = base(&cache, 'c', "bookworm");
    age(&old_base.1.join("base.json"), 20);
    let new_base = base(&cache, 'd', "trixie");
    age(&new_base.1.join("base.json"), 2);
    std::fs::create_dir_all(cache.join("images/debs")).unwrap();
    std::fs::write(cache.join("images/debs/python3_3.11_amd64.deb"), vec![1u8; 1000]).unwrap();
    std::fs::write(cache.join("images/debootstrap.log"), "I: Base system installed successfully.\n").unwrap();
    Store { _t: t, cache, trees, old_base, new_base }
}

fn cache(s: &Store, args: &[&str]) -> std::process::Output {
    let o = support::bin().arg("cache").args(args).env("DEEPEP_FORGE_CACHE_DIR", &s.cache).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", support::stderr(&o));
    o
}

fn ls_json(s: &Store) -> serde_json::Value {
    serde_json::from_slice(&cache(s, &["ls", "--format", "json"]).stdout).unwrap()
}

/// Every path under `dir` (links not followed), for "nothing changed".
fn tree_of(dir: &Path) -> BTreeSet<PathBuf> {
    walkdir::WalkDir::new(dir).into_iter().flatten().map(|e| e.path().to_path_buf()).collect()
}

/// Bytes of the regular files under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

fn objects(s: &Store) -> BTreeSet<String> {
    std::fs::read_dir(s.cache.join("trees/objects"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn ls_lists_trees_and_bases_with_shared_objects_counted_once() {
    let s = store();
    let j = ls_json(&s);
    assert_eq!(j["schema"], 2);
    let trees = j["trees"].as_array().unwrap();
    assert_eq!(trees.len(), 2, "{j}");
    assert_eq!(trees[0]["key"], key('b').as_str(), "newest first");
    let (t, own) = (&trees[1], 100 + "lib a".len() as u64);
    assert_eq!((t["key"].as_str(), t["label"].as_str()), (Some(key('a').as_str()), Some(LABEL)));
    assert_eq!((t["files"].as_u64(), t["links"].as_u64()), (Some(3), Some(1)));
    assert_eq!(t["bytes"].as_u64(), Some(4096 + own));
    assert_eq!(t["shared_bytes"].as_u64(), Some(4096), "shared.o is named by both entries");
    let created = t["created_secs"].as_i64().unwrap();
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!((now - created - 10 * DAY as i64).abs() < 3600, "age from the entry file's time: {created}");
    // Objects on disk: shared.o once, two own files, two libs; plus the two manifests.
    assert_eq!(objects(&s).len(), 5);
    assert_eq!(bytes_under(&s.cache.join("trees/objects")), 4096 + 2 * own, "shared.o is stored once");
    let on_disk = bytes_under(&s.cache.join("trees"));
    assert_eq!(j["trees_bytes"].as_u64(), Some(on_disk));
    assert_eq!(j["trees_unreferenced_bytes"], 0);

    let bases = j["bases"].as_array().unwrap();
    assert_eq!(bases.len(), 2);
    let b = &bases[1];
    assert_eq!(b["key16"], s.old_base.0.as_str());
    assert_eq!(
        (b["suite"].as_str(), b["arch"].as_str(), b["mirror"].as_str()),
        (Some("bookworm"), Some("amd64"), Some(MIRROR))
    );
    assert_eq!(b["release_date"], RELEASE);
    assert_eq!(b["rootfs_bytes"].as_u64(), Some(std::fs::metadata(s.old_base.1.join("rootfs.tar")).unwrap().len()));
    let images = bytes_under(&s.cache.join("images"));
    assert_eq!(j["bases_bytes"].as_u64(), Some(images), ".debs and logs are counted too");
    assert_eq!(j["total_bytes"].as_u64(), Some(on_disk + images));
    assert_eq!(j["bad_entries"], serde_json::json!([]));

    let o = cache(&s, &["ls"]);
    let human = support::stdout(&o);
    for want in [
        "NCCL BUILD TREES (2)",
        &format!("{}        3", &key('a').as_str()[..16]),
        LABEL,
        "4.0 KiB",
        "10d",
        "IMAGE BASES (2)",
        &s.old_base.0,
        "bookworm",
        "trixie",
        RELEASE,
        MIRROR,
        "20d",
        "debootstrap's .deb cache and logs",
        "NCCL trees ",
        "image bases ",
    ] {
        assert!(human.contains(want), "{want:?} in\n{human}");
    }
    assert!(support::stderr(&o).contains("podman rmi localhost/deepep-forge-debian:"), "{}", support::stderr(&o));
}

#[test]
fn gc_by_age_then_by_count_sweeps_only_what_no_tree_names() {
    let s = store();
    let shared = sha(&[7u8; 4096]);
    let own_a = sha("a".repeat(100).as_bytes());
    let before = tree_of(&s.cache);

    // --dry-run says what would go and removes nothing.
    let dry = support::stdout(&cache(&s, &["gc", "--older-than", "5", "--dry-run"]));
    assert!(dry.contains(&format!("would remove NCCL tree {}", &key('a').as_str()[..16])), "{dry}");
    assert!(dry.contains("would remove 2 tree objects"), "a's own file and library: {dry}");
    assert!(dry.contains(&format!("would remove image base {}", s.old_base.0)), "{dry}");
    assert!(!dry.contains(&s.new_base.0) && !dry.contains(&key('b').as_str()[..16]), "{dry}");
    assert_eq!(tree_of(&s.cache), before, "a dry run changed the cache");

    // By age: tree a and the old base go; a's own objects go, the shared one stays.
    let out = support::stdout(&cache(&s, &["gc", "--older-than", "5"]));
    assert!(out.contains(&format!("removed NCCL tree {}", &key('a').as_str()[..16])), "{out}");
    assert!(out.contains("removed 2 tree objects no tree names"), "{out}");
    assert!(out.contains(&format!("podman rmi localhost/deepep-forge-debian:{}", s.old_base.0)), "{out}");
    assert!(out.contains("0 wheels and 0 toolchains kept; 1 NCCL tree and 1 image base kept"), "{out}");
    assert!(!s.trees.entry_path(&key('a')).exists() && s.trees.entry_path(&key('b')).exists());
    let left = objects(&s);
    assert!(left.contains(&shared) && !left.contains(&own_a), "{left:?}");
    assert_eq!(left.len(), 3);
    assert!(!s.old_base.1.exists() && s.new_base.1.join("rootfs.tar").is_file());
    assert!(s.cache.join(format!("images/base-{}.lock", s.old_base.0)).is_file(), "the lock file stays");
    assert!(s.cache.join("images/debs/python3_3.11_amd64.deb").is_file(), "the .deb cache stays");
    // What is left restores whole: nothing it names was swept.
    let back = s.cache.join("restored");
    let m = s.trees.restore(&key('b'), &back, SystemTime::now()).unwrap().unwrap();
    assert_eq!(m.files, 3);
    assert_eq!(std::fs::read(back.join("obj/shared.o")).unwrap(), vec![7u8; 4096]);
    assert_eq!(std::fs::read_link(back.join("lib/libnccl.so")).unwrap(), Path::new("libnccl.so.2"));

    // By count: --keep-trees 0 and --keep-bases 0 empty both stores.
    let out = support::stdout(&cache(&s, &["gc", "--keep-trees", "0", "--keep-bases", "0"]));
    assert!(out.contains("removed 3 tree objects") && out.contains("0 NCCL trees and 0 image bases kept"), "{out}");
    assert!(objects(&s).is_empty());
    let j = ls_json(&s);
    assert_eq!((j["trees"].as_array().unwrap().len(), j["bases"].as_array().unwrap().len()), (0, 0));
}

#[test]
fn gc_keeps_trees_and_bases_in_use_and_sweeps_orphans_and_leftovers() {
    let s = store();
    // A build restoring or storing a tree holds the store's lock shared.
    let use_lock = std::fs::File::options().read(true).write(true).open(s.cache.join("trees/use.lock")).unwrap();
    use_lock.lock_shared().unwrap();
    // A base being made holds its lock.
    let base_lock =
        std::fs::File::options().write(true).open(s.cache.join(format!("images/base-{}.lock", s.old_base.0))).unwrap();
    base_lock.lock().unwrap();
    let out = support::stdout(&cache(&s, &["gc", "--keep-trees", "0", "--keep-bases", "0"]));
    assert!(out.contains("kept NCCL trees: in use"), "{out}");
    assert!(out.contains(&format!("kept image base {}: in use", s.old_base.0)), "{out}");
    assert!(out.contains("2 NCCL trees and 1 image base kept"), "{out}");
    assert!(s.trees.entry_path(&key('a')).exists() && objects(&s).len() == 5);
    assert!(s.old_base.1.join("base.json").is_file() && !s.new_base.1.exists());
    drop((use_lock, base_lock));

    // An orphan (its entry forgotten, as a refused restore does) and a killed store's
    // leftover in trees/tmp go with the next gc, which keeps every entry.
    s.trees.forget(&key('a'));
    std::fs::write(s.cache.join("trees/tmp/object-999999"), "half").unwrap();
    let j = ls_json(&s);
    assert_eq!(j["trees_unreferenced_bytes"].as_u64(), Some(100 + 5), "a's own file and library");
    let out = support::stdout(&cache(&s, &["gc"]));
    assert!(out.contains("removed 2 tree objects no tree names"), "{out}");
    assert!(out.contains("removed 1 leftovers of killed tree stores"), "{out}");
    assert_eq!(objects(&s).len(), 3);
    assert!(s.trees.restore(&key('b'), &s.cache.join("r"), SystemTime::now()).unwrap().is_some());
}

#[test]
fn gc_never_removes_through_a_link_or_outside_the_cache() {
    let s = store();
    let outside = s.cache.parent().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let victim_sha = "e".repeat(64);
    std::fs::write(outside.join(&victim_sha), "victim").unwrap();
    std::fs::write(outside.join("x"), "victim").unwrap();
    // An unreferenced object that is a link to a file outside: the link goes, not the file.
    std::os::unix::fs::symlink(outside.join(&victim_sha), s.cache.join("trees/objects").join(&victim_sha)).unwrap();
    // A manifest naming `../x` and an absolute path as objects: not an entry, nothing followed.
    let good = std::fs::read_to_string(s.trees.entry_path(&key('b'))).unwrap();
    let shared = sha(&[7u8; 4096]);
    for (k, name) in [('1', "../../../outside/x"), ('2', "/etc/passwd")] {
        let text = good.replace(key('b').as_str(), key(k).as_str()).replacen(&shared, name, 1);
        std::fs::write(s.trees.entry_path(&key(k)), text).unwrap();
    }
    // A base folder that is a link to a folder outside holding a valid base.
    let (k16, real) = base(&outside, 'f', "bookworm");
    std::os::unix::fs::symlink(&real, s.cache.join(format!("images/base-{k16}"))).unwrap();
    let j = ls_json(&s);
    let bad: Vec<String> = j["bad_entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| format!("{}/{}: {}", b["store"], b["name"], b["problem"]))
        .collect();
    assert_eq!(bad.len(), 3, "{bad:#?}");
    assert!(bad.iter().filter(|b| b.contains("not a sha256")).count() == 2, "{bad:#?}");
    assert!(bad.iter().any(|b| b.contains(&format!("base-{k16}")) && b.contains("not a folder")), "{bad:#?}");

    let out = support::stdout(&cache(&s, &["gc"]));
    assert!(out.contains("removed 1 tree objects"), "only the link: {out}");
    assert_eq!(std::fs::read_to_string(outside.join(&victim_sha)).unwrap(), "victim");
    assert_eq!(std::fs::read_to_string(outside.join("x")).unwrap(), "victim");
    assert!(real.join("base.json").is_file() && real.join("rootfs.tar").is_file(), "the linked base's files stay");
    assert!(
        std::fs::symlink_metadata(s.cache.join(format!("images/base-{k16}"))).is_ok(),
        "a bad entry is not removed"
    );
    // The whole `trees/objects` and `images` replaced by links to outside folders: nothing there is touched.
    std::fs::remove_dir_all(s.cache.join("trees/objects")).unwrap();
    std::os::unix::fs::symlink(&outside, s.cache.join("trees/objects")).unwrap();
    std::fs::rename(s.cache.join("images"), s.cache.join("images-real")).unwrap();
    std::os::unix::fs::symlink(s.cache.join("images-real"), s.cache.join("images")).unwrap();
    let before = tree_of(&outside);
    let out = cache(&s, &["gc", "--older-than", "0", "--keep-bases", "0"]);
    assert_eq!(tree_of(&outside), before, "{}", support::stdout(&out));
    assert!(s.cache.join("images-real").join(format!("base-{}", s.new_base.0)).is_dir());
    let human = support::stdout(&cache(&s, &["ls"]));
    assert!(human.contains("not an entry: images: not read: not a folder"), "{human}");
}

fn fifo(p: &Path) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", p.display());
}

/// Hostile files in trees/ and images/, each through the real binary in a fresh folder
/// (bounded time: a FIFO must not block), nothing changed outside the cache's own locks.
#[test]
fn hostile_trees_and_bases_are_listed_as_not_entries_never_followed() {
    let k = "a".repeat(64);
    let entry = format!("cache/trees/entries/{k}.json");
    let base_dir = format!("cache/images/base-{}", &k[..16]);
    let record = |key: &str, mirror: &str| {
        serde_json::json!({"schema": 1, "key": key, "suite": "bookworm", "mirror": mirror, "arch": "amd64", "release_date": RELEASE})
            .to_string()
    };
    let fifo_at = |rel: String| move |d: &Path| fifo(&d.join(&rel));
    let big = |rel: String| {
        move |d: &Path| {
            std::fs::create_dir_all(d.join(&rel).parent().unwrap()).unwrap();
            std::fs::File::create(d.join(&rel)).unwrap().set_len((64 << 20) + 1).unwrap()
        }
    };
    let ls = ["cache", "ls"];
    let gc = ["cache", "gc", "--older-than", "0", "--keep-trees", "0", "--keep-bases", "0"];
    run_all(vec![
        Case::new("trees: entry file is a FIFO")
            .setup(fifo_at(entry.clone()))
            .args(&ls)
            .exit(0)
            .says("not an entry: trees/entries/"),
        Case::new("trees: gc with an entry file that is a FIFO")
            .setup(fifo_at(entry.clone()))
            .args(&gc)
            .exit(0)
            .says("0 NCCL trees")
            .may_change("cache/trees/use.lock"),
        Case::new("trees: manifest over 64 MiB")
            .setup(big(entry.clone()))
            .args(&ls)
            .exit(0)
            .says("at most 67108864 bytes"),
        Case::new("trees: manifest garbage")
            .file(&entry, "{\"files\": [")
            .args(&ls)
            .exit(0)
            .says("not a tree manifest"),
        Case::new("trees: entry name not a key")
            .file("cache/trees/entries/notakey.json", "{}")
            .args(&ls)
            .exit(0)
            .says("not <key>.json"),
        Case::new("trees: entry is a link to a file outside")
            .file("victim.json", "{}")
            .setup(move |d| {
                std::fs::create_dir_all(d.join("cache/trees/entries")).unwrap();
                std::os::unix::fs::symlink(
                    d.join("victim.json"),
                    d.join(format!("cache/trees/entries/{}.json", "b".repeat(64))),
                )
                .unwrap()
            })
            .args(&gc)
            .exit(0)
            .says("0 NCCL trees")
            .may_change("cache/trees/use.lock"),
        Case::new("trees: trees is a link")
            .file("elsewhere/objects/keep", "x")
            .setup(|d| std::fs::create_dir_all(d.join("cache")).unwrap())
            .setup(|d| std::os::unix::fs::symlink(d.join("elsewhere"), d.join("cache/trees")).unwrap())
            .args(&gc)
            .exit(0)
            .says("kept trees: not read: not a folder"),
        Case::new("trees: objects is a FIFO")
            .setup(|d| fifo(&d.join("cache/trees/objects")))
            .args(&gc)
            .exit(0)
            .may_change("cache/trees/use.lock"),
        Case::new("bases: base.json is a FIFO")
            .setup(fifo_at(format!("{base_dir}/base.json")))
            .args(&ls)
            .exit(0)
            .says("not an entry: images/base-"),
        Case::new("bases: gc with a base.json that is a FIFO")
            .setup(fifo_at(format!("{base_dir}/base.json")))
            .args(&gc)
            .exit(0)
            .says("0 image bases kept"),
        Case::new("bases: base.json over 64 KiB")
            .setup(big(format!("{base_dir}/base.json")))
            .args(&ls)
            .exit(0)
            .says("at most 65536 bytes"),
        Case::new("bases: base.json of another key")
            .file(&format!("{base_dir}/base.json"), record(&"b".repeat(64), MIRROR))
            .args(&ls)
            .exit(0)
            .says("not base-aaaaaaaaaaaaaaaa"),
        Case::new("bases: base.json with an escape in the mirror")
            .file(&format!("{base_dir}/base.json"), record(&k, "http://x/\u{1b}[31mred"))
            .args(&ls)
            .exit(0)
            .says("printable")
            .hides("\u{1b}[31m"),
        Case::new("bases: a folder without base.json")
            .file(&format!("{base_dir}/rootfs.tar"), "x")
            .args(&ls)
            .exit(0)
            .says("no base.json"),
        Case::new("bases: a folder name not a key")
            .file("cache/images/base-XYZ/base.json", record(&k, MIRROR))
            .args(&ls)
            .exit(0)
            .says("not base-<16"),
        Case::new("bases: base.json is a link to a record outside")
            .file("outside.json", record(&k, MIRROR))
            .setup(move |d| {
                std::fs::create_dir_all(d.join(format!("cache/images/base-{}", &"a".repeat(16)))).unwrap();
                std::os::unix::fs::symlink(
                    d.join("outside.json"),
                    d.join(format!("cache/images/base-{}/base.json", "a".repeat(16))),
                )
                .unwrap()
            })
            .args(&ls)
            .exit(0)
            .says("not an entry: images/base-"),
        Case::new("bases: the lock file is a FIFO")
            .file(&format!("{base_dir}/base.json"), record(&k, MIRROR))
            .setup(fifo_at(format!("{base_dir}.lock")))
            .args(&gc)
            .says("not a regular file"),
    ]);
}
