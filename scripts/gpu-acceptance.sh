#!/usr/bin/env bash
# rtk's GPU acceptance in one command: every GPU path of rtk, measured, each stage timed
# and bounded, everything written to DIR/gpu-acceptance.json and DIR/gpu-acceptance.md.
#
#   bash scripts/gpu-acceptance.sh [--out DIR] [--stages a,b] [--quick] [--dry-run]
#        [--wheelhouse DIR] [--offline] [--no-install] [--python PY] [--venv DIR] ...
#
# --python PY (or RTK_PYTHON): the Python to run in (default python3: on a GPU machine,
#   the one that already has the CUDA build of torch). --venv DIR: make a virtual
#   environment there that also sees that Python's packages, and install into it.
# On a machine without a GPU, or with --dry-run, nothing is installed: the stages are
# listed as skipped and the same JSON and markdown are written.
# `python3 -m gpu_acceptance --help` (with scripts/ on PYTHONPATH) lists every option.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

py="${RTK_PYTHON:-python3}"
venv=""
dry_run=0
args=()
while (($#)); do
  case "$1" in
    --python)
      [[ $# -ge 2 ]] || { echo "gpu-acceptance: --python needs a value" >&2; exit 2; }
      py="$2"; shift 2 ;;
    --python=*) py="${1#*=}"; shift ;;
    --venv)
      [[ $# -ge 2 ]] || { echo "gpu-acceptance: --venv needs a value" >&2; exit 2; }
      venv="$2"; shift 2 ;;
    --venv=*) venv="${1#*=}"; shift ;;
    --dry-run) dry_run=1; args+=("$1"); shift ;;
    *) args+=("$1"); shift ;;
  esac
done

if ! command -v "$py" >/dev/null 2>&1; then
  echo "gpu-acceptance: no Python at '$py' (give --python PY or RTK_PYTHON)" >&2
  exit 2
fi

# A venv only where there is something to install into it: a GPU and no --dry-run.
if [[ -n $venv ]] && ((dry_run == 0)) && command -v nvidia-smi >/dev/null 2>&1; then
  if [[ ! -x $venv/bin/python ]]; then
    "$py" -m venv --system-site-packages "$venv"
  fi
  # --system-site-packages sees the base interpreter's packages, not those of a venv
  # that $py may itself be: list $py's own site directories in a .pth file too.
  site_dir="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  "$py" -c 'import site; print("\n".join(site.getsitepackages()))' >"$site_dir/_rtk_base_site.pth"
  py="$venv/bin/python"
fi

export PYTHONPATH="$repo/scripts:$repo${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" -m gpu_acceptance "${args[@]+"${args[@]}"}"
