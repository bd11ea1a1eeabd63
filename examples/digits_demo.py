"""Trains a spiking network on scikit-learn's bundled digits (8x8 images, 10 classes; nothing is
downloaded) with spikejit's fused neurons, then measures it against the same network written as a
plain PyTorch loop over time, and draws its spikes.

    python examples/digits_demo.py                    # GPU when spikejit can use one, else CPU
    python examples/digits_demo.py --epochs 1 --max-batches 3 --target 0   # a quick smoke run

Network (examples/digits_net.py): pixels encoded over T steps -> Linear -> spikejit.LIFNode ->
Linear -> an adaptive LIF with a learnable time constant per neuron, defined in Python and
compiled by spikejit.FlexSN -> Linear readout averaged over time. Exits with 1 when the final
test accuracy is below --target.
"""
import argparse
import re
import time

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm

import spikejit
from digits_figure import save_figure
from digits_net import DigitsSNN


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--steps", type=int, default=16, help="time steps T per image")
    p.add_argument("--encoding", choices=("direct", "rate"), default="rate",
                   help="direct: the pixel values at every step; rate: Bernoulli spikes with p = pixel")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--max-batches", type=int, default=0, help="batches per epoch (0: the whole set)")
    p.add_argument("--bench-repeats", type=int, default=2,
                   help="timed training epochs of the spikejit and of the loop model (0: no comparison)")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads of PyTorch and of spikejit's CPU executor (0: PyTorch's default)")
    p.add_argument("--target", type=float, default=0.90, help="test accuracy to reach (exit 1 below)")
    p.add_argument("--device", type=device_name, default="auto", help="auto, cpu, cuda or cuda:<index>")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--figure", default="digits_demo.png", help="where to write the PNG")
    return p.parse_args(argv)


def device_name(text):
    if text in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d+", text):
        return text
    raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda or cuda:<index>, got {text!r}")


def pick_device(name):
    """(device, why CUDA is not used or '')."""
    if not torch.cuda.is_available():
        why = "torch sees no GPU"
    elif not spikejit.cuda_available():
        why = spikejit.cuda_unavailable_reason()
    else:
        why = ""
    if name.startswith("cuda") and why:
        raise SystemExit(f"--device {name}: CUDA is not usable here ({why})")
    if name == "cpu" or why:
        return torch.device("cpu"), why if name == "auto" else ""
    return torch.device(name if name.startswith("cuda") else "cuda"), ""


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def load_data(device, seed):
    """(train images, train labels, test images, test labels); images [n, 64] in [0, 1]."""
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    return x_train.to(device), y_train.to(device), x_test.to(device), y_test.to(device)


class Encoder:
    """Images [B, 64] -> inputs [T, B, 64], direct or as Bernoulli (rate) spikes."""

    def __init__(self, encoding, device, seed):
        self.encoding = encoding
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def __call__(self, images, steps):
        if self.encoding == "direct":
            return images.unsqueeze(0).expand(steps, *images.shape)
        noise = torch.rand((steps, *images.shape), generator=self.generator, device=images.device)
        return (noise < images).to(images.dtype)


def make_batches(x, y, args, generator, encode):
    """One epoch of (inputs [T, B, 64], labels [B]) in a random order."""
    order = torch.randperm(len(x), generator=generator).to(x.device)
    batches = []
    for start in range(0, len(x), args.batch_size):
        index = order[start:start + args.batch_size]
        batches.append((encode(x[index], args.steps), y[index]))
        if args.max_batches and len(batches) == args.max_batches:
            break
    return batches


def train_epoch(model, optimizer, batches, description=None):
    """Trains on `batches`; returns (mean loss, training accuracy)."""
    model.train()
    total_loss, correct, seen = 0.0, 0, 0
    # A progress bar only for the main training, and only on a terminal (disable=None).
    progress = tqdm(batches, desc=description, leave=False, disable=None if description else True)
    for inputs, labels in progress:
        optimizer.zero_grad(set_to_none=True)
        logits = model(inputs)
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
        total_loss += loss.item() * len(labels)
        correct += (logits.argmax(1) == labels).sum().item()
        seen += len(labels)
        progress.set_postfix(loss=f"{loss.item():.3f}")
    return total_loss / seen, correct / seen


def evaluate(model, inputs, labels, batch_size=512):
    """(accuracy, logits) on encoded inputs [T, n, 64] with labels [n]."""
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(inputs[:, i:i + batch_size]) for i in range(0, inputs.shape[1], batch_size)])
    return (logits.argmax(1) == labels).float().mean().item(), logits


def timed(device, fn):
    synchronize(device)
    start = time.perf_counter()
    result = fn()
    synchronize(device)
    return time.perf_counter() - start, result


