# Few-spikes neuron (FS-neuron, Stöckl and Maass 2021), SpikingJelly's FewSpikeNode and its
# variants: K steps of a table (theta, h, d), given as inputs, one row per step. The potential
# starts at the gate (the initial state); at step k it fires when it reaches theta[k], emits d[k]
# per spike and loses h[k].
neuron few_spike
input theta
input h
input d
state v = 0.0
output y

z = spike(v - theta, sigmoid(alpha = 4))
y = d * z
v = v - h * z
