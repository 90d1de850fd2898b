use super::*;

fn exit_of(e: &anyhow::Error) -> crate::error::Exit {
    crate::error::exit_of(e)
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

#[test]
fn a_link_out_of_the_tree_is_refused_for_writes_reads_and_removals() {
    let t = tempfile::tempdir().unwrap();
    let (out, elsewhere) = (t.path().join("out"), t.path().join("elsewhere"));
    std::fs::create_dir_all(&out).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("victim"), b"keep").unwrap();
    std::os::unix::fs::symlink(&elsewhere, out.join("demo")).unwrap();
    std::os::unix::fs::symlink("../elsewhere", out.join("rel")).unwrap();
    let tree = Tree::open(&out, "output folder").unwrap();
    for via in ["demo", "rel"] {
        let e = tree.write(Path::new(via).join("x.whl"), b"wheel").unwrap_err();
        assert_eq!(exit_of(&e), crate::error::Exit::Usage, "{e:#}");
        assert!(format!("{e:#}").contains("leads outside the output folder"), "{e:#}");
        assert!(tree.read(Path::new(via).join("victim"), 10).is_err());
        assert!(tree.remove_file(Path::new(via).join("victim")).is_err());
        assert!(tree.create_dir_all(Path::new(via).join("sub")).is_err());
        assert!(tree.sub(via, "variant folder").is_err());
    }
    assert!(!elsewhere.join("x.whl").exists() && !elsewhere.join("sub").exists());
    assert_eq!(std::fs::read(elsewhere.join("victim")).unwrap(), b"keep");
    // `..` and absolute paths are not paths inside
    for bad in ["../elsewhere/victim", "/etc/passwd", "a/../../elsewhere/victim"] {
        let e = tree.read(bad, 10).unwrap_err();
        assert_eq!(exit_of(&e), crate::error::Exit::Usage, "{bad}: {e:#}");
    }
    // removing the link removes the link, never what it points to
    tree.remove_all("demo").unwrap();
    assert!(elsewhere.join("victim").exists());
}

#[test]
fn a_link_that_stays_inside_is_followed() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("real")).unwrap();
    std::os::unix::fs::symlink("real", t.path().join("alias")).unwrap();
    let tree = Tree::open(t.path(), "project").unwrap();
    tree.write("alias/f", b"x").unwrap();
    assert_eq!(std::fs::read(t.path().join("real/f")).unwrap(), b"x");
    assert_eq!(tree.kind("alias").unwrap(), Kind::Link);
    assert!(tree.is_dir("alias") && tree.is_file("alias/f"));
}