def relative_gradient_gap(models, inputs, labels):
    """The largest difference between the models' gradients of one batch's loss, each parameter's
    relative to its largest gradient."""
    grads = []
    for model in models:
        model.train()
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(inputs), labels).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        model.zero_grad(set_to_none=True)
    return max(((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item() for a, b in zip(*grads))


def compare_with_loop(trained, x_train, y_train, x_test, y_test, args, device):
    """Loads the trained weights into a spikejit and a plain-loop model, then trains both on the
    same batches and runs both on the test set, alternating between them (so that both see the
    same machine load) and keeping the best of --bench-repeats timings; prints the times and how
    closely the two agree."""
    models = {}
    for impl in ("spikejit", "loop"):
        model = DigitsSNN(impl, args.hidden).to(device)
        model.load_state_dict(trained.state_dict())
        models[impl] = (model, torch.optim.Adam(model.parameters(), lr=args.lr))

    generator = torch.Generator().manual_seed(args.seed + 1)
    encode = Encoder(args.encoding, device, args.seed + 1)
    epochs = [make_batches(x_train, y_train, args, generator, encode) for _ in range(args.bench_repeats)]
    test_inputs = encode(x_test, args.steps)
    gradient_gap = relative_gradient_gap([model for model, _ in models.values()], *epochs[0][0])
    for model, optimizer in models.values():  # warm-up: first calls allocate and compile
        train_epoch(model, optimizer, epochs[0][:2])
        evaluate(model, test_inputs[:, :64], y_test[:64])
    train_times = {impl: [] for impl in models}
    test_times = {impl: [] for impl in models}
    logits = {}
    for batches in epochs:
        for impl, (model, optimizer) in models.items():
            train_times[impl].append(timed(device, lambda: train_epoch(model, optimizer, batches))[0])
            seconds, (_, logits[impl]) = timed(device, lambda: evaluate(model, test_inputs, y_test))
            test_times[impl].append(seconds)

    print(f"\nspikejit against the same network as a plain PyTorch loop over time (same weights, same "
          f"batches, {device.type}, best of {args.bench_repeats}):")
    print(f"  {'':34s}{'spikejit':>10s}{'PyTorch loop':>14s}{'speed-up':>10s}")
    rows = [(f"training epoch ({len(epochs[0])} batches of {args.batch_size})", train_times),
            (f"test set inference ({len(x_test)} images)", test_times)]
    for label, times in rows:
        ours, loop = min(times["spikejit"]), min(times["loop"])
        print(f"  {label:34s}{ours:9.3f}s{loop:13.3f}s{loop / ours:9.1f}x")
    weights = max((a - b).abs().max().item() for a, b in zip(models["spikejit"][0].parameters(),
                                                             models["loop"][0].parameters()))
    same = (logits["spikejit"].argmax(1) == logits["loop"].argmax(1)).sum().item()
    steps = 2 + sum(len(batches) for batches in epochs)
    print(f"  same computation: the gradients of one batch differ by at most {gradient_gap:.1e} (relative); "
          f"after {steps} training steps side by side the weights differ by at most {weights:.1e} (Adam moves a "
          f"weight by about the learning rate whatever its gradient's size, so rounding in tiny gradients "
          f"grows); test predictions agree on {same}/{len(x_test)} images")


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device, why = pick_device(args.device)
    # One CPU thread by default: the layers are small (a few hundred thousand values a call), and
    # with every core busy PyTorch's threads spin-wait for each other: on a shared 2-core machine
    # two threads made epochs up to 20x slower, for both implementations, whenever another job ran.
    if device.type == "cpu" and args.threads:
        torch.set_num_threads(args.threads)
    threads = f", {torch.get_num_threads()} thread(s)" if device.type == "cpu" else ""
    print(f"device: {device}{threads}" + (f" (CUDA not used: {why})" if why else ""))
    x_train, y_train, x_test, y_test = load_data(device, args.seed)
    print(f"data: scikit-learn's digits, {len(x_train)} training and {len(x_test)} test images of 8x8 pixels")
    model = DigitsSNN("spikejit", args.hidden, record=False).to(device)
    print(f"network: 64 -> {args.hidden} LIF (spikejit.LIFNode) -> {args.hidden} adaptive LIF (FlexSN, "
          f"learnable tau per neuron) -> 10; T = {args.steps} steps, {args.encoding} encoding")

    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    generator = torch.Generator().manual_seed(args.seed)
    encode = Encoder(args.encoding, device, args.seed)
    test_encode = Encoder(args.encoding, device, args.seed + 2)
    accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        batches = make_batches(x_train, y_train, args, generator, encode)
        seconds, (loss, train_accuracy) = timed(
            device, lambda: train_epoch(model, optimizer, batches, f"epoch {epoch}/{args.epochs}"))
        accuracy, _ = evaluate(model, test_encode(x_test, args.steps), y_test)
        print(f"epoch {epoch}/{args.epochs}: loss {loss:.4f}, train accuracy {100 * train_accuracy:.1f}%, "
              f"test accuracy {100 * accuracy:.1f}%, {seconds:.2f} s")
    reached = accuracy >= args.target
    print(f"final test accuracy: {100 * accuracy:.1f}% ({'reached' if reached else 'BELOW'} the target "
          f"{100 * args.target:.0f}%)")

    if args.bench_repeats > 0:
        compare_with_loop(model, x_train, y_train, x_test, y_test, args, device)

    recorder = DigitsSNN("spikejit", args.hidden, record=True).to(device)
    recorder.load_state_dict(model.state_dict())
    recorder.eval()
    first_of_each = torch.stack([torch.nonzero(y_test == digit)[0, 0] for digit in range(10)])
    save_figure(recorder, x_test[first_of_each], y_test[first_of_each].tolist(), args.steps,
                Encoder(args.encoding, device, args.seed), args.figure)
    print(f"figure: {args.figure} (spike rasters and membrane potentials for one test image of each digit)")
    return 0 if reached else 1


if __name__ == "__main__":
    raise SystemExit(main())
