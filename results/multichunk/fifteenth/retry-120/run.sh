#!/bin/bash
# The stretch phase with retries (commit 6894a12, reverted after this run): vhalf/p8-m32 three
# times and vhalf/p8-m64 once at 120 s, one after the other. TREE: a checkout of 6894a12;
# OUT: a scratch folder holding the two bench cases' instances (case.inst.dump). Output:
# retry.txt (status, value, bound, command time, proof time; then per reduced solve: m', seed,
# value, status, stretches tried, valid, best, seconds).
cd "$TREE"
for case in vhalf-p8-m32 vhalf-p8-m32 vhalf-p8-m32 vhalf-p8-m64; do
  echo "== $case $(date -u +%H:%M:%S) $(cut -d' ' -f1 /proc/loadavg)"
  python -m zbsolve solve "$OUT/$case.yaml" --objective span --time-limit 120 --workers 2 \
    --seed 0 -o "$OUT/retry-$case.json" --json > "$OUT/retry.answer.json"
  python -c "
import json; a=json.load(open('$OUT/retry.answer.json')); m=json.load(open('$OUT/retry-$case.json'))['meta']['solver']
print(a['status'], a['objective_value'], a['lower_bound'], round(a['command_time'],1), m.get('proof_time'))
for r in m.get('stretch', []): print('  ', r['microbatches'], r['seed'], r['reduced_value'], r['reduced_status'], r['tried'], r['valid'], r['best'], round(r['seconds'],1))
"
done
echo "== end $(date -u +%H:%M:%S) $(cut -d' ' -f1 /proc/loadavg)"
