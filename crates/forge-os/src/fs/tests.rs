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
fn new_names_and_new_folders_never_replace_what_is_there() {
    let t = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/nowhere", t.path().join("dangling")).unwrap();
    std::fs::write(t.path().join("old"), b"old").unwrap();
    let tree = Tree::open(t.path(), "output folder").unwrap();
    let s = tree.stage("old", PUBLIC, |f| Ok(f.write_all(b"new")?)).unwrap();
    assert!(!s.commit_new().unwrap(), "the name is taken");
    assert!(tree.stage("dangling", PUBLIC, |f| Ok(f.write_all(b"new")?)).is_err(), "a link is never a destination");
    assert_eq!(std::fs::read(t.path().join("old")).unwrap(), b"old");
    assert_eq!(std::fs::read_link(t.path().join("dangling")).unwrap(), Path::new("/nowhere"));
    let s = tree.stage("fresh", 0o600, |f| Ok(f.write_all(b"key")?)).unwrap();
    assert!(s.commit_new().unwrap());
    assert_eq!(tree.read("fresh", 3).unwrap(), b"key");
    assert_eq!(tree.names(".").unwrap(), ["dangling", "fresh", "old"], "no temporary left");
    assert!(tree.make_dir("d").unwrap());
    assert!(!tree.make_dir("d").unwrap() && !tree.make_dir("old").unwrap() && !tree.make_dir("dangling").unwrap());
    // the folder's own descriptor: a lock on it is seen through another opening
    let (a, b) = (tree.handle().unwrap(), Tree::open(t.path(), "again").unwrap().handle().unwrap());
    a.try_lock().unwrap();
    assert!(b.try_lock().is_err());
}

#[test]
fn a_folder_that_is_not_there_is_none_and_a_file_is_refused() {
    let t = tempfile::tempdir().unwrap();
    assert!(Tree::open_if_exists(&t.path().join("none"), "cache").unwrap().is_none());
    assert!(!t.path().join("none").exists(), "nothing made");
    std::fs::write(t.path().join("file"), b"").unwrap();
    let e = Tree::open_if_exists(&t.path().join("file"), "cache").unwrap_err();
    assert_eq!(exit_of(&e), crate::error::Exit::Usage, "{e:#}");
    assert!(Tree::open_if_exists(t.path(), "cache").unwrap().is_some());
}

#[test]
fn an_opened_file_is_stated_on_its_descriptor() {
    let t = tempfile::tempdir().unwrap();
    let tree = Tree::open(t.path(), "cache").unwrap();
    tree.write_with("k", 0o600, |f| Ok(f.write_all(b"key")?)).unwrap();
    let (f, _) = tree.open_file("k", 10).unwrap();
    let (s, by_name) = (Stat::of(&f).unwrap(), tree.stat("k").unwrap());
    assert_eq!((s.kind, s.mode & 0o777, s.ino), (Kind::File { len: 3 }, by_name.mode & 0o777, by_name.ino));
}

#[test]
fn create_dir_makes_one_private_folder_and_never_reuses_what_is_there() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let elsewhere = t.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, t.path().join("link")).unwrap();
    let tree = Tree::open(t.path(), "temp folder").unwrap();
    tree.create_dir("root", 0o700).unwrap();
    assert_eq!(std::fs::metadata(t.path().join("root")).unwrap().permissions().mode() & 0o777, 0o700);
    for taken in ["root", "link"] {
        let e = tree.create_dir(taken, 0o700).unwrap_err();
        assert_eq!(exit_of(&e), crate::error::Exit::Usage, "{e:#}");
        assert!(format!("{e:#}").contains("already exists"), "{e:#}");
    }
    assert!(tree.create_dir("missing/root", 0o700).is_err(), "the parent must exist");
    assert!(tree.create_dir("link/sub", 0o700).is_err() && !elsewhere.join("sub").exists());
}

