#!/usr/bin/env bash
# Fill a wheelhouse for scripts/gpu-acceptance.sh on a GPU machine with no network.
# Run it where the package registry answers; bring DIR along with the checkout, then:
#   bash scripts/gpu-acceptance.sh --wheelhouse DIR
#
#   bash scripts/gpu-wheelhouse.sh DIR [--python PY]
#
# What comes: small wheels for CPython 3.12 on manylinux x86_64 that the stages need and
# a GPU machine with torch, numpy and pytest may lack: DeepSpeed as an sdist (built
# there against the machine's torch) with its dependencies, Zeus (without pandas and
# scikit-learn: the acceptance run stands in for the one function it uses from them)
# with httpx, fabric/paramiko/invoke, pydantic, nvidia-ml-py, and the build tools
# (setuptools, wheel; hatchling and editables for rtk's own `pip install -e .`).
# Never torch, vLLM or Ray: too large to carry (about 14 MiB in all without them).
# The acceptance run installs only what the machine lacks, and never replaces torch.
set -euo pipefail

py=python3
dir=""
while (($#)); do
  case "$1" in
    --python) py="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "gpu-wheelhouse: unknown option $1" >&2; exit 2 ;;
    *) dir="$1"; shift ;;
  esac
done
[[ -n $dir ]] || { echo "usage: bash scripts/gpu-wheelhouse.sh DIR [--python PY]" >&2; exit 2; }
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

total=$(du -cb "$dir"/* | tail -1 | cut -f1)
ls -l "$dir" | awk 'NR > 1 {printf "%10d  %s\n", $5, $9}'
echo "gpu-wheelhouse: $(ls "$dir" | wc -l) files, $((total / 1024 / 1024)) MiB ($total bytes) in $dir"
