#!/bin/bash
# The stretch phase with reduced solves that skip the window phase (c81fcd3): the four rows it
# applies to at 60 s, then vhalf/p8-m32 twice and vhalf/p8-m64 once at 120 s, one after the
# other. TREE: a checkout of c81fcd3; OUT: a scratch folder holding the bench cases' instances
# (case.inst.dump, named as below). Output (runs.txt): status, value, bound, command time, proof
# time; then per reduced solve: m', value, status, stretches tried, valid, best, seconds.
cd "$TREE"
for run in "vmin-p4-m32 60" "vmin-p8-m32 60" "vhalf-p8-m32 60" "vmin-p8-m64 60" \
           "vhalf-p8-m32 120" "vhalf-p8-m32 120" "vhalf-p8-m64 120"; do
  set -- $run
  echo "== $1 $2 s $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
  python -m zbsolve solve "$OUT/$1.yaml" --objective span --time-limit "$2" --workers 2 \
    --seed 0 -o "$OUT/nw-$1.json" --json > "$OUT/nw.answer.json"
  python -c "
import json; a=json.load(open('$OUT/nw.answer.json')); m=json.load(open('$OUT/nw-$1.json'))['meta']['solver']
print(a['status'], a['objective_value'], a['lower_bound'], round(a['command_time'],1), m.get('proof_time'))
for r in m.get('stretch', []): print('  ', r['microbatches'], r['reduced_value'], r['reduced_status'], r['tried'], r['valid'], r['best'], round(r['seconds'],1))
"
done
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
