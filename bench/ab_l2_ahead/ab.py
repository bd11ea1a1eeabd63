import json, os, subprocess, sys, statistics
variants = sys.argv[1:]
here = os.path.dirname(os.path.abspath(__file__))
res = {v: [] for v in variants}
for rnd in range(2):
    for v in (variants if rnd % 2 == 0 else variants[::-1]):
        env = dict(os.environ, PYTHONPATH=f"/tmp/pkg{v}", PKG=f"/tmp/pkg{v}", SPIKEJIT_CACHE_DIR=f"/tmp/cache{v}")
        r = subprocess.run([sys.executable, os.path.join(here, "measure.py")], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            print(v, r.stderr[-3000:]); sys.exit(1)
        res[v].append(json.loads(r.stdout.strip().splitlines()[-1]))
sums = [k for k in res[variants[0]][0] if k.startswith("sum")]
same = all(r[k] == res[variants[0]][0][k] for v in variants for r in res[v] for k in sums)
print(f"results of {len(sums)} calls equal in every variant and round: {same}")
if not same:
    for k in sums:
        print(k, [r[k] for v in variants for r in res[v]])
cases = [k for k in res[variants[0]][0] if not k.startswith("sum")]
print("| case | " + " | ".join(f"ahead {v} ms" for v in variants) + " | " + " | ".join(f"{v}/0" for v in variants[1:]) + " |")
for c in cases:
    med = {v: statistics.median(r[c] for r in res[v]) for v in variants}
    print(f"| {c} | " + " | ".join(f"{med[v]:.4f}" for v in variants) + " | " + " | ".join(f"{med[v]/med[variants[0]]:.3f}" for v in variants[1:]) + " |")
print(json.dumps(res))
