#!/usr/bin/env bash
# A/B of the generated kernels: bench_cuda_neurons --quick of REV's source tree against the
# working tree's, alternated ROUNDS times (default 2), in one call on the GPU machine.
#
#   here:             rm -rf build-ab-old && mkdir build-ab-old && git archive REV | tar -x -C build-ab-old
#   on the GPU:       bash scripts/ab_cuda_neurons.sh [ROUNDS]   (carry build-ab-old, .whl, build-deps)
#
# The working tree's binary is build-gpu/bench_cuda_neurons (built here if missing); REV's is
# built in build-ab-old/build. Each run's table goes to $OUT/ab_new_R.txt and $OUT/ab_old_R.txt,
# the summary to $OUT/ab_summary.md; the kernels of both compile into one fresh cache.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${1:-2}
OUT=${OUT:-gpu-out}
[[ -f build-ab-old/CMakeLists.txt ]] || { echo "build-ab-old/: expected REV's source tree (see the top of this file)" >&2; exit 2; }
mkdir -p "$OUT"
# Google Benchmark from the Debian packages in build-deps/ where the system has none (as gpu_check.sh).
deps=()
if compgen -G "build-deps/*.deb" > /dev/null; then
  for deb in build-deps/*.deb; do dpkg -x "$deb" build-ab-old/deps; done
  deps=(-DCMAKE_PREFIX_PATH="$PWD/build-ab-old/deps/usr")
fi
build() {  # build SOURCE_DIR BUILD_DIR
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DSPIKEJIT_BUILD_BENCH=ON "${deps[@]}" > "$OUT/ab_build.log" 2>&1 &&
    cmake --build "$2" -j "$(nproc)" --target bench_cuda_neurons >> "$OUT/ab_build.log" 2>&1 ||
    { tail -30 "$OUT/ab_build.log"; exit 1; }
}
[[ -x build-gpu/bench_cuda_neurons ]] || build . build-gpu
build build-ab-old build-ab-old/build
export SPIKEJIT_CACHE_DIR=${SPIKEJIT_CACHE_DIR:-$(mktemp -d)}
for r in $(seq "$rounds"); do
  build-gpu/bench_cuda_neurons --quick > "$OUT/ab_new_$r.txt"
  build-ab-old/build/bench_cuda_neurons --quick > "$OUT/ab_old_$r.txt"
done
# One row per case: the medians of each side's rounds and old / new (above 1: the working tree is faster).
python3 - "$OUT" "$rounds" <<'PY' | tee "$OUT/ab_summary.md"
import statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def times(side):
    cases = {}
    for r in range(1, rounds + 1):
        for line in open(f"{out}/ab_{side}_{r}.txt"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) > 5 and cells[1].startswith("float"):
                cases.setdefault(" ".join(cells[:5]), []).append(float(cells[5]))
    return cases
old, new = times("old"), times("new")
print("| neuron dtype mode T N | old ms | new ms | old / new |\n|---|---|---|---|")
for case, ms in old.items():
    if case in new:
        a, b = statistics.median(ms), statistics.median(new[case])
        print(f"| {case} | {a:.4f} | {b:.4f} | {a / b:.3f} |")
PY
