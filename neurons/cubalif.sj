# Current-based LIF (CUBA LIF), SpikingJelly's CUBALIFNode (its defaults): a synaptic current c
# decays by c_decay and integrates the input; v decays by v_decay and integrates c. Soft reset
# when the builtins set soft_reset (then v_reset = 0).
neuron cubalif
input x
state v = v_reset
state c = 0.0
const c_decay = 0.5, v_decay = 0.75, v_threshold = 0.5, v_reset = 0.0
const soft_reset = false, detach_reset = false
output s

c = c * c_decay + x
h = v * v_decay + c
s = spike(h - v_threshold, rect(alpha = 1))
s_reset = where(detach_reset, detach(s), s)
v = where(soft_reset, h - s_reset * v_threshold, (1 - s_reset) * h + s_reset * v_reset)
