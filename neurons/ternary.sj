# Ternary IF and LIF, SpikingJelly's TernaryIFNode and TernaryLIFNode (its defaults): spikes -1, 0
# or +1, fired at +v_threshold and at -v_threshold. A soft reset subtracts s v_threshold; a hard
# reset follows either threshold's event, so that both branches keep their gradients when the
# signed spike is 0. IF without leaky; soft reset when the builtins set soft_reset (then
# v_reset = 0).
neuron ternary
input x
state v = v_reset
const tau = 2.0, v_threshold = 1.0, v_reset = 0.0
const leaky = true, decay_input = true, soft_reset = false, detach_reset = false
output s

h_lif = where(decay_input, v + (x - (v - v_reset)) / tau, v - (v - v_reset) / tau + x)
h = where(leaky, h_lif, v + x)
positive = spike(h - v_threshold, sigmoid(alpha = 4))
negative = spike(-h - v_threshold, sigmoid(alpha = 4))
s = positive - negative
event = where(soft_reset, s, positive + negative)
event_reset = where(detach_reset, detach(event), event)
v = where(soft_reset, h - event_reset * v_threshold, (1 - event_reset) * h + event_reset * v_reset)
