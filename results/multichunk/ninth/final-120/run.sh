cd $REPO
for c in vmin-p4-m32 vhalf-p4-m32 vmin-p8-m32 vhalf-p8-m32 vmin-p8-m64 vhalf-p8-m64; do
  .venv/bin/zbsolve solve $SCRATCH/ab120/$c.yaml --objective span --time-limit 120 --workers 2 --seed 0 -o $SCRATCH/final/$c.json --json > $SCRATCH/final/$c.answer.json 2>$SCRATCH/final/$c.err
  python3 -c "
import json; a=json.load(open('$SCRATCH/final/$c.answer.json')); m=json.load(open('$SCRATCH/final/$c.json'))['meta']['solver']
print('$c', a['objective_value'], a['lower_bound'], a['status'], round(a['command_time'],1), [(r['microbatches'], r['reduced_value'], r['reduced_status'], r['best'], round(r['seconds'],1)) for r in m.get('stretch', [])])"
done
