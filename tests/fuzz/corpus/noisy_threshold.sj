# A LIF neuron with a noisy, learnable threshold and Bernoulli escape spikes: two streams of
# random draws, one read by the gradient (the noise moves the surrogate's argument) and one
# not (a comparison). Also an output of the first draw itself, so that tests see the draws.
neuron noisy_threshold
input x
state v = 0
param theta = 1.0
output s
output noise
noise = uniform()
escape = float(uniform() < 0.05 * sigmoid(v))
h = 0.5 * v + x
s = max(spike(h - theta + 0.4 * (noise - 0.5), atan(alpha = 2)), escape)
v = h * (1 - s)
