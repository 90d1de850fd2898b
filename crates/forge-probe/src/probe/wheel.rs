//! Read a DeepEP wheel once: every member is read a single time, hashed for
//! RECORD, and parsed when it is METADATA, RECORD, the provenance file or an
//! extension module. Must not judge (that is `rules`).
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::elf::{self, ElfFacts};
use forge_os::error::Failure;
use forge_wheel::provenance::{self, Provenance};
use forge_wheel::wheel::{record, WheelName};

/// One extension module (`hybrid_ep_cpp*.so`, `deep_ep_cpp*.so`, `deep_ep/_C*.so`).
#[derive(Debug, Clone, Serialize)]
pub struct Extension {
    /// Path inside the wheel or on disk.
    pub path: String,
    /// `hybrid_ep_cpp`, `deep_ep_cpp`, ...: the module name before the first dot.
    pub module: String,
    pub elf: Result<ElfFacts, String>,
}

/// What a wheel holds, read in one pass.
#[derive(Debug, Clone, Serialize)]
pub struct WheelFacts {
    pub file: String,
    /// The file name parsed as a wheel name (None: not a PEP 427 name).
    #[serde(skip)]
    pub name: Option<WheelName>,
    pub platform: Option<String>,
    /// `Version:` of METADATA.
    pub version: Option<String>,
    pub provenance: Option<Result<Provenance, String>>,
    /// RECORD problems (missing, unparsable, hash/size mismatches, unlisted files).
    pub record_problems: Vec<String>,
    /// Members whose hash and size RECORD confirmed.
    pub record_verified: usize,
    pub extensions: Vec<Extension>,
    /// Every member path.
    #[serde(skip)]
    pub members: Vec<String>,
    /// For `--image`: the image's wheel file name and sha256 (what `--record` names).
    #[serde(skip)]
    pub image_wheel: Option<(String, String)>,
    /// Every ELF member read for the manylinux policy (`manylinux`), and the audit;
    /// None when not read from a wheel file (an installed deep_ep), Err: why unreadable.
    #[serde(skip)]
    pub platform_audit: Option<Result<PlatformAudit, String>>,
}

/// A wheel's ELF members, the policy they earn and the judgment of its name's tag set.
#[derive(Debug, Clone)]
pub struct PlatformAudit {
    pub elves: Vec<forge_wheel::manylinux::ElfNeeds>,
    /// None: the wheel holds no readable ELF member.
    pub audit: Option<forge_wheel::manylinux::Audit>,
    /// `manylinux::judge` of the file name's platform tag set (every tag, every member).
    pub judgment: forge_wheel::manylinux::judge::Judgment,
}

/// Read every ELF member of the wheel and judge its tag set (a member that cannot be
/// read fails the judgment; Err: the zip itself could not be read).
fn platform_audit(w: &mut forge_wheel::wheel::Wheel, tag: &str) -> Result<PlatformAudit, String> {
    let mut read = || -> Result<PlatformAudit> {
        let (elves, bad) = forge_wheel::manylinux::judge::read_members(w)?;
        let judgment = forge_wheel::manylinux::judge::judge(tag, elves, &bad, &w.names(), None);
        Ok(PlatformAudit { elves: judgment.elves.clone(), audit: judgment.audit.clone(), judgment })
    };
    read().map_err(|e| format!("{e:#}"))
}

/// Module name of a shared object path (`a/b/hybrid_ep_cpp.cpython-312-x86_64-linux-gnu.so` -> `hybrid_ep_cpp`).
pub fn module_of(path: &str) -> Option<String> {
    let file = path.rsplit('/').next()?;
    if !file.ends_with(".so") {
        return None;
    }
    Some(file.split('.').next()?.to_string())
}

/// The architecture a platform tag names (`linux_x86_64`, `manylinux_2_28_aarch64`).
pub fn platform_arch(platform: &str) -> Option<forge_model::pins::Arch> {
    platform.split('.').find_map(|tag| {
        if tag.ends_with("x86_64") {
            Some(forge_model::pins::Arch::X86_64)
        } else if tag.ends_with("aarch64") {
            Some(forge_model::pins::Arch::Aarch64)
        } else {
            None
        }
    })
}

