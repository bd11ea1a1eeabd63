"""A FlexSN neuron written in Python against the built-in neuron with the same dynamics, side by
side in one run: LIF (tau = 2, hard reset to 0, sigmoid surrogate), inference and training
(forward + y.sum().backward()). The design's bar: the FlexSN neuron within 5 % of the built-in.
Beside them, SpikingJelly 2.0's FlexSN of the same core (its Triton kernels on CUDA, its loop on
the CPU) and spikejit's conversion of it (from_spikingjelly: StaticInputsFlexSN, the core calling
SpikingJelly's surrogate function).

    python bench/python/bench_flexsn_vs_builtin.py            # CUDA when available, else CPU
    python bench/python/bench_flexsn_vs_builtin.py --dry-run  # tiny sizes, a few repetitions
"""
import argparse
import copy
import functools

import torch

import spikejit
from bench_common import infer_and_train, interleaved_ms, markdown_table


# SpikingJelly's FlexSN Triton kernels unroll the time loop (tl.static_range over a constexpr T), so
# each T compiles its own kernels; at T = 256 one row did not finish within 5 minutes on an H100.
SPIKINGJELLY_MAX_STEPS = 64


def lif_core(x, v):
    h = v + (x - v) / 2.0
    s = spikejit.surrogate.Sigmoid(alpha=4.0)(h - 1.0)
    return s, h * (1.0 - s)


def spikingjelly_flexsn():
    """SpikingJelly's FlexSN of lif_core's dynamics with its own surrogate, or None without it."""
    try:
        from spikingjelly.activation_based import surrogate
        from spikingjelly.activation_based.neuron import FlexSN
    except ImportError:
        return None

    def sj_lif_core(x, v):  # (its FlexSN refuses cores that close over modules, a surrogate's too)
        h = v + (x - v) / 2.0
        s = surrogate.sigmoid.apply(h - 1.0, 4.0)
        return s, h * (1.0 - s)

    return FlexSN(sj_lif_core, num_states=1, step_mode="m")


def spikingjelly_implementation(node, device) -> str:
    """Which of its paths SpikingJelly's FlexSN chose (it logs the choice; this reads what it kept)."""
    if device.type != "cuda":
        return "its per-step loop (the CPU)"
    chosen = set(node._triton_capability.values())  # (per device and dtype: one of each here)
    if chosen == {True}:
        return "its Triton kernels"
    if chosen == {False}:
        return "torch's scan operator (its Triton failed)"
    return f"unknown ({node._triton_capability})"


def make_nodes(device):
    builtin = spikejit.LIFNode(tau=2.0, surrogate_function=spikejit.surrogate.Sigmoid(), step_mode="m")
    flex = spikejit.FlexSN(lif_core, num_inputs=1, num_states=1, num_outputs=1, step_mode="m", strict=True)
    nodes = {"built-in LIFNode": builtin.to(device), "FlexSN LIF": flex.to(device)}
    theirs = spikingjelly_flexsn()
    if theirs is not None:
        converted = spikejit.from_spikingjelly(copy.deepcopy(theirs))
        if converted.handle is None:
            raise RuntimeError(f"the converted FlexSN runs as an eager scan: {converted.fallback_reason}")
        nodes.update({"SpikingJelly FlexSN": theirs.to(device), "converted": converted.to(device)})
    return nodes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and spikejit.cuda_available() else "cpu")
    sizes = [(8, 4096), (32, 1024)] if args.dry_run or device.type == "cpu" else \
        [(8, 4194304), (32, 4194304), (256, 16384), (1024, 4096)]
    bursts, calls = (3, 2) if args.dry_run else (15, 10)
    nodes = make_nodes(device)
    print(f"device: {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}; ms per call, "
          f"median of {bursts} interleaved bursts of {calls} calls")
    header = ["mode", "T", "N", "built-in ms", "FlexSN ms", "FlexSN vs built-in"]
    if "converted" in nodes:
        header += ["SpikingJelly FlexSN ms", "converted ms", "converted vs SpikingJelly"]
    print(markdown_table(header, []), flush=True)  # then each row as it is measured
    for steps, neurons in sizes:
        for mode, step in infer_and_train(torch.rand(steps, neurons, device=device) * 2):
            timed = {name: node for name, node in nodes.items()
                     if name != "SpikingJelly FlexSN" or steps <= SPIKINGJELLY_MAX_STEPS}
            ms = interleaved_ms({name: functools.partial(step, node) for name, node in timed.items()}, device,
                                bursts, calls)
            built, flex = ms["built-in LIFNode"], ms["FlexSN LIF"]
            row = [mode, steps, neurons, f"{built:.4f}", f"{flex:.4f}", f"{100 * (flex / built - 1):+.1f} %"]
            if "SpikingJelly FlexSN" in ms:
                theirs, converted = ms["SpikingJelly FlexSN"], ms["converted"]
                row += [f"{theirs:.4f}", f"{converted:.4f}", f"{theirs / converted:.2f}x"]
            elif "converted" in ms:
                row += [f"not run (T > {SPIKINGJELLY_MAX_STEPS})", f"{ms['converted']:.4f}", "-"]
            print(markdown_table(header, [row]).splitlines()[-1], flush=True)
    if "converted" in nodes:
        print(f"SpikingJelly's FlexSN ran as: {spikingjelly_implementation(nodes['SpikingJelly FlexSN'], device)}")


if __name__ == "__main__":
    main()
