# Leaky integrate-and-fire, SpikingJelly's LIFNode. Soft reset leaks towards 0, hard reset
# towards v_reset (the builtins set v_reset = 0 under soft reset).
neuron lif
input x
state v = v_reset
const tau = 2.0, v_threshold = 1.0, v_reset = 0.0
const decay_input = true, soft_reset = false, detach_reset = false
output s

h = where(decay_input, v + (x - (v - v_reset)) / tau, v - (v - v_reset) / tau + x)
s = spike(h - v_threshold, sigmoid(alpha = 4))
s_reset = where(detach_reset, detach(s), s)
v = where(soft_reset, h - s_reset * v_threshold, (1 - s_reset) * h + s_reset * v_reset)
