"""Each quiet pair's model fitted on its whole study, predicting the study's own configurations (step
predicted, then measured), beside the same configurations' held-out errors in ``errors.csv`` (cv, medians
over the pairs). The pairs are those of ``pair174``–``pair222`` whose exact model would meet
cross-validation's goal in more than half the draws. Run it on version 21's models and errors (89c57d78):

    git worktree add /tmp/v21 89c57d78
    cd /tmp/v21 && /path/to/memsim/.venv/bin/python /path/to/memsim/results/cpu-2core/holdout/forms/v22/insample.py
"""
import sys; sys.path.insert(0, ".")
import numpy as np, pandas as pd
from analysis.costmodel import model as M
from analysis.costmodel import evaluate as E
e=pd.read_csv('results/cpu-2core/holdout/errors.csv')
quiet=['pair174','pair176','pair177','pair178','pair179','pair180','pair181','pair182','pair183','pair184','pair185','pair186','pair187','pair190','pair193','pair202','pair207','pair211','pair212','pair216','pair221']
knobs=['model','precision','grad_accum_steps','batch_size','image_size','source','augment_cost','num_workers','prefetch_buffer_size','feed']
out=[]
for p in quiet:
    m=M.load(f'results/cpu-2core/holdout/{p}/model.json')
    rows=pd.read_csv(f'results/cpu-2core/holdout/{p}/study/rows.csv')
    meas=M.measured_configs(rows)
    for step in ('predicted','measured'):
        c=E.predicted_vs_measured(m, rows, meas, step=step)
        c=c[["config_id","rel_error"]].merge(meas[["config_id"]+knobs],on="config_id")
        c['pair']=p; c['step']=step
        out.append(c[['pair','step','rel_error']+knobs])
d=pd.concat(out)
t=d.pivot_table(index=knobs,columns='step',values='rel_error',aggfunc='median')
cv=e[e.pair.isin(quiet)&(e.check=='cv')].groupby(knobs).rel_error.median().rename('cv')
cvk=e[e.pair.isin(quiet)&(e.check=='cv_kept')].groupby(knobs).rel_error.median().rename('cv_kept')
pd.set_option('display.width',250)
print(t.join(cv).join(cvk).sort_values('cv').round(3).to_string())
