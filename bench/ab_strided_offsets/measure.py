"""One package's times of strided reads on CUDA (the spikejit first on sys.path): GatedLIFNode with
scalar and with per-channel gates, and LIF on an input repeated over T. A tab-separated line per
case: label, case, inference ms, its fraction of the copy bandwidth (8 bytes per neuron-step),
training step ms. run.sh alternates two packages.

    PYTHONPATH=/tmp/sj_old python3 bench/ab_strided_offsets/measure.py old1
"""
import os
import sys
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from bench_common import cuda_copy_bandwidth, inference_ms, training_step_ms  # noqa: E402

import spikejit  # noqa: E402

T = 32


def main():
    label = sys.argv[1]
    device = torch.device("cuda")
    args = types.SimpleNamespace(calls=10, bursts=7)
    bandwidth = cuda_copy_bandwidth(device, 1 << 26)
    torch.manual_seed(0)
    cases = []
    for name, shape, inplane in [("GLIF scalar gates", (T, 1 << 20, 1, 1, 1), None),
                                 ("GLIF per-channel, [T,32,128,16,16]", (T, 32, 128, 16, 16), 128)]:
        x = torch.randn(*shape, device=device) * 0.8 + 0.3
        cases.append((name, spikejit.GatedLIFNode(T=T, inplane=inplane).to(device), x, torch.randn_like(x)))
    frame = torch.randn(1 << 20, device=device)
    cases.append(("LIF, input repeated over T (expand)", spikejit.LIFNode(tau=2.0, step_mode="m").to(device),
                  frame.expand(T, -1), torch.randn(T, 1 << 20, device=device)))
    for name, node, x, grad in cases:
        infer = inference_ms(node, x, args, device)
        train = training_step_ms(node, x, grad, args, device)
        share = 100 * 8 * x.numel() / (infer * 1e-3) / bandwidth
        print(f"{label}\t{name}\tinfer {infer:.4f} ms\t{share:.0f} % of copy BW (8 B/neuron-step)\t"
              f"train {train:.4f} ms")


if __name__ == "__main__":
    main()
