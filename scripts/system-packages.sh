#!/usr/bin/env bash
# Install the Debian packages rtk's tests and test cluster use, when missing.
# Runs as root (CI, a fresh machine); as another user it only reports what is missing.
set -euo pipefail

# iproute2: `ip route get` on nodes and the sandbox's netns/veth/bridge; procps: pgrep;
# openssh-server and tini: the sandbox's nodes; rsync: `ray up` in benchmarks/bringup.py;
# iptables: preflight's test blocks a Ray port inside one node; slurm-wlm (slurmctld,
# slurmd, sbatch/srun/...) and munge: `rtk sandbox up --slurm`, a real SLURM cluster
# on the sandbox's nodes that rtk's sbatch path is tested against; chromium and
# chromium-driver: the report page (report.html) is opened in a real headless browser
# by tests/unit/telemetry/report/page/test_browser.py (selenium drives it); zsh and fish:
# `rtk env --export --shell zsh|fish` is read back by the real shells. podman, catatonit
# (podman's --init; only recommended by podman), runc (crun, podman's default, refuses
# hosts with cgroup v1 and v2 controllers both; the test picks runc there) and
# debootstrap: tests/integration/test_container_cluster.py runs Ray in podman containers
# of an image that scripts/container-image.sh builds from Debian's packages. tcpdump:
# tests/integration/test_tls_cluster.py captures the sandbox bridge to show the token in
# clear without ray.tls and not with it.
packages=(iproute2 procps openssh-server tini rsync iptables slurm-wlm munge chromium chromium-driver
  zsh fish podman catatonit runc debootstrap tcpdump)

missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
# Debian's own python3 needs python3-venv for `python3 -m venv`.
if ! python3 -c "import ensurepip, venv" 2>/dev/null; then
  missing+=("python3-venv")
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "rtk: missing Debian packages: ${missing[*]} (install them as root)" >&2
  exit 1
fi
echo "rtk: installing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
