# Complementary LIF (CLIF), SpikingJelly's ComplementaryLIFNode (its defaults): a complementary
# potential m beside v raises the reset after recent spikes.
neuron clif
input x
state v = 0.0
state m = 0.0
const tau = 2.0, v_threshold = 1.0
output s

h = v - v / tau + x
s = spike(h - v_threshold, rect(alpha = 1))
m = m * sigmoid(h / tau) + s
v = h - s * (v_threshold + sigmoid(m))
