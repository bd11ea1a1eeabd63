# Gated LIF (GLIF), SpikingJelly's GatedLIFNode: gates alpha, beta and gamma (in (0, 1)) mix the
# leak of tau with a linear decay, the input's conductance (conduct, one value per step) and a
# reset that subtracts part of v or a sub-reset value. The module passes its parameters through
# their sigmoids, per neuron; `fired` is the last step's spike.
neuron gated_lif
input x
input conduct
state v = 0.0
state fired = 0.0
param alpha[neuron] = 0.5, beta[neuron] = 0.5, gamma[neuron] = 0.5, tau[neuron] = 0.25
param v_threshold[neuron] = 0.5, linear_decay[neuron] = 0.1, v_subreset[neuron] = 0.5
output s

leak = 1 - alpha * (1 - tau)
h = (leak * v - (1 - alpha) * linear_decay) + x * (1 - beta * (1 - conduct))
v = h - leak * v * gamma * fired - (1 - gamma) * v_subreset * fired
s = spike(v - v_threshold, sigmoid(alpha = 4))
fired = s
