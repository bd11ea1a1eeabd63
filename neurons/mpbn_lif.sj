# LIF with membrane-potential batch normalization, SpikingJelly's MPBNLIFNode, where its step is
# one neuron's (no statistics over the batch): the charged potential h goes through the batch
# norm's affine map of evaluation (scale, shift per channel, when batch_norm) and fires at a
# threshold per channel (the folded one after re_parameterize_v_threshold, or exp(a)); with
# normalize_residual a neuron that did not fire keeps h normalised by the folded statistics
# ((h - mu) / sigma * gamma + beta); a soft reset subtracts reset_threshold (the module's
# v_threshold). The module runs its training steps with batch statistics as a PyTorch loop.
neuron mpbn_lif
input x
state v = v_reset
param scale[neuron] = 1.0, shift[neuron] = 0.0, threshold[neuron] = 1.0, reset_threshold[neuron] = 1.0
param res_mu[neuron] = 0.0, res_sigma[neuron] = 1.0, res_gamma[neuron] = 1.0, res_beta[neuron] = 0.0
const tau = 2.0, v_reset = 0.0, decay_input = false, soft_reset = false, detach_reset = false
const batch_norm = true, normalize_residual = false
output s

charged = where(decay_input, v + (x - (v - v_reset)) / tau, v - (v - v_reset) / tau + x)
h = where(batch_norm, charged * scale + shift, charged)
diff = h - threshold
s = spike(diff, sigmoid(alpha = 4))
kept = where(normalize_residual and diff <= 0, (h - res_mu) / res_sigma * res_gamma + res_beta, h)
s_reset = where(detach_reset, detach(s), s)
v = where(soft_reset, kept - s_reset * reset_threshold, (1 - s_reset) * kept + s_reset * v_reset)
