#!/usr/bin/env bash
# A/B of strided reads on CUDA: the package at REV (default 11c11e4, before the strided offsets
# were computed once per time loop) against the working tree, alternated ROUNDS times (default 3).
# Run on the GPU machine; REV's tree must be carried in build-ab-old/ (ignored by git), made here
# with `rm -rf build-ab-old && mkdir build-ab-old && git archive REV | tar -x -C build-ab-old`.
cd "$(dirname "$0")/../.." || exit 1
rounds=${1:-3}
[[ -f build-ab-old/pyproject.toml ]] || { echo "build-ab-old/: expected REV's source tree (see the top of this file)" >&2; exit 2; }
python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/sj_new . > /tmp/build_new.log 2>&1 &
python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/sj_old ./build-ab-old > /tmp/build_old.log 2>&1
wait
for v in old new; do ls /tmp/sj_$v/spikejit/_core* > /dev/null || { tail -30 /tmp/build_$v.log; exit 1; }; done
echo "built in ${SECONDS}s"
for r in $(seq "$rounds"); do
  for v in old new; do PYTHONPATH=/tmp/sj_$v python3 bench/ab_strided_offsets/measure.py "$v$r"; done
done | tee "${OUT:-.}/ab_strided_offsets.txt"
