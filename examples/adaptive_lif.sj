# Adaptive LIF: each spike raises the threshold by beta; the raise decays with time constant
# tau_a. Under constant drive the firing rate falls as the threshold adapts.
neuron adaptive_lif
input x
state v = 0
state a = 0                       # threshold raise
const tau = 2.0, tau_a = 20.0, v_th = 1.0, beta = 0.2
output s

h = v + (x - v) / tau
s = spike(h - (v_th + a), atan(alpha = 2))
v = h * (1 - s)                   # hard reset to 0
a = a - a / tau_a + beta * s
