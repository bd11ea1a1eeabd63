#!/usr/bin/env bash
# The single entry point of spikejit.
#   ./run.sh demo   train a spiking network on the digits dataset (GPU or CPU); `demo cli`: the C++ tour
#   ./run.sh test   install what is needed, build, run every test (also under ASan+UBSan), fuzz the parser
#   ./run.sh gpu    on a machine with an NVIDIA GPU: GPU tests and benchmarks
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

case "${1:-}" in
  demo) shift; exec bash scripts/demo.sh "$@" ;;
  test) shift; exec bash scripts/test.sh "$@" ;;
  gpu)  shift; exec bash scripts/gpu_check.sh "$@" ;;
  *)
    echo "usage: ./run.sh demo|test|gpu" >&2
    sed -n '3,5s/^#//p' "$0" >&2
    exit 2
    ;;
esac
