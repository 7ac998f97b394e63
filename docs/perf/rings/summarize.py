import re,statistics as st,collections
rows=collections.defaultdict(lambda: collections.defaultdict(list))  # (nr,mode,size) -> cfg -> [times]
rounds=collections.defaultdict(dict)  # (nr, round) -> cfg -> {size:time}
import sys
for line in open(sys.argv[1] if len(sys.argv) > 1 else "docs/perf/rings/ab-2026-11-27.txt"):
    m=re.match(r'round (\d+) floor ([\d.]+) nr (\d+) cfg (\S+) (.*)',line.strip())
    if not m: continue
    rnd,floor,nr,cfg,rest=m.groups()
    cfg={'LD_LIBRARY_PATH=/tmp/base/build/src':'base','BATON_SHM_STREAM=1':'stream'}.get(cfg,cfg)
    for kv in rest.split():
        s,t=kv.split(':'); rounds[(nr,rnd,float(floor)<0.1, s)][cfg]=float(t)
agg=collections.defaultdict(lambda: collections.defaultdict(list))
for (nr,rnd,fast,s),d in rounds.items():
    if len(d)<3: continue
    for c in ('default','stream'):
        agg[(nr,fast,int(s))][c+'/base'].append(d[c]/d['base'])
    agg[(nr,fast,int(s))]['base'].append(d['base'])
for k in sorted(agg):
    nr,fast,s=k; a=agg[k]
    print(f"ranks {nr} {'fast' if fast else 'slow'} {s:>9}: rounds {len(a['base'])} base {st.median(a['base']):8.1f} us  default/base {st.median(a['default/base']):.2f}  stream/base {st.median(a['stream/base']):.2f}")
