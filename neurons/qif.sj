# Quadratic integrate-and-fire, SpikingJelly's QIFNode (its defaults). Soft reset when the
# builtins set soft_reset (then v_reset = 0).
neuron qif
input x
state v = v_reset
const tau = 2.0, v_c = 0.8, a0 = 1.0, v_rest = 0.0, v_threshold = 1.0, v_reset = -0.1
const soft_reset = false, detach_reset = false
output s

h = v + (x + a0 * (v - v_rest) * (v - v_c)) / tau
s = spike(h - v_threshold, sigmoid(alpha = 4))
s_reset = where(detach_reset, detach(s), s)
v = where(soft_reset, h - s_reset * v_threshold, (1 - s_reset) * h + s_reset * v_reset)
