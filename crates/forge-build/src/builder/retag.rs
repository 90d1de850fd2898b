//! The platform tag after the build: the built wheel's ELF members audited
//! (`manylinux`), the wheel refused when it needs a library no policy allows
//! and that is not external, or a newer glibc than pins.toml's floor; else
//! its file name's platform tag, WHEEL's `Tag:` lines and (by the stamp)
//! RECORD rewritten for the policy it earned, recorded in the provenance.
//! A function of the wheel's bytes only: a rebuild gives the same tag.
use std::path::Path;

use anyhow::{Context, Result};

use forge_os::error::Failure;
use forge_wheel::manylinux::{self, Audit};
use forge_wheel::provenance::Provenance;
use forge_wheel::wheel::stamp;

/// Audit `built` (with the members `changes` replaces), put its new WHEEL into
/// `changes` and its platform into `prov`; returns the wheel's new file name.
pub fn retag(
    built: &Path,
    file_name: &str,
    changes: &mut stamp::Changes,
    prov: &mut Provenance,
    floor: Option<&str>,
) -> Result<String> {
    let mut w = forge_wheel::wheel::open(built)?;
    let elves = manylinux::read_wheel(&mut w, &changes.replace)?;
    let Some(audit) = manylinux::audit(&elves, &w.names()) else { return Ok(file_name.to_string()) };
    refuse_forbidden(&audit, file_name)?;
    if let Some(f) = floor {
        check_floor(&audit, &elves, f, file_name)?;
    }
    let di = w.dist_info()?;
    let member = format!("{di}/WHEEL");
    let old =
        w.member(&member, forge_wheel::wheel::limits::DOC)?.with_context(|| format!("{file_name} has no {member}"))?;
    let text = String::from_utf8(old).with_context(|| format!("{member} of {file_name} is not UTF-8"))?;
    changes.replace.insert(member, tagged(&text, &audit.platform.tag).into_bytes());
    let renamed = renamed(file_name, &audit.platform.tag)?;
    prov.platform = Some(audit.platform);
    Ok(renamed)
}

/// A NEEDED library on no policy's list and not external: the wheel would not load everywhere its tag says.
fn refuse_forbidden(a: &Audit, file_name: &str) -> Result<()> {
    if a.forbidden.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = a.forbidden.iter().map(|(m, l)| format!("{m} needs {l}")).collect();
    Err(Failure::problems(format!(
        "{file_name} needs libraries that no manylinux policy allows and that are not external:\n  {}",
        list.join("\n  ")
    ))
    .hint(
        "link them statically, or ship them inside the wheel; docs/platform-tags.md lists the libraries taken \
         from the environment (torch, CUDA, NCCL, NVSHMEM, the driver, rdma-core)",
    )
    .into())
}

/// The wheel's policy against pins.toml's floor (`2_28`): newer fails, naming the symbols
/// that raised it (`manylinux::judge::above_floor`, the judgment a cache hit gets too).
fn check_floor(a: &Audit, elves: &[manylinux::ElfNeeds], floor: &str, file_name: &str) -> Result<()> {
    match manylinux::judge::above_floor(a, elves, floor) {
        None => Ok(()),
        Some(why) => {
            Err(Failure::problems(format!("{file_name} {why}")).hint(manylinux::judge::floor_hint(floor)).into())
        }
    }
}

/// WHEEL with each `Tag: py-abi-plat` line replaced by one line per tag of the set.
fn tagged(wheel: &str, platform: &str) -> String {
    let mut out = String::with_capacity(wheel.len() + 64);
    for line in wheel.split_inclusive('\n') {
        let Some(tag) = line.trim_end().strip_prefix("Tag: ") else {
            out.push_str(line);
            continue;
        };
        let (interp_abi, _) = tag.rsplit_once('-').unwrap_or((tag, ""));
        for p in platform.split('.') {
            out.push_str(&format!("Tag: {interp_abi}-{p}\n"));
        }
    }
    out
}

