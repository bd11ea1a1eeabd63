# LIF with a straight-through surrogate (derivative 1) and a detached hard reset: the backward
# needs the spike (the reset gate 1 - s) but not the membrane potential, so with pack_spikes
# the training forward saves only the spike, as bits.
neuron ste_lif
input x
state v = 0
const tau = 2.0, v_th = 1.0
output s
h = v + (x - v) / tau
s = spike(h - v_th, deterministic_pass())
v = h * (1 - detach(s))
