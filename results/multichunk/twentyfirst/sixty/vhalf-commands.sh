for f in vhalf-p16-m32 vhalf-p16-m64; do
  cd BEFORE; uptime
  PYTHONPATH=BEFORE REPO/.venv/bin/python -m zbsolve solve REPO/results/multichunk/twentyfirst/$f.json -o OUT/$f-60-before.json --objective span --time-limit 60 --progress --json > OUT/$f-60-before.log 2>&1
  cd REPO; uptime
  .venv/bin/python -m zbsolve solve results/multichunk/twentyfirst/$f.json -o OUT/$f-60-after.json --objective span --time-limit 60 --progress --json > OUT/$f-60-after.log 2>&1
done
uptime; echo done
