# Activation-aware IF, SpikingJelly's ActivationAwareIFNode (its defaults): IF with a threshold
# and an offset per neuron (the module broadcasts its scalar or per-channel values). It fires when
# h + offset reaches the threshold; a soft reset subtracts that neuron's threshold. Hard reset to
# v_reset when the builtins clear soft_reset.
neuron activation_aware_if
input x
state v = v_reset
param threshold[neuron] = 1.0, offset[neuron] = 0.0
const v_reset = 0.0, soft_reset = true, detach_reset = false
output s

h = v + x
s = spike(h + offset - threshold, sigmoid(alpha = 4))
s_reset = where(detach_reset, detach(s), s)
v = where(soft_reset, h - s_reset * threshold, (1 - s_reset) * h + s_reset * v_reset)