#[test]
fn the_machine_is_looked_at_through_links_without_opening_anything() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    std::fs::create_dir(d.join("dir")).unwrap();
    std::fs::write(d.join("dir/b"), b"xy").unwrap();
    std::fs::write(d.join("dir/a"), b"").unwrap();
    std::os::unix::fs::symlink("dir/b", d.join("to-file")).unwrap();
    std::os::unix::fs::symlink("nowhere", d.join("dangling")).unwrap();
    mkfifo(&d.join("fifo"));
    assert!(machine::is_file(&d.join("to-file")) && machine::is_dir(&d.join("dir")));
    assert_eq!(machine::facts(&d.join("to-file")).unwrap().kind, Kind::File { len: 2 });
    assert_eq!(machine::kind(&d.join("to-file")), Kind::Link);
    assert_eq!(machine::kind(&d.join("fifo")), Kind::Special);
    assert!(!machine::exists(&d.join("dangling")) && machine::kind(&d.join("dangling")) == Kind::Link);
    assert_eq!(machine::names(&d.join("dir")), ["a", "b"]);
    assert!(machine::names(&d.join("fifo")).is_empty());
    assert_eq!(machine::real(&d.join("to-file")).unwrap(), d.join("dir/b").canonicalize().unwrap());
    // The nearest thing that exists above a path, and what it is.
    assert_eq!(machine::nearest(&d.join("dir/x/y")), (d.join("dir"), Kind::Dir));
    assert_eq!(machine::nearest(&d.join("dir/b/x")).1, Kind::File { len: 2 });
    assert_eq!(machine::nearest(&d.join("dangling")), (d.join("dangling"), Kind::Link));
    assert_eq!(machine::nearest(Path::new("no-such-folder-here/x")), (PathBuf::from("."), Kind::Dir));
}

#[test]
fn an_exclusive_lock_waits_for_its_holder_and_refuses_a_planted_link() {
    let t = tempfile::tempdir().unwrap();
    let tree = Tree::open(t.path(), "build root's folder").unwrap();
    let held = tree.lock_exclusive("root.lock").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let path = t.path().to_path_buf();
    let waiter = std::thread::spawn(move || {
        let tree = Tree::open(&path, "build root's folder").unwrap();
        let _l = tree.lock_exclusive("root.lock").unwrap();
        tx.send(()).unwrap();
    });
    assert!(rx.recv_timeout(std::time::Duration::from_millis(300)).is_err(), "waits while held");
    drop(held);
    rx.recv_timeout(std::time::Duration::from_secs(10)).expect("taken once released");
    waiter.join().unwrap();
    std::os::unix::fs::symlink("/etc/passwd", t.path().join("planted.lock")).unwrap();
    let e = tree.lock_exclusive("planted.lock").unwrap_err();
    assert_eq!(exit_of(&e), crate::error::Exit::Usage, "{e:#}");
}

#[test]
fn resolve_follows_links_inside_and_names_the_one_that_leads_out() {
    let t = tempfile::tempdir().unwrap();
    let (p, out) = (t.path().join("proj"), t.path().join("outside"));
    std::fs::create_dir_all(p.join("shared")).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(p.join("shared/pyproject.toml"), b"x").unwrap();
    std::os::unix::fs::symlink("shared/pyproject.toml", p.join("pyproject.toml")).unwrap();
    std::os::unix::fs::symlink("shared", p.join("alias")).unwrap();
    std::os::unix::fs::symlink("../outside", p.join("docker")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", p.join("abs")).unwrap();
    std::os::unix::fs::symlink("loop", p.join("loop")).unwrap();
    std::os::unix::fs::symlink("gone", p.join("dangling")).unwrap();
    let tree = Tree::open(&p, "project").unwrap();
    let inside = |r: &str| Resolved::Inside(PathBuf::from(r));
    assert_eq!(tree.resolve("pyproject.toml").unwrap(), inside("shared/pyproject.toml"));
    assert_eq!(tree.resolve("alias/pyproject.toml").unwrap(), inside("shared/pyproject.toml"));
    assert_eq!(tree.resolve("shared/new").unwrap(), inside("shared/new"), "a name not made yet");
    assert_eq!(tree.resolve("dangling").unwrap(), inside("gone"));
    assert_eq!(tree.resolve(".").unwrap(), inside("."));
    let outside = tree.resolve("docker/Dockerfile").unwrap();
    assert_eq!(outside, Resolved::Outside { link: PathBuf::from("docker"), target: out.clone() });
    assert!(matches!(tree.resolve("abs").unwrap(), Resolved::Outside { link, .. } if link == Path::new("abs")));
    let e = tree.resolve("loop").unwrap_err();
    assert_eq!(exit_of(&e), crate::error::Exit::Usage, "{e:#}");
    assert!(tree.resolve("../x").is_err(), "not a path inside");
    assert_eq!(tree.canonical().unwrap(), p.canonicalize().unwrap());
}

#[test]
fn writable_and_exact_modes() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let tree = Tree::open(t.path(), "project").unwrap();
    tree.write("rw", b"x").unwrap();
    tree.write("ro", b"x").unwrap();
    std::fs::set_permissions(t.path().join("ro"), std::fs::Permissions::from_mode(0o444)).unwrap();
    assert!(tree.writable("rw") && tree.writable("."));
    assert!(!tree.writable("ro"), "no write bit: read-only even for root");
    let staged = tree
        .stage("rw", PUBLIC, |f| {
            f.write_all(b"y")?;
            set_file_mode(f, 0o640)
        })
        .unwrap();
    staged.commit().unwrap();
    assert_eq!(std::fs::metadata(t.path().join("rw")).unwrap().permissions().mode() & 0o777, 0o640);
}

