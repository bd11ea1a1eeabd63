# Parametric LIF, SpikingJelly's ParametricLIFNode: a learnable scalar w with 1/tau = sigmoid(w)
# (w = -log(init_tau - 1) gives tau = init_tau; the default below is init_tau = 2).
neuron plif
input x
state v = v_reset
param w = 0.0
const v_threshold = 1.0, v_reset = 0.0
const decay_input = true, soft_reset = false, detach_reset = false
output s

r = sigmoid(w)
h = where(decay_input, v + (x - (v - v_reset)) * r, v - (v - v_reset) * r + x)
s = spike(h - v_threshold, sigmoid(alpha = 4))
s_reset = where(detach_reset, detach(s), s)
v = where(soft_reset, h - s_reset * v_threshold, (1 - s_reset) * h + s_reset * v_reset)
