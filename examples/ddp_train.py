"""Data-parallel training of a spiking network with PyTorch's DistributedDataParallel.

    torchrun --nproc_per_node=2 examples/ddp_train.py            # 2 processes: GPUs (NCCL) or CPU (gloo)
    torchrun --nproc_per_node=2 examples/ddp_train.py --check    # also compare with 1-process training
    torchrun --nproc_per_node=2 examples/ddp_train.py --steps 200 --batch-size 2048 --bench   # step time
    python examples/ddp_train.py                                 # one process, without torchrun

One process per device: cuda:LOCAL_RANK with NCCL when spikejit can use CUDA (--device auto or
cuda), else the CPU with gloo. Every rank draws the same global batch and trains on its own
slice of it; DDP averages the gradients, so training equals one process on the whole batch.
The network is Linear -> spikejit.LIFNode -> Linear -> a FlexSN neuron with a learnable
threshold per neuron -> Linear, averaged over time.

--check makes rank 0 train the same network in one process on the whole global batch afterwards
and compare the gradients of every step and the final parameters (exit code 1 when they differ
by more than the tolerance of --dtype). --out FILE saves rank 0's record (torch.save).
"""
import argparse
import datetime
import os
import socket
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast (NVLS) stays off

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import spikejit  # noqa: E402

CLASSES = 10
# Largest difference allowed between DDP and one-process training, relative to the largest
# magnitude of each compared tensor: summation order differs (the all-reduce), nothing else.
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-4}
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=40, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64, help="global batch, split evenly over the ranks")
    p.add_argument("--time-steps", type=int, default=8, help="time steps T")
    p.add_argument("--inputs", type=int, default=32)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--dtype", choices=tuple(DTYPES), default="float32",
                   help="float64 runs on the CPU only")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check", action="store_true", help="compare with one-process training (rank 0)")
    p.add_argument("--bench", action="store_true", help="print the mean step time after 5 warm-up steps")
    p.add_argument("--out", help="file for rank 0's record: losses, gradients of every step, parameters")
    return p.parse_args(argv)


class ThresholdLIF(nn.Module):
    """One step of a LIF neuron with a learnable threshold per neuron, for FlexSN."""

    def __init__(self, size):
        super().__init__()
        self.theta = nn.Parameter(torch.ones(size))
        self.spike = spikejit.surrogate.ATan()

    def forward(self, x, v):
        h = v + (x - v) / 2.0
        s = self.spike(h - self.theta)
        return s, h * (1.0 - s)


class Network(nn.Module):
    def __init__(self, inputs, hidden):
        super().__init__()
        self.fc1 = nn.Linear(inputs, hidden)
        self.lif = spikejit.LIFNode(tau=2.0, surrogate_function=spikejit.surrogate.ATan(), step_mode="m")
        self.fc2 = nn.Linear(hidden, hidden)
        self.neuron = spikejit.FlexSN(ThresholdLIF(hidden), num_inputs=1, num_states=1, num_outputs=1,
                                      strict=True)
        self.fc3 = nn.Linear(hidden, CLASSES)
        # Weights larger than nn.Linear's default (std 2 / sqrt(fan_in)), so that both spiking
        # layers fire from the first step and every parameter gets a gradient at once.
        for layer in (self.fc1, self.fc2):
            nn.init.normal_(layer.weight, std=2.0 / layer.in_features ** 0.5)

    def forward(self, x_seq):                      # [T, B, inputs] -> logits [B, CLASSES]
        self.lif.reset()
        self.neuron.reset()
        return self.fc3(self.neuron(self.fc2(self.lif(self.fc1(x_seq))))).mean(0)


def build_network(args, device, dtype):
    """The same initial weights in every process (seeded), on `device`."""
    torch.manual_seed(args.seed)
    return Network(args.inputs, args.hidden).to(device=device, dtype=dtype)


def global_batch(step, args, dtype):
    """Step `step`'s global batch, the same in every process: currents [T, B, inputs] and labels
    [B] from a fixed random teacher, made on the CPU (so identical whatever the device)."""
    teacher = torch.Generator().manual_seed(args.seed + 1)
    projection = torch.randn(args.inputs, CLASSES, generator=teacher, dtype=torch.float64)
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
    pattern = torch.randn(args.batch_size, args.inputs, generator=g, dtype=torch.float64)
    noise = torch.randn(args.time_steps, args.batch_size, args.inputs, generator=g, dtype=torch.float64)
    x_seq = 0.5 + pattern + 0.5 * noise
    return x_seq.to(dtype), (pattern @ projection).argmax(1)


