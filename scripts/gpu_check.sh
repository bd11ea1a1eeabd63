#!/usr/bin/env bash
# The whole GPU check in one call, on a machine with an NVIDIA GPU:
#   build (Release, tests and benchmarks) -> ctest with SPIKEJIT_REQUIRE_CUDA=1 (GPU tests fail
#   instead of skipping) -> compute-sanitizer memcheck and initcheck on a representative filter of
#   test_cuda_kernels -> the Python package's tests on CUDA -> the GPU benchmark -> the Python
#   benchmarks against SpikingJelly (GPU, then CPU).
# Logs and results go to $OUT (default ./gpu-out): at most 8 files, each cut to its last 15 MiB
# (summary, environment, build.log, ctest.log with the sanitizer runs, pytest.log, bench.txt with
# every benchmark's table, bench_cuda_neurons.csv, bench_python_gpu.csv).
# The exit code is 0 only when every step passed.
#
# GoogleTest / Google Benchmark: the system's when CMake finds them; otherwise Debian packages
# in build-deps/ (made on a machine with apt by `scripts/gpu_check.sh --fetch-deps`) are unpacked
# into the build folder and used.
#
# `--only PARTS` runs the build and the comma-separated parts named, for machines that limit a
# command's time. Parts, with their time on one H100 host (16 cores) at 52c9862:
#   cpp          ctest and compute-sanitizer                       about 3.5-4 min
#   python       pip install and the Python tests on CUDA          about 10 min (PYTEST_SHARD)
#   bench        the kernels, the modules against SpikingJelly,
#                the host time of a call, training memory          about 5 min
#   bench-extra  FlexSN, CUDA graphs, layouts, forward mode, second derivatives, stochastic
#                and nonlinear neurons, a converted SpikingJelly model, the host CPU,
#                compression                                       about 5-6 min
# `tests` is cpp,python. Without --only, everything runs (about 20 minutes).
# BUDGET_S (default 570) guards a call: a benchmark step that would start with less time left than
# it needs is not run, one still running when the budget is spent is stopped (rc 124), and the
# summary says so (the run then FAILs).
#
# Environment: OUT, BUILD_DIR (default ./build-gpu), JOBS (default: all cores), BUDGET_S,
# SANITIZER_FILTER (gtest filter for compute-sanitizer), SPIKEJIT_CACHE_DIR (default: in the build),
# PYTEST_TARGETS (the Python tests to run, paths or node ids separated by spaces; default all),
# PYTEST_SHARD=i/n (of the test files, by sorted name, every n-th from the i-th: the whole Python
# suite on a fresh H100 took more than the 600 s of one call on a lent machine; two calls of
# `--only python` with 1/2 and 2/2 fit),
# CTEST_REGEX (ctest -R: the C++ tests to run; default all): for a machine lent for less time.
# CXX is also the compiler AOTInductor builds packages with in the Python tests; where a package
# of plain PyTorch built by it crashes the process that loads it, those tests fail and say so.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS_DIR="$ROOT/build-deps"

if [[ "${1:-}" == "--fetch-deps" ]]; then
  mkdir -p "$DEPS_DIR" && cd "$DEPS_DIR" || exit 1
  apt-get download libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian || exit 1
  ls -l "$DEPS_DIR"
  exit 0
fi

if [[ -n "${PYTEST_SHARD:-}" ]]; then
  [[ $PYTEST_SHARD =~ ^([0-9]+)/([0-9]+)$ ]] && (( BASH_REMATCH[1] >= 1 && BASH_REMATCH[1] <= BASH_REMATCH[2] )) ||
    { echo "PYTEST_SHARD: expected i/n with 1 <= i <= n, got '$PYTEST_SHARD'" >&2; exit 2; }
  [[ -z "${PYTEST_TARGETS:-}" ]] ||
    { echo "PYTEST_SHARD: expected no PYTEST_TARGETS beside it (a share of all test files), got both" >&2; exit 2; }
