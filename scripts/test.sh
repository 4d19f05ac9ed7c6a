#!/usr/bin/env bash
# Install rtk with its test tools into .venv and run every check CI runs:
# ruff, ruff format, mypy --strict on toolkit/, and the whole pytest suite
# (real Ray on this machine; no mocks). Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."

# Where the time goes: each phase's wall time, printed at the end (also when a phase
# fails), with the tests' worker time per folder from pytest's JUnit file.
phase_began=$(date +%s)
run_began=$phase_began
phases=()
phase() {
  local now
  now=$(date +%s)
  phases+=("$1:$((now - phase_began))")
  phase_began=$now
}
# RTK_TEST_JUNIT=FILE keeps pytest's JUnit report (every test's time) there.
junit=${RTK_TEST_JUNIT:-$(mktemp --suffix .xml)}
# Each test's worker, start and end (tests/conftest.py writes them): each worker's stretch.
timeline=$(mktemp --suffix .timeline)
export RTK_TEST_TIMELINE=$timeline
times() {
  local status=$?
  trap - EXIT
  echo "== time per phase (wall)"
  local entry
  for entry in "${phases[@]+"${phases[@]}"}" "all:$(($(date +%s) - run_began))"; do
    awk -v name="${entry%:*}" -v s="${entry##*:}" 'BEGIN { printf "  %-28s %5.1f min\n", name, s / 60 }'
  done
  if [ -s "$junit" ] && [ -x .venv/bin/python ]; then
    .venv/bin/python scripts/test_times.py "$junit" --timeline "$timeline" || true
  fi
  [ -n "${RTK_TEST_JUNIT:-}" ] || rm -f "$junit"
  rm -f "$timeline"
  [ -z "${RTK_TEST_NODES_TORCH_EXTENSIONS_DIR:-}" ] || rm -rf "$RTK_TEST_NODES_TORCH_EXTENSIONS_DIR"
  exit "$status"
}
trap times EXIT

bash scripts/system-packages.sh
phase "system packages"
# The container tests' image (a debootstrap of Debian, about a minute, cached) builds
# while pip installs; the tests build it themselves if this did not.
image_log=$(mktemp)
image_build=""
if [ "$(id -u)" -eq 0 ] && command -v debootstrap >/dev/null; then
  bash scripts/container-image.sh >"$image_log" 2>&1 &
  image_build=$!
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# The CPU build of torch, pinned: an unpinned torch pulls several GB of CUDA packages.
.venv/bin/python -m pip install -q torch==2.13.0
# DeepSpeed builds against the torch above: without build isolation, or pip would fetch
# a CUDA torch just to build it. Its ops are compiled on first use, not here.
.venv/bin/python -m pip install -q setuptools wheel
.venv/bin/python -m pip install -q --no-build-isolation deepspeed==0.19.8
# DeepSpeed compiles its CPU comm op (about a minute of one core) the first time a
# rank starts; built here, beside the rest of the install, ruff and mypy, it uses a
# core they leave idle instead of a test's time. Its build lives in this venv, whose
# path its flags name. It is built twice: once for the tests' own ranks, and once for
# the sandbox nodes' Ray workers (tests/conftest.py, BUILD_CACHES), which find the
# venv's ninja first on their PATH: ninja 1.13 and the system's 1.11 hash a command
# apart, so each would rebuild the other's (the nodes' compile was a minute of a core
# in the middle of the tests).
export TORCH_EXTENSIONS_DIR="$PWD/.venv/torch_extensions"
# The nodes' copy lies where they can write (torch takes a lock file beside the op even
# to load it): the sandbox nodes see this checkout read-only where it is under /tmp,
# which is each node's own, and share /var/tmp with this machine.
RTK_TEST_NODES_TORCH_EXTENSIONS_DIR=$(mktemp -d /var/tmp/rtk-test-torch-extensions.XXXXXX)
export RTK_TEST_NODES_TORCH_EXTENSIONS_DIR
ds_log=$(mktemp)
build_shm_op="import importlib; importlib.import_module('deepspeed.comm.torch').build_shm_op()"
(
  .venv/bin/python -c "$build_shm_op" &&
    PATH="$PWD/.venv/bin:$PATH" TORCH_EXTENSIONS_DIR="$RTK_TEST_NODES_TORCH_EXTENSIONS_DIR" \
      .venv/bin/python -c "$build_shm_op"
) >"$ds_log" 2>&1 &
ds_build=$!
.venv/bin/python -m pip install -q -e '.[dev,deepspeed,frameworks]'
phase "pip"

