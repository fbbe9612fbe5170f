#!/bin/sh
# Device 0's relaxation of the loop-c2 instances at 0.38 of the 1F1B memory (fourteenth pass),
# by default and with CP-SAT's bound search; run from the repository root. Output:
# relaxations.txt.
set -e
P=results/multichunk/relax_probe.py
D=results/multichunk/fourteenth/loop-038
BS='{"subsolvers": ["lb_tree_search"]}'
python $P $D/m8.yaml 40 0
python $P $D/m8.yaml 40 0 "$BS"
python $P $D/m12.yaml 60 0 "$BS"
python $P $D/m16.yaml 60 0 "$BS"
python $P $D/m24.yaml 60 0
python $P $D/m24.yaml 90 0 "$BS"
