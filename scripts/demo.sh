#!/usr/bin/env bash
# The main job for now: build the spikejit CLI and simulate, on the CPU, the built-in LIF neuron
# and a custom neuron written in the text format (examples/adaptive_lif.sj), for inference and
# for training (forward + backward), then run the C++ example.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

JOBS=${JOBS:-$(nproc)}
bash scripts/deps.sh cmake make g++ libgtest-dev libbenchmark-dev
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$JOBS" --target spikejit example_custom_neuron

sj=build/spikejit
step() { echo; echo "\$ spikejit $*"; "$sj" "$@"; }

echo; echo "== 1. The built-in LIF (SpikingJelly's LIFNode, tau = 2, hard reset to 0) as a neuron definition"
step check builtin:lif
echo; echo "== 2. LIF on the CPU: 65536 neurons x 100 steps of Gaussian input, inference, then training"
step run builtin:lif --steps 100 --neurons 65536 --seed 1
step run builtin:lif --steps 32 --neurons 65536 --seed 1 --train
echo; echo "== 3. A custom neuron: adaptive threshold, two states (examples/adaptive_lif.sj)"
step check examples/adaptive_lif.sj
step grad examples/adaptive_lif.sj
step run examples/adaptive_lif.sj --steps 100 --neurons 65536 --seed 1
echo; echo "   Stronger adaptation (beta 0.2 -> 1.0) lowers the firing rate:"
step run examples/adaptive_lif.sj --steps 100 --neurons 65536 --seed 1 --set beta=1.0
echo; echo "== 4. The C++ API: examples/custom_neuron.cpp"
build/example_custom_neuron
