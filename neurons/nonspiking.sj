# Non-spiking IF and LIF, SpikingJelly's NonSpikingIFNode and NonSpikingLIFNode: readouts whose
# output is the membrane potential, charged without firing: v = v + x, or with leaky
# v = v + (x - v) / tau.
neuron nonspiking
input x
state v = 0.0
const tau = 2.0, leaky = true
output y

v = where(leaky, v + (x - v) / tau, v + x)
y = v