def train(model, parameters, args, device, dtype, rank=0, world=1):
    """args.steps SGD steps on this rank's slice of each global batch. Returns the record: per
    step the global loss and the gradients (as the optimizer saw them), then the parameters."""
    optimizer = torch.optim.SGD(parameters, lr=args.lr, momentum=0.9)
    local = args.batch_size // world
    record = {"world": world, "losses": [], "grads": [], "step_seconds": []}
    for step in range(args.steps):
        x_seq, labels = global_batch(step, args, dtype)
        x_seq = x_seq[:, rank * local:(rank + 1) * local].to(device)
        labels = labels[rank * local:(rank + 1) * local].to(device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x_seq), labels)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        record["step_seconds"].append(time.perf_counter() - start)
        total = loss.detach().clone()
        if world > 1:
            dist.all_reduce(total)
        record["losses"].append(total.item() / world)
        record["grads"].append([p.grad.detach().cpu().clone() for p in parameters])
    record["params"] = [p.detach().cpu().clone() for p in parameters]
    return record


def train_ddp(args, device, dtype, rank, local_rank, world):
    """train() through DistributedDataParallel. The DDP module is freed when this returns, before
    destroy_process_group: freed after it, its gloo process group's teardown once hung here."""
    model = build_network(args, device, dtype)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)
    return train(ddp, list(model.parameters()), args, device, dtype, rank, world)


def single_process(args, device, dtype):
    """The reference: the same network trained in this process on the whole global batch."""
    model = build_network(args, device, dtype)
    return train(model, list(model.parameters()), args, device, dtype)


def largest_difference(ours, reference):
    """max |a - b| / max |b| over lists of tensors (the worst tensor)."""
    worst = 0.0
    for a, b in zip(ours, reference):
        scale = b.abs().max().item() or 1.0
        worst = max(worst, (a - b).abs().max().item() / scale)
    return worst


def compare(ddp, reference, dtype):
    """(gradient difference, parameter difference, ok) of a DDP record against the reference."""
    grads = max(largest_difference(a, b) for a, b in zip(ddp["grads"], reference["grads"]))
    params = largest_difference(ddp["params"], reference["params"])
    return grads, params, max(grads, params) <= TOLERANCE[dtype]


def pick_device(name, local_rank):
    usable = torch.cuda.is_available() and spikejit.cuda_available()
    if name == "cuda" and not usable:
        why = "torch sees no GPU" if not torch.cuda.is_available() else spikejit.cuda_unavailable_reason()
        raise SystemExit(f"--device cuda: CUDA is not usable here ({why})")
    if name == "cuda" or (name == "auto" and usable):
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    args = parse_args(argv)
    if "RANK" not in os.environ:  # not started by torchrun: a world of one process
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_port()))
    rank, local_rank, world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    dtype = DTYPES[args.dtype]
    device = pick_device(args.device, local_rank)
    if device.type == "cuda" and dtype == torch.float64:
        raise SystemExit("--dtype float64: spikejit's CUDA kernels store float32, float16 or bfloat16; "
                         "use --device cpu")
    if args.batch_size % world:
        raise SystemExit(f"--batch-size: expected a multiple of the {world} processes, got {args.batch_size}")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    # A timeout, so that a lost peer ends the run with an error instead of a hang.
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=120))
    try:
        record = train_ddp(args, device, dtype, rank, local_rank, world)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return 0

    losses = record["losses"]
    print(f"{world} process(es), {backend} on {device.type}, {args.dtype}: global batch {args.batch_size} "
          f"({args.batch_size // world} per process), T = {args.time_steps}")
    print(f"loss: {losses[0]:.4f} at step 1 -> {losses[-1]:.4f} at step {len(losses)}")
    if args.bench:
        timed = record["step_seconds"][5:] or record["step_seconds"]
        mean = sum(timed) / len(timed)
        print(f"step time: {1e3 * mean:.3f} ms (rank 0, mean of {len(timed)} steps after "
              f"{len(record['step_seconds']) - len(timed)} warm-up), {args.batch_size / mean:.0f} samples/s")
    if args.out:
        torch.save(record, args.out)
    if args.check:
        grads, params, ok = compare(record, single_process(args, device, dtype), dtype)
        print(f"check against one process on the whole batch: gradients differ by {grads:.1e}, parameters "
              f"by {params:.1e} (relative, tolerance {TOLERANCE[dtype]:.0e}): {'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
