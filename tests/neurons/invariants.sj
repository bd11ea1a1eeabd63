# Values of parameters alone, which the executors compute once per block (CPU) or thread (CUDA)
# instead of at every step: a scalar's and a per-neuron one's, in a chain, a Bool, in the
# parameters' gradients, and as an output (a result). 0.1 * (1 - g) is cheap arithmetic, which
# the CUDA kernels recompute at every step rather than hold in registers.
neuron invariants
input x
state v = 0
param w = 0.3
param g[neuron] = 0.8
output s
output gain
r = sigmoid(w)
q = r * g + exp(-w)
h = v * r + x * q + 0.1 * (1 - g)
s = spike(h - 1, sigmoid(alpha = 4))
gain = q * 2
v = where(exp(g) > 1.5, h - s, h - 0.5 * s)