/// The file name with its platform tag (the last part before `.whl`) replaced.
fn renamed(file_name: &str, platform: &str) -> Result<String> {
    let stem = file_name.strip_suffix(".whl").with_context(|| format!("{file_name} is not a wheel file name"))?;
    let (head, _) = stem.rsplit_once('-').with_context(|| format!("{file_name} has no platform tag"))?;
    Ok(format!("{head}-{platform}.whl"))
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    /// A shared library gcc compiles from `c`, linked against a stub `libfoo.so.1`.
    fn compiled(dir: &std::path::Path, c: &str) -> Vec<u8> {
        std::fs::write(dir.join("foo.c"), "int foo(void) { return 1; }\n").unwrap();
        let stub = Command::new("gcc")
            .args(["-shared", "-fPIC", "-Wl,-soname,libfoo.so.1", "-o"])
            .arg(dir.join("libfoo.so"))
            .arg(dir.join("foo.c"))
            .status()
            .unwrap();
        assert!(stub.success());
        std::fs::write(dir.join("ext.c"), c).unwrap();
        let ok = Command::new("gcc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(dir.join("ext.so"))
            .arg(dir.join("ext.c"))
            .arg(format!("-L{}", dir.display()))
            .arg("-lfoo")
            .status()
            .unwrap();
        assert!(ok.success());
        std::fs::read(dir.join("ext.so")).unwrap()
    }

    #[test]
    fn a_forbidden_library_and_a_result_above_the_floor_fail_naming_what_raised_them() {
        let d = tempfile::tempdir().unwrap();
        let c = "#include <pthread.h>\nint foo(void);\nstatic void *f(void *x) { return x; }\n\
                 int go(void) { pthread_t t; pthread_create(&t, 0, f, 0); return pthread_join(t, 0) + foo(); }\n";
        let elves = vec![forge_wheel::manylinux::elf::read("deep_ep/x.so", &compiled(d.path(), c)).unwrap()];
        let a = forge_wheel::manylinux::audit(&elves, &["deep_ep/x.so".into()]).unwrap();
        let e = super::refuse_forbidden(&a, "w.whl").unwrap_err();
        assert!(format!("{e:#}").contains("deep_ep/x.so needs libfoo.so.1"), "{e:#}");
        assert_eq!(forge_os::error::exit_of(&e), forge_os::error::Exit::Problems);
        let e = super::check_floor(&a, &elves, "2_28", "w.whl").unwrap_err();
        let text = format!("{e:#}");
        assert!(text.contains("needs manylinux_2_34 but pins.toml's floor is manylinux_2_28"), "{text}");
        assert!(text.contains("deep_ep/x.so: GLIBC_2.34 from libc.so.6 (pthread_create"), "{text}");
        assert!(super::check_floor(&a, &elves, "2_34", "w.whl").is_ok());
    }

    #[test]
    fn tag_lines_and_file_name_take_the_tag_set() {
        let w = "Wheel-Version: 1.0\nGenerator: setuptools (80.9.0)\nRoot-Is-Purelib: false\nTag: cp312-cp312-linux_x86_64\n\n";
        let t = super::tagged(w, "manylinux_2_17_x86_64.manylinux2014_x86_64");
        assert_eq!(
            t,
            "Wheel-Version: 1.0\nGenerator: setuptools (80.9.0)\nRoot-Is-Purelib: false\n\
             Tag: cp312-cp312-manylinux_2_17_x86_64\nTag: cp312-cp312-manylinux2014_x86_64\n\n"
        );
        assert_eq!(
            super::renamed("deep_ep-1.2.1+17cfb81-cp312-cp312-linux_x86_64.whl", "manylinux_2_34_x86_64").unwrap(),
            "deep_ep-1.2.1+17cfb81-cp312-cp312-manylinux_2_34_x86_64.whl"
        );
    }
}
