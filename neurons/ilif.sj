# Integer LIF (I-LIF), SpikingJelly's ILIFNode (its defaults): spike counts 0..count, always a
# soft reset. The count's gradient is 1 where grad_min <= u <= grad_max (straight through, on
# u - detach(u), which is exactly 0), else 0.
neuron ilif
input x
state v = 0.0
const tau = 1.3333333333333333, v_threshold = 1.0, count = 4.0, grad_min = 0.0, grad_max = 4.0
const detach_reset = false
output c

h = (1 - 1 / tau) * v + x
u = h / v_threshold
c = round(clamp(u, 0.0, count)) + float(u >= grad_min and u <= grad_max) * (u - detach(u))
c_reset = where(detach_reset, detach(c), c)
v = h - c_reset * v_threshold
