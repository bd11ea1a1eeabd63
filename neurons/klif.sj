# K-based LIF (KLIF), SpikingJelly's KLIFNode (its defaults): LIF's charge scaled by a learnable k
# and rectified before it fires. With scale_reset the reset acts on f / k (the unscaled potential)
# and a soft reset subtracts v_threshold / k. Soft reset when the builtins set soft_reset (then
# v_reset = 0).
neuron klif
input x
state v = v_reset
param k = 1.0
const tau = 2.0, v_threshold = 1.0, v_reset = 0.0
const decay_input = true, soft_reset = false, detach_reset = false, scale_reset = false
output s

h = where(decay_input, v + (x - (v - v_reset)) / tau, v - (v - v_reset) / tau + x)
f = relu(k * h)
s = spike(f - v_threshold, sigmoid(alpha = 4))
s_reset = where(detach_reset, detach(s), s)
g = where(scale_reset, f / k, f)
threshold = where(scale_reset, v_threshold / k, v_threshold)
v = where(soft_reset, g - s_reset * threshold, (1 - s_reset) * g + s_reset * v_reset)