/// Read a wheel. A missing file or a file that is not a zip is bad input (exit 2);
/// everything wrong inside a readable zip becomes a fact for the rules.
pub fn read(path: &Path) -> Result<WheelFacts> {
    let wheel = forge_wheel::wheel::open(path).map_err(|e| match e.downcast::<Failure>() {
        Ok(f) if f.message.starts_with("wheel ") => anyhow::Error::from(
            Failure::usage(format!("cannot open {}", f.message)).hint("pass the path of a .whl file"),
        ),
        Ok(f) => f.into(),
        Err(e) => e,
    })?;
    read_opened(wheel)
}

/// Read an opened wheel (see [`read`]); its path names it.
pub fn read_opened(mut wheel: forge_wheel::wheel::Wheel) -> Result<WheelFacts> {
    let path = wheel.path().to_path_buf();
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let name = WheelName::parse(&file_name);
    let tag = name.as_ref().map(|n| n.platform.clone()).unwrap_or_default();
    let platform_audit = Some(platform_audit(&mut wheel, &tag));
    let zip = wheel.archive();
    let mut facts = WheelFacts {
        file: path.display().to_string(),
        platform: name.as_ref().map(|n| n.platform.clone()),
        name,
        version: None,
        provenance: None,
        record_problems: Vec::new(),
        record_verified: 0,
        extensions: Vec::new(),
        members: Vec::new(),
        image_wheel: None,
        platform_audit,
    };
    // path -> (sha256=..., size) of what was actually read.
    let mut seen: BTreeMap<String, Result<(String, u64), String>> = BTreeMap::new();
    let mut record_text: Option<(String, String)> = None;
    let mut buf = Vec::new();
    let mut total: u64 = 0;
    for i in 0..zip.len() {
        forge_os::error::check_interrupted()?;
        let mut member = match zip.by_index(i) {
            Ok(m) => m,
            Err(e) => {
                facts.record_problems.push(format!("member #{i} cannot be opened: {e}"));
                continue;
            }
        };
        if member.name().ends_with(['/', '\\']) {
            continue;
        }
        let mpath = member.name().to_string();
        facts.members.push(mpath.clone());
        buf.clear();
        let read = read_member(&mut member, &mpath, &mut buf, &mut total);
        if let Err(e) = read {
            let why = format!("{mpath}: unreadable ({e})");
            if let Some(module) = module_of(&mpath) {
                facts.extensions.push(Extension { path: mpath.clone(), module, elf: Err(why.clone()) });
            }
            seen.insert(mpath, Err(why));
            continue;
        }
        let (digest, size) = read.unwrap_or_default();
        seen.insert(mpath.clone(), Ok((record::hash_digest(&digest), size)));
        let in_dist_info =
            mpath.split('/').next().is_some_and(|d| d.ends_with(".dist-info")) && mpath.matches('/').count() == 1;
        let base = mpath.rsplit('/').next().unwrap_or(&mpath);
        if in_dist_info && base == "METADATA" {
            let text = String::from_utf8_lossy(&buf);
            facts.version = text.lines().find_map(|l| l.strip_prefix("Version:")).map(|v| v.trim().to_string());
        } else if in_dist_info && base == "RECORD" {
            record_text = Some((mpath.clone(), String::from_utf8_lossy(&buf).into_owned()));
        } else if in_dist_info && base == provenance::FILE_NAME {
            facts.provenance = Some(serde_json::from_slice::<Provenance>(&buf).map_err(|e| format!("{mpath}: {e}")));
        } else if let Some(module) = module_of(&mpath) {
            facts.extensions.push(Extension { path: mpath.clone(), module, elf: elf::parse(&buf) });
        }
    }
    check_record(&mut facts, record_text, seen);
    Ok(facts)
}

