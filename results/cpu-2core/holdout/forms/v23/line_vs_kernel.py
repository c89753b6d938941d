"""The step predicted for configurations a line could reach (a shape the probe did not measure, between
two probed shapes of its cell and image size) against their runs' own device-resident step: ``pred``
the committed model's (version 23 now; version 22 read 1.11x for the bf16 MLP 64/48 x2), ``lin`` the line
of the two probed steps less their faults plus the configuration's faults, ``log`` the same in log
step. The pairs whose exact model meets both checks in 90% of draws; ``all`` for every pair. From the
repository root:

    .venv/bin/python results/cpu-2core/holdout/forms/v23/line_vs_kernel.py
"""
import pandas as pd, numpy as np, sys
sys.path.insert(0,'.')
from analysis.costmodel import model as M
from analysis.costmodel.features import knob_frame
H='results/cpu-2core/holdout'
s=pd.read_csv(f'{H}/summary.csv'); s=s[s.pair.str.startswith('pair')]
pairs=s.pair.tolist() if 'all' in sys.argv else s[s.floor_p_both>=0.9].pair.tolist()
cell=list(M.ANCHOR_CELL)
out=[]
for p in pairs:
    try: mdl=M.load(f'{H}/{p}/model.json')
    except Exception as e: continue
    a=pd.DataFrame(mdl.step_anchors)
    if not len(a) or 'fitted_s' not in a: continue
    a['less']=a.fitted_s*np.exp(a.log_residual)
    for part in ['study','second']:
        rows=pd.read_csv(f'{H}/{p}/{part}/rows.csv')
        rows=rows[rows.status=='ok'] if 'status' in rows else rows
        cfg=rows.drop_duplicates('config_id')
        kf=knob_frame(cfg)
        c=M.components(mdl,cfg)
        meas=rows.groupby('config_id').device_resident_step_median_s.median()
        for i,r in enumerate(kf.itertuples(index=False)):
            same=a
            for k in cell: same=same[same[k].astype(str)==str(getattr(r,k))]
            same=same[same.image_size==r.image_size]
            if (same.batch_size==r.batch_size).any(): continue
            lo=same[same.batch_size<r.batch_size]; hi=same[same.batch_size>r.batch_size]
            if not len(lo) or not len(hi): continue
            l=lo.loc[lo.batch_size.idxmax()]; h=hi.loc[hi.batch_size.idxmin()]
            t=(r.batch_size-l.batch_size)/(h.batch_size-l.batch_size)
            interp=l.less+(h.less-l.less)*t + c.fault_s[i]
            tl=np.log(r.batch_size/l.batch_size)/np.log(h.batch_size/l.batch_size)
            logi=np.exp(np.log(l.less)+(np.log(h.less)-np.log(l.less))*tl)+c.fault_s[i]
            m=meas[cfg.config_id.iloc[i]]
            out.append(dict(pair=p,part=part,cfg=f"{r.model} {r.precision} {r.batch_size}/{r.image_size} x{r.grad_accum_steps} w{r.num_workers}",pred=c.step_s[i]/m,lin=interp/m,log=logi/m,fault=c.fault_s[i]*1e3, fl=bool(l.get('faulting',False)),fh=bool(h.get('faulting',False))))
d=pd.DataFrame(out)
print(len(pairs))
g=d.groupby(['part','cfg']).agg(n=('pred','size'),pred=('pred','median'),lin=('lin','median'),log=('log','median'),fault=('fault','median'),fl=('fl','mean'),fh=('fh','mean'),
  pred_mad=('pred',lambda v:np.median(np.abs(np.log(v)))),lin_mad=('lin',lambda v:np.median(np.abs(np.log(v)))))
print(g.round(3).to_string())
