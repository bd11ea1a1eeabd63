"""Stochastic FlexSN neurons: what the kernels' random draws cost, and against the eager scan.

    python3 bench/python/bench_random_neurons.py [--device cuda] [--steps 32] [--neurons 1048576]

Six cores, fp32: a LIF without noise (the yardstick), the same LIF with a noisy threshold
(one uniform() draw per neuron and step), with Gaussian input noise (randn_like: two draws; by
erfinv or by torch.special.ndtri of one draw) and with Bernoulli escape spikes (torch.bernoulli:
one draw). Milliseconds per inference call (no
autograd) and per training step (forward, backward against a gradient, reset) of the compiled
kernels, median of bursts; the training step of the eager scan of the same core (backend="torch",
what such a core ran as before FlexSN compiled random draws); and the cost of the draws, the
compiled time over the noise-free LIF's. On CUDA also the inference's fraction of the copy
bandwidth (it moves 8 bytes per neuron-step: x read, s written): a draw is about 70 integer
instructions of Philox, shared by four neighbouring neurons on the CPU.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import (cuda_copy_bandwidth, device_name, flexsn_bench_args, fmt, markdown_table,  # noqa: E402
                          inference_ms, training_step_ms)

import spikejit  # noqa: E402

SURROGATE = spikejit.surrogate.ATan()


def lif(x, v):
    h = 0.5 * v + x
    s = SURROGATE(h - 1.0)
    return s, h * (1.0 - s)


def noisy_threshold(x, v):
    h = 0.5 * v + x
    s = SURROGATE(h - 1.0 + 0.4 * (torch.rand_like(h) - 0.5))
    return s, h * (1.0 - s)


def input_noise(x, v):
    h = 0.5 * v + x + 0.2 * torch.randn_like(x)
    s = SURROGATE(h - 1.0)
    return s, h * (1.0 - s)


def inverse_cdf_noise(x, v):
    """Gaussian input noise from one draw, by the inverse of the normal CDF (the draw kept off 0,
    where erfinv(-1) is -inf)."""
    u = torch.rand_like(x).clamp_min(1e-7)
    h = 0.5 * v + x + 0.2 * 1.4142135623730951 * torch.erfinv(2.0 * u - 1.0)
    s = SURROGATE(h - 1.0)
    return s, h * (1.0 - s)


def ndtri_noise(x, v):
    """The same noise by torch.special.ndtri, the inverse of the normal CDF itself."""
    u = torch.rand_like(x).clamp_min(1e-7)
    h = 0.5 * v + x + 0.2 * torch.special.ndtri(u)
    s = SURROGATE(h - 1.0)
    return s, h * (1.0 - s)


def escape_spikes(x, v):
    h = 0.5 * v + x
    s = torch.maximum(SURROGATE(h - 1.0), torch.bernoulli(0.05 * torch.sigmoid(h)))
    return s, h * (1.0 - s)


CORES = {"LIF (no noise)": lif, "noisy threshold (1 draw)": noisy_threshold,
         "Gaussian input noise (2 draws)": input_noise,
         "Gaussian input noise by erfinv (1 draw)": inverse_cdf_noise,
         "Gaussian input noise by ndtri (1 draw)": ndtri_noise, "Bernoulli escape (1 draw)": escape_spikes}


def parse_args(argv=None):
    return flexsn_bench_args(__doc__.splitlines()[0], argv)



def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    name = device_name(device)
    print(f"# Stochastic FlexSN neurons, fp32, T = {args.steps}, N = {args.neurons}, {name}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"ms per call, median of {args.bursts} bursts of {args.calls} calls\n")
    torch.manual_seed(0)
    x = torch.randn(args.steps, args.neurons, device=device) + 0.5
    grad = torch.randn_like(x)
    bandwidth = cuda_copy_bandwidth(device, 1 << 26)
    rows, base = [], None
    for label, core in CORES.items():
        compiled = spikejit.FlexSN(core, 1, 1, 1, strict=True)
        eager = spikejit.FlexSN(core, 1, 1, 1, backend="torch")
        infer = inference_ms(compiled, x, args, device)
        train = training_step_ms(compiled, x, grad, args, device)
        eager_train = training_step_ms(eager, x, grad, args, device)
        base = base or (infer, train)
        copy = "–" if bandwidth is None else f"{100 * 8 * x.numel() / (infer * 1e-3) / bandwidth:.0f} %"
        rows.append([label, fmt(infer), copy, f"{infer / base[0]:.2f}x", fmt(train), f"{train / base[1]:.2f}x",
                     fmt(eager_train), f"{eager_train / train:.1f}x"])
    print(markdown_table(["core", "inference ms", "% of copy BW", "vs no noise", "training ms", "vs no noise",
                          "eager scan training ms", "speed-up"], rows))


if __name__ == "__main__":
    main()
