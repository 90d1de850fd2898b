"""deepep-forge's side-by-side build of a setup.py project.

What `pip wheel --no-build-isolation --no-deps -w DIST .` does for a project
without pyproject.toml (setuptools' PEP 517 hooks through its `__legacy__`
backend: the metadata hook in its own process, then `build_wheel`), with one
change in how the extensions are compiled: all of them at once instead of one
after another. Every compile and link command is the one the serial build
runs, in the same folder, with the same output paths; only the name of torch's
`build.ninja` differs (`build-<name>.ninja`, beside it) and the folder of its
`.ninja_log` (`.ninja/<name>`, ninja's builddir), so concurrent ninja runs never
overwrite each other's files.

The plan's MAX_JOBS is shared between the extensions: with ninja 1.13 or
newer (a GNU make jobserver client) through a jobserver this process serves
(a FIFO of tokens in MAKEFLAGS, MAX_JOBS unset so torch passes no -j), so the
extension still compiling gets the cores another one has finished with; with
an older ninja, split evenly (JOBS / EXTENSIONS each).

argv: DIST JOBS EXTENSIONS, or `metadata DIR`.
Run with the plan's interpreter, working folder and environment.
"""
import os
import shutil
import signal
import sys
import tempfile
import threading


def backend():
    from setuptools import build_meta

    return build_meta.__legacy__


def ninja_version():
    import subprocess

    try:
        out = subprocess.run(["ninja", "--version"], capture_output=True, text=True, timeout=30).stdout
        return tuple(int(p) for p in out.strip().split(".")[:2])
    except (OSError, ValueError, subprocess.SubprocessError):
        return (0, 0)


_JOBSERVER = []  # the FIFO's folder and our descriptor, held for the whole build


def jobserver(jobs, extensions):
    """Serve `jobs` job slots to every ninja through GNU make's FIFO jobserver protocol.

    Each client holds one implicit slot, so the FIFO holds jobs - extensions tokens
    (at least one): all extensions running use `jobs` slots, and one left alone
    takes the slots the others gave back.
    """
    folder = tempfile.mkdtemp(prefix="deepep-forge-jobserver-")
    fifo = os.path.join(folder, "fifo")
    os.mkfifo(fifo, 0o600)
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    os.write(fd, b"+" * max(jobs - extensions, 1))
    _JOBSERVER.extend([folder, fd])
    flags = os.environ.get("MAKEFLAGS", "")
    os.environ["MAKEFLAGS"] = f"{flags} -j{jobs} --jobserver-auth=fifo:{fifo}".strip()
    os.environ.pop("MAX_JOBS", None)
    print(f"deepep-forge: {extensions} extensions share {jobs} jobs through a jobserver", flush=True)


def side_by_side(jobs, extensions):
    """setuptools' build_ext builds every extension at once, torch's ninja files kept apart."""
    from setuptools.command import build_ext as setuptools_build_ext

    cls = setuptools_build_ext.build_ext
    current = threading.local()
    finalize = cls.finalize_options

    def finalize_options(self):
        finalize(self)
        n = len(self.extensions or [])
        if n > 1:
            self.parallel = n
        # The instance's own build_extension (a subclass may override it): each
        # extension's thread knows which extension it builds.
        build_one = self.build_extension

        def build_extension(ext):
            current.name = ext.name
            try:
                return build_one(ext)
            finally:
                current.name = None

        self.build_extension = build_extension

    cls.finalize_options = finalize_options
    os.environ["MAX_JOBS"] = str(max(1, jobs // extensions))
    if ninja_version() >= (1, 13):
        jobserver(jobs, extensions)
    try:
        import torch.utils.cpp_extension as cpp_extension
    except ModuleNotFoundError:
        return  # no torch: the project's own build_ext (it must keep extensions apart itself)
    write = getattr(cpp_extension, "_write_ninja_file", None)
    if write is None or not hasattr(cpp_extension, "subprocess"):
        sys.exit(
            "deepep-forge: this torch's extension builder has no _write_ninja_file; build with --serial-extensions"
        )

    def per_extension(*args, **kwargs):
        """`build-<name>.ninja` beside `build.ninja`, its log under `.ninja/<name>` (ninja's builddir)."""
        name = getattr(current, "name", None)
        path = kwargs.get("path")
        if not name or path is None:
            return write(*args, **kwargs)
        kwargs["path"] = os.path.join(os.path.dirname(path), f"build-{name}.ninja")
        result = write(*args, **kwargs)
        with open(kwargs["path"], encoding="utf-8") as f:
            text = f.read()
        with open(kwargs["path"], "w", encoding="utf-8") as f:
            f.write(f"builddir = .ninja/{name}\n" + text)
        return result

    class Subprocess:
        """torch's `subprocess`, except that ninja reads this thread's extension's build file.

        ninja still runs in the build folder (torch's cwd), so every compile command runs
        where the serial build runs it: the objects' debug information names the same folder.
        """

        def __getattr__(self, attr):
            return getattr(subprocess, attr)

        def run(self, cmd, *args, **kwargs):
            name = getattr(current, "name", None)
            if name and isinstance(cmd, list) and cmd[:1] == ["ninja"]:
                cmd = [cmd[0], "-f", f"build-{name}.ninja", *cmd[1:]]
            return subprocess.run(cmd, *args, **kwargs)

    import subprocess

    cpp_extension._write_ninja_file = per_extension
    cpp_extension.subprocess = Subprocess()


def terminated(signum, _frame):
    raise SystemExit(128 + signum)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "metadata":
        backend().prepare_metadata_for_build_wheel(sys.argv[2])
        return
    if len(sys.argv) != 4:
        sys.exit("usage: side_by_side.py DIST JOBS EXTENSIONS | metadata DIR")
    dist, jobs, extensions = sys.argv[1], int(sys.argv[2]), max(1, int(sys.argv[3]))
    import subprocess

    with tempfile.TemporaryDirectory() as md:
        subprocess.run([sys.executable, __file__, "metadata", md], check=True)
    # deepep-forge ends an interrupted build with SIGTERM to its process group:
    # unwind, so that `finally` removes the jobserver's folder.
    signal.signal(signal.SIGTERM, terminated)
    os.makedirs(dist, exist_ok=True)
    try:
        side_by_side(jobs, extensions)
        with tempfile.TemporaryDirectory(dir=dist) as tmp:
            name = backend().build_wheel(tmp)
            shutil.move(os.path.join(tmp, name), os.path.join(dist, name))
    finally:
        if _JOBSERVER:
            os.close(_JOBSERVER[1])
            shutil.rmtree(_JOBSERVER[0], ignore_errors=True)


if __name__ == "__main__":
    main()
