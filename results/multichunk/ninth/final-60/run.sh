cd $REPO
while pgrep -f final.sh > /dev/null; do sleep 5; done
for c in vmin-p8-m32 vmin-p8-m64 vmin-p4-m16; do
  src=$SCRATCH/ab120/$c.yaml; [ -f $src ] || src=$SCRATCH/ab60v/$c.yaml
  .venv/bin/zbsolve solve $src --objective span --time-limit 60 --workers 2 --seed 0 -o $SCRATCH/final/$c-60.json --json > $SCRATCH/final/$c-60.answer.json 2>$SCRATCH/final/$c-60.err
  python3 -c "
import json; a=json.load(open('$SCRATCH/final/$c-60.answer.json')); m=json.load(open('$SCRATCH/final/$c-60.json'))['meta']['solver']
print('$c 60s', a['objective_value'], a['lower_bound'], a['status'], round(a['command_time'],1), [(r['microbatches'], r['reduced_value'], r['reduced_status'], r['best'], round(r['seconds'],1)) for r in m.get('stretch', [])])"
done
