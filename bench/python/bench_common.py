"""Helpers shared by the Python benchmarks: neuron construction for spikejit and SpikingJelly,
minimal byte counts, statistics and markdown tables."""
import statistics
import time

NEURONS = ("IF", "LIF", "PLIF")


def device_name(device):
    """The GPU's name for a CUDA device, "CPU" for the CPU (the headers of the tables)."""
    import torch
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"


def spikejit_node(kind, device, dtype):
    import spikejit
    surrogate = spikejit.surrogate.Sigmoid()
    if kind == "IF":
        node = spikejit.IFNode(surrogate_function=surrogate, step_mode="m")
    elif kind == "LIF":
        node = spikejit.LIFNode(tau=2.0, surrogate_function=surrogate, step_mode="m")
    else:
        node = spikejit.ParametricLIFNode(init_tau=2.0, surrogate_function=surrogate, step_mode="m")
    return node.to(device=device, dtype=dtype)


def spikingjelly_node(kind, device, dtype):
    from spikingjelly.activation_based import neuron, surrogate
    if kind == "IF":
        node = neuron.IFNode(surrogate_function=surrogate.Sigmoid(), step_mode="m")
    elif kind == "LIF":
        node = neuron.LIFNode(tau=2.0, surrogate_function=surrogate.Sigmoid(), step_mode="m")
    else:
        node = neuron.ParametricLIFNode(init_tau=2.0, surrogate_function=surrogate.Sigmoid(), step_mode="m")
    return node.to(device=device, dtype=dtype)


def dtype_size(dtype_name):
    return {"fp32": 4, "fp16": 2, "bf16": 2, "fp64": 8}[dtype_name]


def minimal_bytes(mode, steps, neurons, element_size):
    """The bytes any implementation must move (anchor-h200.md): inference reads x and writes s;
    training writes s and h in the forward (after reading x), then reads grad s and h and writes
    grad x. PLIF's scalar w adds nothing."""
    sequence = steps * neurons * element_size
    return (2 if mode == "infer" else 6) * sequence


def quartiles(values):
    """(median, 25th percentile, 75th percentile)."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return statistics.median(values), q[0], q[2]


def markdown_table(headers, rows):
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(value, digits=3):
    """A number for a table; '–' for a missing one."""
    if value is None:
        return "–"
    return f"{value:.{digits}g}" if abs(value) < 10 ** digits else f"{value:.0f}"


def burst_ms(fn, device, calls):
    """Milliseconds per call of `calls` calls of fn() back to back (CUDA events on a GPU, wall
    time on the CPU)."""
    import torch
    if device.type == "cuda":
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) / calls
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) * 1e3 / calls


def median_ms(fn, device, calls, bursts, warm_up=3):
    """Median over `bursts` bursts of the milliseconds per call of fn() (burst_ms), after warm-up calls."""
    for _ in range(warm_up):
        fn()
    return statistics.median(burst_ms(fn, device, calls) for _ in range(bursts))


def interleaved_ms(fns, device, bursts, calls):
    """Median ms per call of each of `fns` (name -> callable), the bursts of the two taken in
    turn (the order flipped every round) so that a drift of the host or the GPU's clocks
    falls on both alike."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    times = {name: [] for name in fns}
    names = list(fns)
    for burst in range(bursts):
        for name in (names if burst % 2 == 0 else names[::-1]):
            times[name].append(burst_ms(fns[name], device, calls))
    return {name: statistics.median(t) for name, t in times.items()}


def infer_and_train(x):
    """The two ways a neuron module is timed on the sequence x, as (mode, fn(node)) pairs: "infer",
    one call without gradients; "train", one call on a copy of x that requires its gradient, then
    y.sum().backward(). A neuron in step mode 's' is called once per step. Each resets the neuron
    after its call."""
    import torch
    xg = x.clone().requires_grad_()

    def call(node, x_seq):
        return node(x_seq) if node.step_mode == "m" else torch.stack([node(x_t) for x_t in x_seq])

    def infer(node):
        with torch.no_grad():
            call(node, x)
        node.reset()

    def train(node):
        xg.grad = None
        call(node, xg).sum().backward()
        node.reset()

    return (("infer", infer), ("train", train))


def cuda_copy_bandwidth(device, numel):
    """Bytes read + written per second by a device-to-device copy of `numel` float32; None off CUDA."""
    import torch
    if device.type != "cuda":
        return None
    src = torch.empty(numel, device=device)
    dst = torch.empty_like(src)
    return 2 * numel * 4 / (median_ms(lambda: dst.copy_(src), device, 10, 5) * 1e-3)


def check_counts(parser, args, *names):
    """parser.error for the first of the named arguments below 1 (its flag, its value)."""
    for name in names:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected a count >= 1, got {getattr(args, name)}")


def flexsn_bench_args(description, argv=None):
    """The arguments of the FlexSN core benchmarks: device, T, N (default 1M on CUDA, 65536 on
    the CPU), calls per burst, bursts, --dry-run (tiny sizes: a check that it runs)."""
    import argparse
    import torch
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--neurons", type=int, default=None,
                        help="N (default: 1048576 on CUDA, 65536 on the CPU)")
    parser.add_argument("--calls", type=int, default=5, help="calls per burst")
    parser.add_argument("--bursts", type=int, default=5)
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes, few calls (a check that it runs)")
    args = parser.parse_args(argv)
    if args.neurons is None:
        args.neurons = 1 << 20 if args.device.startswith("cuda") else 1 << 16
    if args.dry_run:
        args.steps, args.neurons, args.calls, args.bursts = 4, 64, 2, 2
    check_counts(parser, args, "steps", "neurons", "calls", "bursts")
    return args


def reset(node):
    """node.reset() where the module has one (SpikingJelly's PSN and few-spikes neurons do not)."""
    if hasattr(node, "reset"):
        node.reset()


def inference_ms(node, x, args, device):
    """Median ms of an inference call of a neuron module: reset, forward under no_grad."""
    import torch

    def call():
        reset(node)
        with torch.no_grad():
            node(x)

    return median_ms(call, device, args.calls, args.bursts)


def training_step_ms(node, x, grad, args, device):
    """Median ms of a training step of a neuron module: forward, backward against `grad`, reset."""
    xt = x.clone().requires_grad_()

    def step():
        xt.grad = None
        reset(node)
        node(xt).backward(grad)

    return median_ms(step, device, args.calls, args.bursts)
