# Izhikevich, SpikingJelly's IzhikevichNode (its defaults): QIF's charge minus an adaptation
# current w, which decays towards a (h - v_rest) with time constant tau_w and jumps by b at each
# spike. Soft reset when the builtins set soft_reset (then v_reset = 0).
neuron izhikevich
input x
state v = v_reset
state w = w_rest
const tau = 2.0, v_c = 0.8, a0 = 1.0, v_rest = -0.1, w_rest = 0.0, tau_w = 2.0, a = 0.0, b = 0.0
const v_threshold = 1.0, v_reset = 0.0
const soft_reset = false, detach_reset = false
output s

h = v + (x + a0 * (v - v_rest) * (v - v_c) - w) / tau
s = spike(h - v_threshold, sigmoid(alpha = 4))
w = w + (a * (h - v_rest) - w) / tau_w + b * s
s_reset = where(detach_reset, detach(s), s)
v = where(soft_reset, h - s_reset * v_threshold, (1 - s_reset) * h + s_reset * v_reset)
