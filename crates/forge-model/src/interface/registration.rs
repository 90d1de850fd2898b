//! How a revision's compiled code registers GPU memory with the NIC, read
//! from its csrc: `ibv_reg_mr` alone needs a peer-memory kernel module
//! (`nvidia_peermem`) for device memory, else the NIC cannot pin it
//! (`ibv_reg_mr errno=14`, EFAULT); `ibv_reg_dmabuf_mr` with
//! `cuMemGetHandleForAddressRange` (the DMA-BUF file descriptor of a GPU
//! range) works without it (rdma-core's ibv_reg_mr(3) man page; CUDA driver
//! API, `cuMemGetHandleForAddressRange`). The build's patches count too
//! ([`patched`]): a patch's added and removed lines move the count, so the
//! result is the source as built. Pure: files come through the reader.
use super::Files;
use forge_wheel::provenance::{Registration, SourcePatch};

/// The calls looked for, and which field each sets.
const CALLS: [&str; 3] = ["ibv_reg_dmabuf_mr", "cuMemGetHandleForAddressRange", "ibv_reg_mr"];
/// Source files scanned (C, C++, CUDA).
const EXTENSIONS: [&str; 7] = ["cu", "cuh", "cpp", "cc", "c", "h", "hpp"];
/// At most this many files are read (DeepEP's csrc has about 100).
const MAX_FILES: usize = 4000;
/// Largest file scanned.
const MAX_FILE: usize = 1 << 20;
/// At most this many evidence lines per call.
const MAX_EVIDENCE: usize = 4;

/// The calls `line` makes (a `//` comment cut off; `ibv_reg_mr` as a whole word,
/// not the prefix of `ibv_reg_mr_iova` or `ibv_reg_dmabuf_mr`).
fn calls(line: &str) -> [bool; 3] {
    let code = line.split("//").next().unwrap_or("");
    CALLS.map(|c| {
        code.match_indices(c).any(|(i, _)| {
            let before = code[..i].chars().next_back();
            let after = code[i + c.len()..].chars().next();
            let word = |ch: Option<char>| ch.is_some_and(|ch| ch.is_ascii_alphanumeric() || ch == '_');
            !word(before) && !word(after)
        })
    })
}

/// The registration calls of the files under `csrc/` at the revision; None when
/// the reader cannot list a folder (the path stays unknown).
pub fn read(files: &dyn Files) -> Option<Registration> {
    let listed = files.list("csrc")?;
    let mut counts = [0usize; 3];
    let mut r = Registration::default();
    let sources = listed.iter().filter(|p| p.rsplit_once('.').is_some_and(|(_, e)| EXTENSIONS.contains(&e)));
    for path in sources.take(MAX_FILES) {
        let Some(text) = files.read(path).filter(|t| t.len() <= MAX_FILE) else { continue };
        for (n, line) in text.lines().enumerate() {
            for (k, hit) in calls(line).into_iter().enumerate() {
                if hit {
                    counts[k] += 1;
                    if counts[k] <= MAX_EVIDENCE {
                        r.evidence.push(format!("{path}:{}: {}", n + 1, CALLS[k]));
                    }
                }
            }
        }
    }
    set(&mut r, counts.map(|c| c as i64));
    Some(r)
}

/// `r` (read at the revision) with the build's patches applied: each patch's
/// `+` lines add the calls they make, its `-` lines take them away.
pub fn patched(r: &Registration, patches: &[SourcePatch]) -> Registration {
    let mut counts = [r.dmabuf, r.dmabuf_handle, r.reg_mr].map(i64::from);
    let mut out = r.clone();
    for p in patches {
        let mut moved = [0i64; 3];
        for line in p.text.lines().filter(|l| !l.starts_with("+++") && !l.starts_with("---")) {
            let sign = match line.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => continue,
            };
            for (k, hit) in calls(&line[1..]).into_iter().enumerate() {
                moved[k] += sign * i64::from(hit);
            }
        }
        for (k, m) in moved.iter().enumerate().filter(|(_, m)| **m != 0) {
            let verb = if *m > 0 { "adds" } else { "removes" };
            out.evidence.push(format!("patch {} {verb} {} call(s) of {}", p.name, m.abs(), CALLS[k]));
            // A file's count at the revision is not kept per call: a present call stays
            // present unless a patch removes at least as many as it adds.
            counts[k] = if *m > 0 { counts[k].max(1) + m } else { counts[k] + m };
        }
    }
    set(&mut out, counts);
    out
}

fn set(r: &mut Registration, counts: [i64; 3]) {
    r.dmabuf = counts[0] > 0;
    r.dmabuf_handle = counts[1] > 0;
    r.reg_mr = counts[2] > 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tree(Vec<(&'static str, &'static str)>);
    impl Files for Tree {
        fn read(&self, path: &str) -> Option<String> {
            self.0.iter().find(|(p, _)| *p == path).map(|(_, t)| t.to_string())
        }
        fn list(&self, dir: &str) -> Option<Vec<String>> {
            Some(self.0.iter().filter(|(p, _)| p.starts_with(&format!("{dir}/"))).map(|(p, _)| p.to_string()).collect())
        }
    }

    #[test]
    fn reg_mr_only_is_not_dmabuf_and_comments_and_prefixes_do_not_count() {
        let t = Tree(vec![
            ("csrc/rdma.cpp", "mr = ibv_reg_mr(pd, p, n, f);\n// ibv_reg_dmabuf_mr later\nibv_reg_mr_iova(x);\n"),
            ("README.md", "ibv_reg_dmabuf_mr"),
        ]);
        let r = read(&t).unwrap();
        assert!(r.reg_mr && !r.dmabuf && !r.dmabuf_handle && !r.uses_dmabuf(), "{r:?}");
        assert_eq!(r.evidence, vec!["csrc/rdma.cpp:1: ibv_reg_mr"]);
    }

    #[test]
    fn a_patch_adding_dmabuf_makes_it_dmabuf_and_a_patch_removing_it_undoes_it() {
        let t = Tree(vec![("csrc/rdma.cpp", "mr = ibv_reg_mr(pd, p, n, f);\n")]);
        let r = read(&t).unwrap();
        let add = SourcePatch {
            name: "dmabuf.patch".into(),
            text: "--- a/csrc/rdma.cpp\n+++ b/csrc/rdma.cpp\n@@ -1 +1,3 @@\n-mr = ibv_reg_mr(pd, p, n, f);\n+cuMemGetHandleForAddressRange(&fd, p, n, t, 0);\n+mr = ibv_reg_dmabuf_mr(pd, 0, n, p, fd, f);\n".into(),
            sha256: String::new(),
            files: vec!["csrc/rdma.cpp".into()],
            build_files: vec![],
        };
        let p = patched(&r, std::slice::from_ref(&add));
        assert!(p.uses_dmabuf() && !p.reg_mr, "{p:?}");
        assert!(p.evidence.iter().any(|e| e == "patch dmabuf.patch adds 1 call(s) of ibv_reg_dmabuf_mr"), "{p:?}");
        let none = Tree(vec![("csrc/x.cu", "int x;\n")]);
        assert!(!read(&none).unwrap().uses_dmabuf());
        assert_eq!(read(&|_: &str| None), None, "a reader that cannot list leaves it unknown");
    }
}