fi

PARTS=(cpp python bench bench-extra)
if [[ "${1:-}" == "--only" ]]; then
  IFS=, read -r -a PARTS <<< "${2:-}"
  for i in "${!PARTS[@]}"; do [[ ${PARTS[$i]} == tests ]] && PARTS[$i]="cpp python"; done
  read -r -a PARTS <<< "${PARTS[*]}"
  for part in "${PARTS[@]}"; do
    [[ " cpp python bench bench-extra " == *" $part "* ]] ||
      { echo "gpu_check.sh --only: expected parts from cpp,python,tests,bench,bench-extra, got '$part'" >&2; exit 2; }
  done
  (( ${#PARTS[@]} > 0 )) || { echo "gpu_check.sh --only: expected at least one part, got none" >&2; exit 2; }
fi
# wanted PART: whether PART is to run.
wanted() { [[ " ${PARTS[*]} " == *" $1 "* ]]; }
OUT=${OUT:-$ROOT/gpu-out}
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
JOBS=${JOBS:-$(nproc)}
BUDGET_S=${BUDGET_S:-570}
SANITIZER_FILTER=${SANITIZER_FILTER:-CudaKernels.MultiState*:CudaKernels.CheckpointEdges*:CudaKernels.EdgeShapes*:CudaKernels.Rejects*:CudaKernels.PackedEdge*:CudaKernels.PackedVector*:CudaKernels.PackedRejects*:CudaKernels.DrawsEqual*:CudaKernels.LongSequences*}
mkdir -p "$OUT" "$BUILD"
# pytest-xdist, when installed, spreads the Python tests over processes. The wall time is set by
# a few cold torch.compile tests (about a minute each): worksteal lets idle workers take queued
# tests from a busy one, instead of the fixed shares of the default scheduling.
PYTEST_PARALLEL=()
python3 -c "import xdist" > /dev/null 2>&1 && PYTEST_PARALLEL=(-n 12 --dist worksteal)
export SPIKEJIT_REQUIRE_CUDA=1
export SPIKEJIT_CACHE_DIR=${SPIKEJIT_CACHE_DIR:-$BUILD/kernel-cache}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$BUILD/inductor-cache}
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
status=0

# step NAME LOG COMMAND...: runs COMMAND, appends its output to $OUT/LOG, records rc and time.
step() {
  local name=$1 log=$OUT/$2
  shift 2
  local start=$SECONDS
  echo "== $name: $*" >> "$log"
  "$@" >> "$log" 2>&1
  local rc=$?
  printf '%-12s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - start))" "$*" | tee -a "$SUMMARY"
  [[ $rc -eq 0 ]] || status=1
  return $rc
}

# bench_step SECONDS NAME LOG COMMAND...: `step`, when at least SECONDS of the budget are left.
bench_step() {
  local need=$1
  shift
  if (( SECONDS + need > BUDGET_S )); then
    printf '%-12s not run: %ss of the %ss budget left, it needs about %ss\n' "$1" "$((BUDGET_S - SECONDS))" \
      "$BUDGET_S" "$need" | tee -a "$SUMMARY"
    status=1
    return 1
  fi
  # A step stuck past the budget (a benchmark's compile that never ends) is stopped, so the steps
  # after it still get their turn in the next call rather than the whole call timing out.
  local name=$1 log=$2
  shift 2
  step "$name" "$log" timeout --kill-after=10 "$((BUDGET_S - SECONDS))" "$@"
}

find_sanitizer() {
  local candidates=(compute-sanitizer "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer"
                    /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer)
  for c in "${candidates[@]}" /usr/local/cuda-*/bin/compute-sanitizer; do
    if command -v "$c" > /dev/null 2>&1; then echo "$c"; return 0; fi
  done
  return 1
}

{
  date -u
  nvidia-smi 2>&1 || echo "nvidia-smi not found"
  echo "cores: $(nproc)"
  cmake --version | head -1
  "${CXX:-c++}" --version | head -1
  echo "SPIKEJIT_CACHE_DIR=$SPIKEJIT_CACHE_DIR"
} > "$OUT/environment.txt" 2>&1

PREFIX_ARGS=()
if compgen -G "$DEPS_DIR/*.deb" > /dev/null; then
  for deb in "$DEPS_DIR"/*.deb; do dpkg -x "$deb" "$BUILD/deps"; done
  PREFIX_ARGS=(-DCMAKE_PREFIX_PATH="$BUILD/deps/usr")
  echo "using GoogleTest / Benchmark from $DEPS_DIR" >> "$OUT/environment.txt"
fi

GENERATOR=()
command -v ninja > /dev/null 2>&1 && GENERATOR=(-G Ninja)
if [[ -f "$BUILD/CMakeCache.txt" ]]; then GENERATOR=(); fi

# The C++ build (tests, benchmarks) serves every part but the Python tests, which build the
# package's own extension with pip.
built=0
if wanted cpp || wanted bench || wanted bench-extra; then
  step configure build.log cmake -S "$ROOT" -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DSPIKEJIT_BUILD_TESTS=ON -DSPIKEJIT_BUILD_BENCH=ON "${PREFIX_ARGS[@]}" &&
  step build build.log cmake --build "$BUILD" -j "$JOBS"
  built=$?
fi

# The Python package on CUDA. No network there: SpikingJelly (the conformance reference) and
# its small dependencies travel as wheels in .whl/ (see docs/python.md).
installed=1  # the package, for the Python parts
if [[ $built -eq 0 ]] && { wanted python || wanted bench || wanted bench-extra; }; then
  if compgen -G "$ROOT/.whl/*.whl" > /dev/null; then
    step wheels pytest.log python3 -m pip install -q --no-build-isolation --no-deps "$ROOT"/.whl/*.whl
  fi
  step pip pytest.log python3 -m pip install -q --no-build-isolation --no-deps "$ROOT"
  installed=$?
fi

if [[ $built -eq 0 ]] && wanted cpp; then
  step ctest ctest.log ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" --timeout 400 \
    ${CTEST_REGEX:+-R "$CTEST_REGEX"}
  # The bit-spike kernels under memcheck (a missing compute-sanitizer is reported below).
  sanitizer=$(find_sanitizer) && step memcheck-bits ctest.log "$sanitizer" --tool memcheck --error-exitcode 1 \
    "$BUILD/test_compress" --gtest_filter="CudaCompress.Misaligned*"

  if sanitizer=$(find_sanitizer); then
    step memcheck ctest.log "$sanitizer" --tool memcheck --error-exitcode 1 \
      "$BUILD/test_cuda_kernels" --gtest_filter="$SANITIZER_FILTER"
    step initcheck ctest.log "$sanitizer" --tool initcheck --error-exitcode 1 \
      "$BUILD/test_cuda_kernels" --gtest_filter="CudaKernels.MultiState*:CudaKernels.CheckpointEdges*"
    # Bit-packed rows are gathered with warp ballots: every thread of a warp must reach them.
    step synccheck ctest.log "$sanitizer" --tool synccheck --error-exitcode 1 \
      "$BUILD/test_cuda_kernels" --gtest_filter="CudaKernels.PackedEdge*:CudaKernels.PackedVector*"
  else
    echo "compute-sanitizer not found" | tee -a "$SUMMARY" >> "$OUT/ctest.log"
    status=1
  fi
fi

if [[ $installed -eq 0 ]] && wanted python; then
  # One inductor compile thread per pytest process: by default each of the 12 starts a pool of
  # one per core, and the cold compiles of the torch.compile tests (most of this step's time: a
  # fresh machine has no inductor cache) then fight over the cores.
  read -r -a targets <<< "${PYTEST_TARGETS:-$ROOT/tests/python}"
  if [[ -n "${PYTEST_SHARD:-}" ]]; then
    IFS=/ read -r share shares <<< "$PYTEST_SHARD"
    files=("$ROOT"/tests/python/test_*.py)  # (a glob expands sorted)
    targets=()
    for i in "${!files[@]}"; do (( i % shares == share - 1 )) && targets+=("${files[$i]}"); done
  fi
  # -v: each result as it comes ("[gw3] FAILED tests/..."), so a run stopped at the call's time
  # limit still names its failures (their tracebacks come only at the end).
  step pytest pytest.log env TORCHINDUCTOR_COMPILE_THREADS=1 \
    python3 -m pytest -v -rs --durations=15 "${PYTEST_PARALLEL[@]}" "${targets[@]}"
fi

# Most telling first: the kernels against the copy bandwidth, then through PyTorch against
# SpikingJelly (installed above), the host time of a call, training memory.
if [[ $installed -eq 0 ]] && wanted bench; then
  bench_step 90 bench bench.txt "$BUILD/bench_cuda_neurons" --csv "$OUT/bench_cuda_neurons.csv"
  bench_step 100 pybench bench.txt python3 "$ROOT/bench/python/bench_gpu_vs_spikingjelly.py" \
    --budget-s 75 --rep-ms 10 --csv "$OUT/bench_python_gpu.csv"
  # Where the host time of a small training step goes (the launch calls inside a step against
  # the same calls back to back): below T = 32 the host decides the step.
  bench_step 45 profilestep bench.txt python3 "$ROOT/bench/python/profile_step.py" --device cuda --neurons 1024 \
    --calls 200 --bursts 3 --top 10
  # The C++ and the Python path of small eager calls side by side (host µs per call).
  bench_step 25 hostpaths bench.txt python3 "$ROOT/bench/python/bench_host_paths.py" --device cuda --neurons 1024 \
    --steps 8 --calls 300 --bursts 3
  bench_step 180 bench-memory bench.txt python3 "$ROOT/bench/python/bench_memory.py"
fi

if [[ $installed -eq 0 ]] && wanted bench-extra; then
  bench_step 100 flexbench bench.txt python3 "$ROOT/bench/python/bench_flexsn_vs_builtin.py"
  bench_step 60 sjneuronbench bench.txt python3 "$ROOT/bench/python/bench_compiled_spikingjelly_neuron.py"
  bench_step 90 graphbench bench.txt python3 "$ROOT/bench/python/bench_cuda_graphs.py"
  bench_step 60 layoutbench bench.txt python3 "$ROOT/bench/python/bench_layouts.py"
  bench_step 40 fwdbench bench.txt python3 "$ROOT/bench/python/bench_forward_mode.py"
  bench_step 40 doublebench bench.txt python3 "$ROOT/bench/python/bench_double_backward.py" --device cuda
  bench_step 40 randbench bench.txt python3 "$ROOT/bench/python/bench_random_neurons.py"
  bench_step 45 nonlinearbench bench.txt python3 "$ROOT/bench/python/bench_nonlinear_neurons.py"
  bench_step 40 convertbench bench.txt python3 "$ROOT/bench/python/bench_converted_model.py" --model sew_resnet18 \
    --batch 32
  # The host CPU as a 2-core machine (two cores, two threads), like the machines CI runs on.
  bench_step 40 cpubench bench.txt taskset -c 0,1 python3 "$ROOT/bench/python/bench_cpu_vs_spikingjelly.py" \
    --threads 2 --reps 20
  bench_step 5 bench-bits bench.txt "$BUILD/bench_cuda_compress"
fi

for f in "$OUT"/*; do
  if [[ -f "$f" && $(stat -c %s "$f") -gt $((15 << 20)) ]]; then
    tail -c $((15 << 20)) "$f" > "$f.tmp" && mv "$f.tmp" "$f"
  fi
done
echo "overall: $([[ $status -eq 0 ]] && echo PASS || echo FAIL)" | tee -a "$SUMMARY"
exit $status
