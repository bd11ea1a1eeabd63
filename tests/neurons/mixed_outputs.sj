# Three outputs: a spike, a 0/1 comparison and a non-binary value (which cannot be packed); a
# per-neuron threshold and a state with a nonzero default.
neuron mixed_outputs
input x
state v = 0.25
const tau = 2.0
param theta[neuron] = 1.0
output s, c, m
h = v + (x - v) / tau
s = spike(h - theta, atan(alpha = 2))
c = float(h > 0.5 and x < 2)
m = h * c
v = h * (1 - s)
