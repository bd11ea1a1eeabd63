# Integrate-and-fire, SpikingJelly's IFNode. The boolean constants select SpikingJelly's options;
# constant folding removes the branches not taken.
neuron if
input x
state v = v_reset
const v_threshold = 1.0, v_reset = 0.0
const soft_reset = false, detach_reset = false
output s

h = v + x
s = spike(h - v_threshold, sigmoid(alpha = 4))
s_reset = where(detach_reset, detach(s), s)
v = where(soft_reset, h - s_reset * v_threshold, (1 - s_reset) * h + s_reset * v_reset)
