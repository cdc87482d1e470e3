# bench/apps: dicts, lists, strings, json.dumps/loads of 300k entries, a sort
import json, random
r = random.Random(1)
d = {}
for i in range(300000):
    d["k%d" % i] = [r.random(), "s" * (i % 40), {"x": i}]
s = json.dumps(d)
e = json.loads(s)
l = sorted(e.items(), key=lambda kv: kv[1][0])
for i in range(0, 300000, 2): del e["k%d" % i]
print(len(s), len(e), len(l))