#[test]
fn named_paths_kinds_and_created_files() {
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    std::os::unix::fs::symlink("f", t.path().join("l")).unwrap();
    mkfifo(&t.path().join("fifo"));
    assert_eq!(named::kind(&f), Kind::File { len: 1 });
    assert_eq!(named::kind(&t.path().join("l")), Kind::Link);
    assert_eq!(named::kind(&t.path().join("fifo")), Kind::Special);
    assert_eq!(named::kind(&t.path().join("none")), Kind::Missing);
    assert!(named::is_file(&t.path().join("l")) && !named::is_file(t.path()) && named::is_dir(t.path()));
    assert_eq!(named::canonical(&t.path().join("l"), "file").unwrap(), f.canonicalize().unwrap());
    assert!(named::canonical(&t.path().join("none"), "file").is_err());
    let msg = |r: Result<std::fs::File>| format!("{:#}", r.unwrap_err());
    assert!(msg(named::create(&t.path().join("fifo"), "log")).contains("not a regular file"));
    assert!(msg(named::create(&t.path().join("l"), "log")).contains("a symlink"));
    named::create(&t.path().join("log"), "log").unwrap().write_all(b"ok").unwrap();
    assert_eq!(std::fs::read(t.path().join("log")).unwrap(), b"ok");
}

#[test]
fn create_new_makes_a_fresh_file_and_refuses_anything_already_there() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("victim"), b"keep").unwrap();
    let tree = Tree::open(t.path(), "log folder").unwrap();
    let mut f = tree.create_new("rank0.out", 0o600).unwrap();
    std::io::Write::write_all(&mut f, b"line\n").unwrap();
    drop(f);
    assert_eq!(tree.read_text("rank0.out", 100).unwrap(), "line\n");
    std::os::unix::fs::symlink(t.path().join("victim"), t.path().join("link")).unwrap();
    mkfifo(&t.path().join("fifo"));
    for taken in ["rank0.out", "link", "fifo", "victim"] {
        let e = tree.create_new(taken, 0o600).unwrap_err();
        assert_eq!(exit_of(&e), crate::error::Exit::Usage, "{taken}: {e:#}");
        assert!(format!("{e:#}").contains("already exists"), "{taken}: {e:#}");
    }
    assert_eq!(std::fs::read(t.path().join("victim")).unwrap(), b"keep");
    assert!(tree.create_new("../escape", 0o600).is_err());
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
    assert_eq!(named::kind_through(&t.path().join("l")), Kind::Dir);
    assert_eq!(named::kind_through(&t.path().join("l/f")), Kind::File { len: 3 });
    assert_eq!(named::kind_through(&t.path().join("none")), Kind::Missing);
    let real = named::canonical_opt(&t.path().join("l/../d/f")).unwrap();
    assert_eq!(real, named::canonical_opt(&t.path().join("d/f")).unwrap());
    assert!(named::canonical_opt(&t.path().join("none")).is_none());
}

#[test]
fn making_folders_through_a_link_out_names_the_link() {
    let t = tempfile::tempdir().unwrap();
    let (inside, elsewhere) = (t.path().join("in"), t.path().join("elsewhere"));
    std::fs::create_dir_all(&inside).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, inside.join("wheels")).unwrap();
    std::fs::write(inside.join("file"), b"").unwrap();
    let tree = Tree::open(&inside, "cache").unwrap();
    let e = tree.create_dir_all("wheels/abc/entry").unwrap_err();
    assert_eq!(exit_of(&e), crate::error::Exit::Usage, "{e:#}");
    assert!(format!("{e:#}").contains("wheels leads outside the cache"), "{e:#}");
    let e = tree.create_dir_all("file/sub").unwrap_err();
    assert_eq!(exit_of(&e), crate::error::Exit::Usage, "{e:#}");
    assert!(format!("{e:#}").contains("where a folder is expected"), "{e:#}");
    assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none(), "nothing made out there");
}
