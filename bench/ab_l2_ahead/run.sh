#!/usr/bin/env bash
# A/B of kRingL2Ahead: builds the package once per value into /tmp/pkg<k>, then times them alternately.
cd "$(dirname "$0")/../.." || exit 1
python3 -m pip install -q --no-build-isolation --no-deps .whl/*.whl > /dev/null 2>&1
for k in "$@"; do
  ( rm -rf /tmp/src$k && mkdir -p /tmp/src$k &&
    tar --exclude=./.whl --exclude=./build-deps --exclude='./build*' --exclude=./.venv -cf - . | tar -xf - -C /tmp/src$k &&
    sed -i "s/constexpr int kRingL2Ahead = 32;/constexpr int kRingL2Ahead = $k;/" /tmp/src$k/src/codegen/kernel_source.cpp &&
    grep -q "kRingL2Ahead = $k;" /tmp/src$k/src/codegen/kernel_source.cpp &&
    CMAKE_BUILD_PARALLEL_LEVEL=4 python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/pkg$k /tmp/src$k > /tmp/build$k.log 2>&1 ) &
done
wait
for k in "$@"; do ls /tmp/pkg$k/spikejit/_core* > /dev/null || { tail -30 /tmp/build$k.log; exit 1; }; done
echo "built in ${SECONDS}s"
python3 bench/ab_l2_ahead/ab.py "$@" | tee "$OUT/ab.txt"
