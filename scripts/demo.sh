#!/usr/bin/env bash
# The main job: installs what it needs (CMake and a C++ compiler for the package's extension, the
# virtual environment .venv/ with PyTorch, scikit-learn, matplotlib and tqdm, then the spikejit
# package itself) and trains a spiking network on scikit-learn's bundled digits with
# examples/digits_demo.py, on the GPU when spikejit can use one, else on the CPU.
#   ./run.sh demo [OPTIONS]   OPTIONS go to examples/digits_demo.py (--epochs 4, --device cpu, --help)
#   ./run.sh demo cli         the C++ side instead: builds the spikejit command line and tours it
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The command line on the built-in LIF and a custom neuron written in the text format
# (examples/adaptive_lif.sj), for inference and training, then the C++ example.
cli_tour() {
  bash scripts/deps.sh cmake make g++ libgtest-dev libbenchmark-dev
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j "${JOBS:-$(nproc)}" --target spikejit example_custom_neuron

  local sj=build/spikejit
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
}

if [[ "${1:-}" == "cli" ]]; then
  cli_tour
  exit 0
fi

bash scripts/deps.sh cmake make g++
echo "== Python environment (.venv/; the first run downloads PyTorch)"
bash scripts/python_env.sh
echo "== the spikejit package (pip install --no-build-isolation .)"
.venv/bin/python -m pip install -q --no-build-isolation .
mkdir -p build
echo "== training a spiking network on scikit-learn's digits (examples/digits_demo.py)"
exec .venv/bin/python examples/digits_demo.py --figure build/digits_demo.png "$@"