/// Stream one member: hash all of it, keep in `buf` only what is parsed
/// (bounded by [`limits`]); the sha256 and the size read.
fn read_member(
    member: &mut zip::read::ZipFile<'_, impl std::io::Read>,
    mpath: &str,
    buf: &mut Vec<u8>,
    total: &mut u64,
) -> std::io::Result<([u8; 32], u64)> {
    let base = mpath.rsplit('/').next().unwrap_or(mpath);
    let keep_cap = if module_of(mpath).is_some() {
        forge_wheel::wheel::limits::PARSED
    } else if matches!(base, "METADATA" | "RECORD") || base == provenance::FILE_NAME {
        forge_wheel::wheel::limits::DOC
    } else {
        0
    };
    // Never more than declared (+1 to notice a lying header), never past the limits.
    let declared = member.size();
    let cap = declared.min(forge_wheel::wheel::limits::MEMBER).saturating_add(1);
    let mut size: u64 = 0;
    let keep = |chunk: &[u8]| -> anyhow::Result<()> {
        size += chunk.len() as u64;
        *total += chunk.len() as u64;
        if size > declared || *total > forge_wheel::wheel::limits::TOTAL {
            anyhow::bail!("inflates past its declared size or the wheel's limit");
        }
        if keep_cap > 0 {
            if size > keep_cap {
                anyhow::bail!("larger than the {keep_cap} bytes read into memory");
            }
            buf.extend_from_slice(chunk);
        }
        Ok(())
    };
    forge_os::input::sha256_stream(&mut member.take(cap), cap, keep).map_err(|e| match e {
        forge_os::input::StreamError::Read(e) => e,
        e => std::io::Error::other(format!("{:#}", anyhow::Error::from(e))),
    })
}

fn check_record(
    facts: &mut WheelFacts,
    record_text: Option<(String, String)>,
    mut seen: BTreeMap<String, Result<(String, u64), String>>,
) {
    let Some((record_path, text)) = record_text else {
        facts.record_problems.push("no <name>.dist-info/RECORD in the wheel".into());
        return;
    };
    seen.remove(&record_path);
    let entries = match record::parse(&text) {
        Ok(e) => e,
        Err(e) => {
            facts.record_problems.push(format!("{record_path}: {e:#}"));
            return;
        }
    };
    for e in entries {
        if e.path == record_path {
            continue;
        }
        match seen.remove(&e.path) {
            None => facts.record_problems.push(format!("{}: listed in RECORD but not in the wheel", e.path)),
            Some(Err(why)) => facts.record_problems.push(why),
            Some(Ok((hash, size))) => {
                let mut bad = Vec::new();
                if e.hash.as_deref() != Some(hash.as_str()) {
                    bad.push(format!("hash {} in RECORD, {hash} in the file", e.hash.as_deref().unwrap_or("(none)")));
                }
                if e.size.is_some_and(|s| s != size) {
                    bad.push(format!("size {} in RECORD, {size} in the file", e.size.unwrap_or_default()));
                }
                if bad.is_empty() {
                    facts.record_verified += 1;
                } else {
                    facts.record_problems.push(format!("{}: {}", e.path, bad.join("; ")));
                }
            }
        }
    }
    for (path, r) in seen {
        let is_signature = path.ends_with("/RECORD.jws") || path.ends_with("/RECORD.p7s");
        if !is_signature {
            facts.record_problems.push(match r {
                Ok(_) => format!("{path}: in the wheel but not in RECORD"),
                Err(why) => why,
            });
        }
    }
}

/// `<base>+<short>` -> `short`.
pub fn local_label(version: &str) -> Option<&str> {
    version.split_once('+').map(|(_, l)| l)
}

/// Read a file on disk as an extension (used for installed environments).
pub fn extension_from_disk(path: &Path) -> Result<Extension> {
    let data = super::disk::read_bytes(path, "extension module", forge_wheel::wheel::limits::PARSED)?;
    let p = path.display().to_string();
    Ok(Extension { module: module_of(&p).unwrap_or_default(), elf: elf::parse(&data), path: p })
}
