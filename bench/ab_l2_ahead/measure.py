# One variant's times (ms, do_bench median with its L2 flush), as JSON on stdout.
import json, sys, os
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from bench_common import spikejit_node
from bench_gpu_vs_spikingjelly import steps_for
from triton.testing import do_bench
import spikejit
assert spikejit.__file__.startswith(os.environ["PKG"]), spikejit.__file__
dev = torch.device("cuda")
out = {}
cases = [(k, "fp32", T, N) for k in ("LIF", "PLIF", "IF") for T, N in ((256, 16384), (1024, 4096), (64, 32768))]
cases += [("LIF", "fp16", 256, 16384), ("LIF", "fp16", 1024, 4096), ("LIF", "fp32", 32, 4194304)]
for kind, dt, T, N in cases:
    dtype = torch.float32 if dt == "fp32" else torch.float16
    node = spikejit_node(kind, dev, dtype)
    torch.manual_seed(T * 7 + N)
    for mode in ("infer", "train"):
        x = (torch.randn(T, N, device=dev) * 1.5 + 0.5).to(dtype).requires_grad_(mode == "train")
        step = steps_for(node, x)[mode]
        step()  # results to compare between variants (same kernels math: equal bits)
        if mode == "train":
            out["sum " + f"{kind} {dt} T={T} N={N}"] = [float(x.grad.double().sum()), float(x.grad.double().abs().sum())]
        else:
            with torch.no_grad():
                out["sum s " + f"{kind} {dt} T={T} N={N}"] = float(node(x).double().sum())
            node.reset()
        out[f"{kind} {dt} {mode} T={T} N={N}"] = float(do_bench(step, warmup=25, rep=100, return_mode="median"))
print(json.dumps(out))
