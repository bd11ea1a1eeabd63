# Resonate-and-fire (RAF), SpikingJelly's RAFNode (its defaults): a damped oscillator (u, v),
# rotated by omega dt and damped by exp(b dt) each step, with x driving u; v fires and resets.
# Soft reset when the builtins set soft_reset (then v_reset = 0).
neuron raf
input x
state v = v_reset
state u = 0.0
const b = -0.2, omega = 1.0, dt = 1.0, v_threshold = 1.0, v_reset = 0.0
const soft_reset = false, detach_reset = false
output s

damping = exp(b * dt)
cos_theta = cos(omega * dt)
sin_theta = sin(omega * dt)
u_next = damping * (u * cos_theta - v * sin_theta) + x
h = damping * (u * sin_theta + v * cos_theta)
u = u_next
s = spike(h - v_threshold, sigmoid(alpha = 4))
s_reset = where(detach_reset, detach(s), s)
v = where(soft_reset, h - s_reset * v_threshold, (1 - s_reset) * h + s_reset * v_reset)
