#!/usr/bin/env bash
# Fill a wheelhouse for scripts/gpu-acceptance.sh on a GPU machine with no network.
# Run it where the package registry answers; bring DIR along with the checkout, then:
#   bash scripts/gpu-acceptance.sh --wheelhouse DIR
#
#   bash scripts/gpu-wheelhouse.sh DIR [--python PY] [--with-ray [--ray-version V]]
#
# What comes: small wheels for CPython 3.12 on manylinux x86_64 that the stages need and
# a GPU machine with torch, numpy and pytest may lack: DeepSpeed as an sdist (built
# there against the machine's torch) with its dependencies, Zeus (without pandas and
# scikit-learn: the acceptance run stands in for the one function it uses from them)
# with httpx, fabric/paramiko/invoke, pydantic, nvidia-ml-py, and the build tools
# (setuptools, wheel; hatchling and editables for rtk's own `pip install -e .`).
# Never torch or vLLM: too large to carry (about 14 MiB in all without Ray).
# The acceptance run installs only what the machine lacks, and never replaces torch.
#
# --with-ray: Ray too, at the version .venv has (or --ray-version V), as one archive of
# its cp312 wheel without ray/jars/ (Java; 24 MiB with xz -9 for Ray 2.60, unpacked by the
# acceptance run without pip), and in DIR/ray-deps/ the wheels of what ray[default]
# needs that neither the GPU image nor the wheelhouse has (gpu_acceptance/ray_archive/).
# It prints what is left out and why, and the sizes, and fails when checkout
# (git ls-files) + wheelhouse exceed 60 MiB.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

py=python3
dir=""
with_ray=0
ray_version=""
while (($#)); do
  case "$1" in
    --python) py="$2"; shift 2 ;;
    --with-ray) with_ray=1; shift ;;
    --ray-version) ray_version="$2"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    -*) echo "gpu-wheelhouse: unknown option $1" >&2; exit 2 ;;
    *) dir="$1"; shift ;;
  esac
done
usage="usage: bash scripts/gpu-wheelhouse.sh DIR [--python PY] [--with-ray [--ray-version V]]"
[[ -n $dir ]] || { echo "$usage" >&2; exit 2; }
mkdir -p "$dir"

target=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64)
download() { "$py" -m pip download --disable-pip-version-check -q -d "$dir" "$@"; }

# With their dependencies (all small): DeepSpeed's, rtk's own, Zeus's monitor's.
download "${target[@]}" \
  hjson py-cpuinfo msgpack ninja einops psutil tqdm packaging \
  'pydantic>=2.7,<3' nvidia-ml-py 'fabric>=3.2,<4' httpx \
  setuptools wheel hatchling editables
# Zeus alone: its declared dependencies (pandas, scikit-learn, SciPy) are tens of MB.
download "${target[@]}" --no-deps zeus
# DeepSpeed as source, the version scripts/test.sh pins; built on the GPU machine.
download --no-deps --no-binary=:all: deepspeed==0.19.8

# Wheels the GPU machine already has would only be skipped there: leave them out.
rm -f "$dir"/numpy-*.whl "$dir"/torch-*.whl

shopt -s nullglob
files=("$dir"/*.whl "$dir"/*.tar.gz)
total=$(du -cb "${files[@]}" | tail -1 | cut -f1)
ls -l "${files[@]}" | awk '{n = split($9, p, "/"); printf "%10d  %s\n", $5, p[n]}'
echo "gpu-wheelhouse: ${#files[@]} files, $((total / 1024 / 1024)) MiB ($total bytes) in $dir"

if ((with_ray)); then
  # Head and driver must run the same Ray: the version rtk's own .venv runs with.
  if [[ -z $ray_version ]]; then
    ray_version=$("$repo/.venv/bin/python" -c \
      'import importlib.metadata as m; print(m.version("ray"))' 2>/dev/null) || {
      echo "gpu-wheelhouse: no Ray in $repo/.venv to take its version from;" \
        "give --ray-version V" >&2
      exit 2
    }
  fi
  echo "gpu-wheelhouse: Ray $ray_version (xz -9 takes a few minutes)"
  PYTHONPATH="$repo/scripts" "$py" -m gpu_acceptance.ray_archive wheelhouse "$dir" \
    --version "$ray_version" --python "$py" --level 9 --repo "$repo" --budget-mib 60
fi
