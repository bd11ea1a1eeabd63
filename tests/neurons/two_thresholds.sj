# Two detached thresholds: the backward needs only how many of them fired (lo + hi), which the
# default save policy stores as one value per step; with pack_spikes it stores the two spikes as
# bits instead (1/16 the cost of that value each).
neuron two_thresholds
input x
state v = 0
const tau = 2.0
output y
h = v + (x - v) / tau
lo = detach(spike(h - 0.5, sigmoid(alpha = 4)))
hi = detach(spike(h - 1.0, sigmoid(alpha = 4)))
y = x * (lo + hi)
v = h - 0.5 * (lo + hi)
