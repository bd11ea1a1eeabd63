"""The demo's figure: spike rasters of both hidden layers and membrane traces, for one test image
of each digit shown one after another (each image for T steps; the network starts from rest for
each image)."""
import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from digits_net import V_THRESHOLD  # noqa: E402


def _by_time(seq):
    """[T, B, N] -> [N, B*T]: the B samples one after another along the time axis."""
    steps, batch, n = seq.shape
    return seq.permute(2, 1, 0).reshape(n, batch * steps).detach().cpu()


def _raster(ax, spikes, title, boundaries):
    neurons, times = torch.nonzero(spikes, as_tuple=True)
    ax.scatter(times.numpy(), neurons.numpy(), s=2, marker="|", color="black")
    ax.set_ylabel("neuron")
    ax.set_title(title, fontsize=9, loc="left")
    for b in boundaries:
        ax.axvline(b - 0.5, color="tab:gray", linewidth=0.5)


def _active(spikes, count):
    """`count` neurons that fire, but not at every step, preferring rates near 0.3."""
    rate = spikes.mean(dim=1)
    order = torch.argsort((rate - 0.3).abs())
    return [int(i) for i in order[:count]]


def save_figure(model, images, labels, steps, encode, path, neurons_shown=64):
    """Runs `model` (a DigitsSNN built with record=True) on `images` [B, 64] and writes the PNG."""
    with torch.no_grad():
        model(encode(images, steps))
    spikes1, spikes2 = _by_time(model.spikes1), _by_time(model.spikes2)
    v1 = _by_time(model.membrane())
    v_seq, a_seq = model.alif.state_seqs
    # The threshold used at step t is 1 + a from the step before (a starts at 0).
    threshold2 = _by_time(V_THRESHOLD + torch.cat([torch.zeros_like(a_seq[:1]), a_seq[:-1]]))
    v2 = _by_time(v_seq)
    boundaries = [i * steps for i in range(len(labels))]

    fig, axes = plt.subplots(4, 1, figsize=(10, 9), sharex=True,
                             gridspec_kw={"height_ratios": [2, 2, 1.5, 1.5]})
    _raster(axes[0], spikes1[:neurons_shown], f"layer 1: spikejit.LIFNode, first {neurons_shown} neurons",
            boundaries)
    _raster(axes[1], spikes2[:neurons_shown], f"layer 2: adaptive LIF (FlexSN), first {neurons_shown} neurons",
            boundaries)
    axes[0].set_ylim(-1, neurons_shown + 8)
    for b, label in zip(boundaries, labels):
        axes[0].text(b + (steps - 1) / 2, neurons_shown + 1, f"digit {label}", ha="center", va="bottom",
                     fontsize=8, color="tab:blue")

    for k, i in enumerate(_active(spikes1, 2)):
        line, = axes[2].plot(v1[i].numpy(), linewidth=1, label=f"neuron {i}")
        fired = torch.nonzero(spikes1[i]).flatten().numpy()
        axes[2].plot(fired, [V_THRESHOLD + 0.1 * (k + 1)] * len(fired), "|", color=line.get_color())
    axes[2].axhline(V_THRESHOLD, color="tab:red", linestyle="--", linewidth=0.8, label="threshold")
    axes[2].set_ylabel("v (after reset)")
    axes[2].set_title("layer 1: membrane potentials (ticks above the threshold: spikes)", fontsize=9, loc="left")
    axes[2].legend(fontsize=7, loc="lower left", ncol=3, framealpha=0.9)

    i = _active(spikes2, 1)[0]
    axes[3].plot(v2[i].numpy(), linewidth=1, label=f"v, neuron {i}")
    axes[3].plot(threshold2[i].numpy(), color="tab:red", linewidth=1, label="adaptive threshold 1 + a")
    axes[3].set_ylabel("v, threshold")
    axes[3].set_xlabel("time step (one test image per segment, T steps each, starting from rest)")
    axes[3].set_title("layer 2: membrane potential and adaptive threshold", fontsize=9, loc="left")
    axes[3].legend(fontsize=7, loc="lower left", ncol=2, framealpha=0.9)
    for ax in axes[2:]:
        for b in boundaries:
            ax.axvline(b - 0.5, color="tab:gray", linewidth=0.5)

    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
