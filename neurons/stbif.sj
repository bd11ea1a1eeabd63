# SpikeZIP's signed, bounded IF (STBIF), SpikingJelly's STBIFNode, for ANN-to-SNN conversion: q
# integrates x / q_threshold and emits +1 when q >= 1 while the count acc_q is below pos_max, -1
# when q < 0 while acc_q is above neg_min; the output is that times q_threshold. Inference only:
# its steps are comparisons, without a gradient.
neuron stbif
input x
state q = 0.5, acc_q = 0.0, current = 0.0
param q_threshold = 1.0, pos_max = 1.0, neg_min = 0.0
output y

q = q + x / q_threshold
acc_q = round(acc_q)
positive = q >= 1 and acc_q < pos_max
negative = q < 0 and acc_q > neg_min
current = float(positive) - float(negative)
acc_q = acc_q + current
q = q - float(positive) + float(negative)
y = current * q_threshold
