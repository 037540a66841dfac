"""Summarise an ncu source page (``ncu -i REP --page source --csv --print-source sass > F.csv``):
the warp-stall samples by reason and the instructions with the most samples.
Usage: python3 benchmarks/ncu_stalls.py F.csv [top N, default 30]"""
import csv,sys,collections
rows=list(csv.reader(open(sys.argv[1])))
hdr=rows[1]; data=rows[2:]
i_src=hdr.index("Source"); i_s=hdr.index("Warp Stall Sampling (All Samples)")
stall_cols=[(i,h) for i,h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
tot=collections.Counter(); total=0
for r in data:
    if len(r)<len(hdr): continue
    for i,h in stall_cols:
        try: tot[h]+=int(r[i])
        except: pass
    total+=int(r[i_s] or 0)
print("total samples",total)
for h,v in tot.most_common(12): print(f"  {h:<24}{v:8d} {100*v/total:5.1f}%")
# top instructions
top=sorted(data,key=lambda r:-int(r[i_s] or 0) if len(r)>i_s else 0)[:int(sys.argv[2]) if len(sys.argv)>2 else 30]
for r in top:
    det=",".join(f"{h[6:]}={r[i]}" for i,h in stall_cols if r[i] not in ("0",""))
    print(f"{r[i_s]:>6} {r[0][-5:]} {r[i_src].strip()[:60]:<60} {det}")