#[test]
fn a_destination_that_is_not_a_regular_file_is_refused_and_nothing_is_delivered() {
    let t = tempfile::tempdir().unwrap();
    mkfifo(&t.path().join("SHA256SUMS"));
    std::fs::create_dir(t.path().join("adir")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", t.path().join("link")).unwrap();
    let tree = Tree::open(t.path(), "output folder").unwrap();
    for name in ["SHA256SUMS", "adir", "link"] {
        let e = tree.write(name, b"x").unwrap_err();
        assert_eq!(exit_of(&e), crate::error::Exit::Usage, "{name}: {e:#}");
    }
    let mut d = Delivery::new();
    d.add(&tree, "demo.whl", PUBLIC, |f| Ok(f.write_all(b"wheel")?)).unwrap();
    assert!(d.add(&tree, "SHA256SUMS", PUBLIC, |f| Ok(f.write_all(b"sum")?)).is_err());
    drop(d);
    let names = tree.names(".").unwrap();
    assert_eq!(names, ["SHA256SUMS", "adir", "link"], "nothing delivered, no temporary left");
    // and a delivery that stages everything puts everything in place
    let mut d = Delivery::new();
    d.add(&tree, "a", PUBLIC, |f| Ok(f.write_all(b"1")?)).unwrap();
    d.add(&tree, "adir/b", PUBLIC, |f| Ok(f.write_all(b"2")?)).unwrap();
    assert!(!tree.exists("a"), "not before commit");
    d.commit().unwrap();
    assert_eq!(tree.read("a", 1).unwrap(), b"1");
    assert_eq!(tree.read("adir/b", 1).unwrap(), b"2");
}

#[test]
fn reads_never_block_and_are_bounded() {
    let t = tempfile::tempdir().unwrap();
    mkfifo(&t.path().join("fifo"));
    std::fs::write(t.path().join("big"), vec![b'a'; 100]).unwrap();
    let tree = Tree::open(t.path(), "project").unwrap();
    assert!(format!("{:#}", tree.read("fifo", 10).unwrap_err()).contains("not a regular file"));
    assert!(format!("{:#}", tree.read("big", 10).unwrap_err()).contains("more than the 10 bytes"));
    assert!(tree.read_opt("none", 10).unwrap().is_none());
    assert_eq!(tree.read("big", 100).unwrap().len(), 100);
}

#[test]
fn a_file_where_a_folder_is_expected_is_bad_input() {
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("file");
    std::fs::write(&f, b"").unwrap();
    for e in [Tree::open(&f, "output folder").unwrap_err(), Tree::create(&f, "output folder").unwrap_err()] {
        assert_eq!(exit_of(&e), crate::error::Exit::Usage, "{e:#}");
        assert!(format!("{e:#}").contains("is not a folder"), "{e:#}");
    }
    assert_eq!(exit_of(&Tree::create(&f.join("below"), "output folder").unwrap_err()), crate::error::Exit::Usage);
}

#[test]
fn listings_and_walks_are_sorted_bounded_and_do_not_follow_links() {
    let t = tempfile::tempdir().unwrap();
    for n in ["c", "a", "b"] {
        std::fs::write(t.path().join(n), n).unwrap();
    }
    std::fs::create_dir_all(t.path().join("d/e")).unwrap();
    std::fs::write(t.path().join("d/e/f"), b"").unwrap();
    std::os::unix::fs::symlink("/", t.path().join("root")).unwrap();
    let tree = Tree::open(t.path(), "tree").unwrap();
    let l = tree.list(".", 2).unwrap();
    assert_eq!(l.entries.iter().map(|e| e.utf8().unwrap()).collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!((l.total, l.omitted()), (5, 3));
    let w = tree.walk(".", Walk::default()).unwrap();
    let names: Vec<String> = w.iter().map(|w| w.rel.display().to_string()).collect();
    assert_eq!(names, ["a", "b", "c", "d", "root", "d/e", "d/e/f"]);
    assert_eq!(w[4].kind, Kind::Link);
    assert!(tree.walk(".", Walk { max_entries: 3, max_depth: 64 }).is_err());
    assert!(tree.walk(".", Walk { max_entries: 100, max_depth: 1 }).is_err());
}

#[test]
fn links_the_tool_makes_keep_their_text() {
    let t = tempfile::tempdir().unwrap();
    let tree = Tree::open(t.path(), "build root").unwrap();
    tree.symlink("/usr", "usr").unwrap();
    assert_eq!(tree.read_link("usr").unwrap(), Path::new("/usr"));
    assert_eq!(std::fs::read_link(t.path().join("usr")).unwrap(), Path::new("/usr"));
    // reading through it is still confined
    assert!(tree.read("usr/bin/env", 1 << 30).is_err());
}

#[test]
fn writes_replace_atomically_with_a_public_mode() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let tree = Tree::open(t.path(), "output folder").unwrap();
    tree.write("f", b"one").unwrap();
    tree.write("f", b"two").unwrap();
    assert_eq!(tree.read("f", 3).unwrap(), b"two");
    let mode = std::fs::metadata(t.path().join("f")).unwrap().permissions().mode() & 0o777;
    let plain = t.path().join("plain");
    std::fs::write(&plain, b"").unwrap();
    assert_eq!(mode, std::fs::metadata(&plain).unwrap().permissions().mode() & 0o777);
    let failed = tree.write_with("f", PUBLIC, |_| anyhow::bail!("disk full"));
    assert!(failed.is_err());
    assert_eq!(tree.read("f", 3).unwrap(), b"two", "a failed write leaves the old file");
    assert_eq!(tree.names(".").unwrap(), ["f", "plain"], "and no temporary");
}

#[test]
fn a_folder_lock_is_exclusive_between_opened_trees_and_released_on_drop() {
    let t = tempfile::tempdir().unwrap();
    let a = Tree::open(t.path(), "index folder").unwrap();
    let held = a.try_lock().unwrap().expect("free");
    let b = Tree::open(t.path(), "index folder").unwrap();
    assert!(b.try_lock().unwrap().is_none(), "a second lock waits");
    // As another process holds it: flock on the folder's own descriptor.
    let other = std::fs::File::open(t.path()).unwrap();
    assert!(other.try_lock().is_err());
    assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 0, "no lock file in the folder");
    drop(held);
    assert!(b.try_lock().unwrap().is_some());
}

#[test]
fn a_staged_file_gets_its_mode_whatever_the_umask() {
    let t = tempfile::tempdir().unwrap();
    let tree = Tree::open(t.path(), "index folder").unwrap();
    tree.write_with("page", 0o600, |f| {
        set_file_mode(f, 0o644)?;
        Ok(f.write_all(b"x")?)
    })
    .unwrap();
    assert_eq!(tree.stat("page").unwrap().mode & 0o777, 0o644);
}

#[test]
fn named_kind_follows_links_and_canonical_resolves_them() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("d")).unwrap();
    std::fs::write(t.path().join("d/f"), b"abc").unwrap();
    std::os::unix::fs::symlink("d", t.path().join("l")).unwrap();
    assert_eq!(named::kind(&t.path().join("l")), Kind::Dir);
    assert_eq!(named::kind(&t.path().join("l/f")), Kind::File { len: 3 });
    assert_eq!(named::kind(&t.path().join("none")), Kind::Missing);
    let real = named::canonical(&t.path().join("l/../d/f")).unwrap();
    assert_eq!(real, named::canonical(&t.path().join("d/f")).unwrap());
    assert!(named::canonical(&t.path().join("none")).is_none());
}
