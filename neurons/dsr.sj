# The forward of SpikingJelly's DSRIFNode and DSRLIFNode (differentiation on spike representation,
# Meng et al. 2022): v integrates x (IF) or decays by beta and takes (1 - beta) x (LIF, beta =
# exp(-delta_t / tau)); it fires v_threshold when it reaches alpha v_threshold and loses what it
# fired. The LIF's output is the spike divided by delta_t. Their backward is not this step's: the
# modules compute it from spike rates (python/spikejit/dsr_neuron.py), so the kernels they run
# are the inference ones.
neuron dsr
input x
state v = 0.0
param v_threshold = 6.0
const alpha = 0.5, leaky = false, beta = 0.0, one_minus_beta = 1.0, delta_t = 1.0
output y

v = where(leaky, beta * v + one_minus_beta * x, v + x)
s = float(v >= alpha * v_threshold) * v_threshold
v = v - s
y = where(leaky, s / delta_t, s)
