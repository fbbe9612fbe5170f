#!/bin/bash
# The stretch phase with reduced solves that skip the window phase and, where a proven reduced
# optimum gives no stretch meeting the bound, solve it again with the next seed (twice at most):
# vhalf/p8-m32 three times at 60 s and three times at 120 s, vhalf/p8-m64 once at 120 s, one
# after the other. TREE: a checkout of the commit named in runs.txt; OUT: a scratch folder
# holding the bench cases' instances (case.inst.dump, named as below). Output (runs.txt):
# status, value, bound, command time, proof time; then per reduced solve: m', seed, value,
# status, stretches tried, valid, best, seconds.
cd "$TREE"
echo "# at $(git rev-parse --short HEAD)"
for run in "vhalf-p8-m32 60" "vhalf-p8-m32 60" "vhalf-p8-m32 60" "vhalf-p8-m32 120" \
           "vhalf-p8-m32 120" "vhalf-p8-m32 120" "vhalf-p8-m64 120"; do
  set -- $run
  echo "== $1 $2 s $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
  python -m zbsolve solve "$OUT/$1.yaml" --objective span --time-limit "$2" --workers 2 \
    --seed 0 -o "$OUT/rt-$1.json" --json > "$OUT/rt.answer.json"
  python -c "
import json; a=json.load(open('$OUT/rt.answer.json')); m=json.load(open('$OUT/rt-$1.json'))['meta']['solver']
print(a['status'], a['objective_value'], a['lower_bound'], round(a['command_time'],1), m.get('proof_time'))
for r in m.get('stretch', []): print('  ', r['microbatches'], r['seed'], r['reduced_value'], r['reduced_status'], r['tried'], r['valid'], r['best'], round(r['seconds'],1))
"
done
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