if [ -n "$image_build" ] && ! wait "$image_build"; then
  echo "rtk: building the container test image failed; its tests will try again:" >&2
  tail -5 "$image_log" >&2
fi
rm -f "$image_log"
phase "container image"
echo "== ruff"
.venv/bin/ruff check toolkit tests benchmarks scripts
.venv/bin/ruff format --check toolkit tests benchmarks scripts
phase "ruff"
# mypy --strict takes one core for half a minute, the other idle: it runs beside
# pytest (whose first minute is bring-ups waiting on Ray) and is waited for after it.
mypy_log=$(mktemp)
mypy_began=$(date +%s)
(
  .venv/bin/mypy toolkit >"$mypy_log" 2>&1
  echo "$? $(($(date +%s) - mypy_began))" >>"$mypy_log.status"
) &
mypy_run=$!
if ! wait "$ds_build"; then
  echo "rtk: building DeepSpeed's CPU comm op failed; the DeepSpeed tests will try again:" >&2
  tail -5 "$ds_log" >&2
fi
rm -f "$ds_log"
phase "deepspeed op"
echo "== pytest"
# The suite runs as on a fresh machine: no Python with Ray on PATH but .venv's, which
# is not on it either. A directory whose python or python3 imports Ray (one a user or
# an earlier install left there) is dropped from PATH for the tests, so that nothing
# passes only because the caller's PATH happens to hold a Ray
# (tests/unit/test_fresh_machine.py checks it).
test_path=""
IFS=: read -ra path_dirs <<<"$PATH"
for dir in "${path_dirs[@]}"; do
  with_ray=0
  for py in python python3; do
    if [ -x "$dir/$py" ] && "$dir/$py" -c "import ray" >/dev/null 2>&1; then
      with_ray=1
    fi
  done
  if ((with_ray)); then
    echo "rtk: leaving $dir off PATH for the tests: its Python has Ray" >&2
    continue
  fi
  test_path="${test_path:+$test_path:}$dir"
done
# GPU tests run on a GPU machine (pytest -m gpu); this machine class has none.
# Three workers (pytest-xdist; RTK_TEST_WORKERS sets how many, 0 for one process): most
# integration tests wait on Ray, sshd and SLURM, not on a core. Tests that share a sandbox or the host's Ray stay on one worker
# (XDIST_GROUPS in tests/conftest.py), and at most two heavy groups run at once
# (MAX_HEAVY_AT_ONCE there). No test asserts a rate or a duration, so none
# needs the machine to itself: one pass, whatever else the machine runs (rates and
# durations are benchmarks/). The slowest 30 tests are listed at the end.
run_pytest() { PATH="$test_path" RTK_TEST_CLEAN_PATH=1 .venv/bin/python -m pytest "$@"; }
status=0
run_pytest -m "not gpu" -n "${RTK_TEST_WORKERS:-3}" --durations=30 \
  --junitxml="$junit" "$@" || status=$?
phase "pytest (unit + integration)"
wait "$mypy_run" || true
echo "== mypy --strict toolkit/ (beside pytest)"
cat "$mypy_log"
read -r mypy_status mypy_s <"$mypy_log.status" || mypy_status=1
rm -f "$mypy_log" "$mypy_log.status"
phases+=("  mypy, beside pytest:${mypy_s:-0}")
if [ "$mypy_status" -ne 0 ]; then
  echo "rtk: mypy --strict found errors (above)" >&2
  [ "$status" -ne 0 ] || status=$mypy_status
fi
exit "$status"
