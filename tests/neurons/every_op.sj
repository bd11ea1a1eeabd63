# Every op of the table, with per-neuron and scalar parameters, and random draws.
neuron every_op
input x
input y
state v = 0.25
param g[neuron] = 0.5
param h = 2.0
param k = -1.0
output s
output z
output q
ax = abs(x) + 1
e = exp(-ax) + log(ax) + log2(ax) + sqrt(ax) + rsqrt(ax) + sigmoid(x) + tanh(y) + sin(x) + cos(y)
r = erf(y) + relu(x) + sign(y) + round(x * 3) + floor(y) + ceil(x) + fmod(x, 0.75) + pow(ax, 0.5)
m = min(x, y) + max(x, h) + clamp(v, -1, 1) + reciprocal(ax) - (-y)
t = tanh(y) * 0.5
n = log1p(ax) + expm1(t) + exp2(t) + log10(ax) + tan(t) + atan(x) + asin(t) + acos(t) + sinh(t) + cosh(x)
n = n + asinh(x) + acosh(ax) + atanh(t) + erfc(x) + atan2(x, y) + hypot(x, t) + erfinv(t) + ndtri(0.5 + 0.8 * t)
c = (x < y and not (y >= 1)) or (x == y) or (x != h and x <= g) or x > k
b = bool(x) and c
u = uniform()
z = where(b, e, r) * g + float(c) * h + m * k + detach(v) / 3 + n * 0.01 + (u - 0.5) * x * float(uniform() < 0.5)
s = spike(z - v, super_spike(alpha = 2))
q = float(s > 0.5 or x > 0) - v
v = v + (z - v) * 0.5 - s
