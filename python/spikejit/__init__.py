"""spikejit: fused multi-step spiking-neuron kernels for PyTorch.

    import spikejit
    lif = spikejit.LIFNode(tau=2.0, step_mode="m")          # SpikingJelly's arguments
    s_seq = lif(x_seq)                                      # [T, *S]
    node = spikejit.FlexSN(core, num_inputs=1, num_states=1, num_outputs=1)   # your own neuron

CPU tensors run on the C++ executor, CUDA tensors on kernels generated and compiled at run time
(NVRTC, no toolkit needed). Every op is a torch.library custom op with a fake implementation
and autograd, so torch.compile(fullgraph=True) sees no graph breaks.
"""
import torch

from ._build_info import TORCH_VERSION as _BUILT_AGAINST_TORCH

# The extension's C++ autograd node links the PyTorch it was built against (loaded first, here).
if _BUILT_AGAINST_TORCH and _BUILT_AGAINST_TORCH != torch.__version__:
    raise ImportError(f"spikejit was built against torch {_BUILT_AGAINST_TORCH}, but torch {torch.__version__} is "
                      "installed: reinstall spikejit with this torch (pip install --no-build-isolation "
                      "--force-reinstall --no-deps <spikejit source>)")

from . import _core  # noqa: E402
from ._core import ArgumentError, Error, ParseError, Program
from . import cpu_pool, ops, registry, surrogate
from .flexsn import FlexSN, FlexSNKernel, UnsupportedCoreError
from .static_inputs_flexsn import StaticInputsFlexSN
from .compiled_spikingjelly_neuron import CompiledSpikingJellyNeuron
from .functional import (if_multi_step, lif_multi_step, multistep_if, multistep_lif, multistep_plif,
                         plif_multi_step)
from .neuron import IFNode, LIFNode, ParametricLIFNode
from .nonlinear_neuron import EIFNode, IzhikevichNode, QIFNode
from .ilif_neuron import ILIFNode
from .lif_variants import ComplementaryLIFNode, CUBALIFNode, KLIFNode, LIAFNode
from .conversion_neurons import ActivationAwareIFNode, HalfThresholdIFNode, STBIFNode
from .resonate_neuron import RAFNode
from .ternary_neuron import TernaryIFNode, TernaryLIFNode
from .readout_neuron import NonSpikingIFNode, NonSpikingLIFNode
from .gated_lif_neuron import GatedLIFNode
from .online_neurons import OTTTLIFNode, SLTTLIFNode
from .simple_neuron import SimpleBaseNode, SimpleIFNode, SimpleLIFNode
from .psn import PSN, MaskedPSN, SlidingPSN
from .few_spike_neuron import FewSpikeNode, FewSpikeTable, HGNode, OutlierAwareThresholdNode
from .dsr_neuron import DSRIFNode, DSRLIFNode
from .mpbn_neuron import MPBNLIFNode
from .nn import PackedSpikeConv2d, PackedSpikeLinear, packed_spikes
from .recompute import Recompute
from .spikingjelly_conversion import from_spikingjelly
from ._double_backward import double_backward
from .scan import (eager_scan, eager_scan_final_state, lowerable_scan, lowerable_scan_available,
                   lowerable_scan_final_state)

__version__ = "0.1.0"

__all__ = [
    "Program", "ParseError", "ArgumentError", "Error", "UnsupportedCoreError",
    "IFNode", "LIFNode", "ParametricLIFNode", "QIFNode", "EIFNode", "IzhikevichNode", "ILIFNode",
    "ComplementaryLIFNode", "KLIFNode", "CUBALIFNode", "LIAFNode", "GatedLIFNode", "RAFNode", "TernaryIFNode",
    "TernaryLIFNode",
    "NonSpikingIFNode", "NonSpikingLIFNode", "SLTTLIFNode", "OTTTLIFNode", "ActivationAwareIFNode",
    "HalfThresholdIFNode", "STBIFNode", "SimpleBaseNode", "SimpleIFNode", "SimpleLIFNode", "PSN", "MaskedPSN",
    "SlidingPSN", "FewSpikeTable", "FewSpikeNode", "OutlierAwareThresholdNode", "HGNode", "DSRIFNode", "DSRLIFNode",
    "MPBNLIFNode", "FlexSN", "FlexSNKernel", "StaticInputsFlexSN", "CompiledSpikingJellyNeuron",
    "multistep_if", "multistep_lif", "multistep_plif", "if_multi_step", "lif_multi_step", "plif_multi_step",
    "eager_scan", "eager_scan_final_state", "lowerable_scan", "lowerable_scan_final_state",
    "lowerable_scan_available", "bit_spike_compress", "bit_spike_decompress", "pack_spike_rows",
    "unpack_spike_rows", "cuda_available", "cuda_unavailable_reason", "cpu_fused_available",
    "cpu_fused_unavailable_reason",
    "PackedSpikeLinear", "PackedSpikeConv2d", "packed_spikes", "Recompute", "double_backward", "from_spikingjelly",
    "surrogate", "registry", "ops", "cpu_pool",
]


def cuda_available() -> bool:
    """True when spikejit can run CUDA kernels here (a driver, a device and NVRTC)."""
    return _core.cuda_available()[0]


def cuda_unavailable_reason() -> str:
    """Why CUDA kernels cannot run here ('' when they can): what was not found and where."""
    return _core.cuda_available()[1]


def cpu_fused_available() -> bool:
    """True when CPU calls of at least 2^20 neuron-steps can run the neuron's step compiled by the
    host's C++ compiler (the same results as the interpreted steps, faster; docs/user-guide.md)."""
    return _core.cpu_fused_support()[0]


def cpu_fused_unavailable_reason() -> str:
    """Why CPU steps are always interpreted here ('' when they can be compiled): SPIKEJIT_CPU_FUSED=0,
    or no C++ compiler, with what was tried."""
    available, detail = _core.cpu_fused_support()
    return "" if available else detail


def bit_spike_compress(s):
    """Spikes -> uint8[ceil(n / 8)]: element 8j+i of the flattened input at bit i of byte j."""
    return ops.compress_spikes(s)


def bit_spike_decompress(compressed, shape, dtype=None):
    """The inverse of bit_spike_compress: a 0/1 tensor of `shape` and `dtype` (default uint8)."""
    return ops.decompress_spikes(compressed, shape, dtype)


def pack_spike_rows(s):
    """[T, *S] spikes -> uint8 [T, ceil(N / 8)]: neuron n of step t at bit n % 8 of byte n // 8 of
    row t (the layout of packed outputs; for N % 8 == 0, bit_spike_compress of the sequence)."""
    return ops.pack_spike_rows(ops.check_tensor("s", s))


def unpack_spike_rows(packed, shape, dtype=None):
    """The inverse of pack_spike_rows: 0/1 spikes of `shape` [T, *S] in `dtype` (default uint8)."""
    return ops.unpack_spike_rows(ops.check_tensor("packed", packed), ops.shape_argument("shape", shape), dtype)
