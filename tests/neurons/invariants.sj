# Values of parameters alone, which the CPU executor computes once per block: a scalar's and a
# per-neuron one's, in a chain, in the parameters' gradients, and as an output (a result, which
# is computed each step).
neuron invariants
input x
state v = 0
param w = 0.3
param g[neuron] = 0.8
output s
output gain
r = sigmoid(w)
q = r * g + exp(-w)
h = v * r + x * q
s = spike(h - 1, sigmoid(alpha = 4))
gain = q * 2
v = h - s
