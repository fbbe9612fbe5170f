"""V-family figures on the shipped V instances vs the published tables.

Run from the repository root:
    .venv/bin/python results/vshape/bench_v.py > results/vshape/bench_v.txt
"""

import csv
from pathlib import Path

from zbsolve.baselines import generate
from zbsolve.instance import load_instance
from zbsolve.simulate import simulate

REF = Path(__file__).resolve().parents[3] / "shared" / "reference"


def unit_rows() -> None:
    print("vshape_unit_cost.csv (F=I=W=1): bubble = span metric (V-Min/V-Half: makespan identical)")
    print("p,m,V-Min,table,V-Min_peak,table,V-Half,table,V-Half_peak,table,"
          "ZB-V,table,ZB-V_peak,table,1F1B-V(makespan),1F1B(table)")
    for row in csv.DictReader(open(REF / "vshape_unit_cost.csv")):
        inst = load_instance(f"instances/vshape/vshape-p{row['p']}-m{row['m']}.yaml")
        out = [row["p"], row["m"]]
        for name, col in (("v-min", "V-Min"), ("v-half", "V-Half"), ("zb-v", "ZB-V")):
            r = simulate(inst, generate(name, inst))
            out += [f"{r.bubble_span:.4f}", row[col], f"{max(r.peak_memory):g}",
                    row[col + "_peak_chunk_acts"]]
        r = simulate(inst, generate("1f1b-v", inst))
        out += [f"{r.bubble_makespan:.4f}", row["1F1B"]]
        print(",".join(out))


def arxiv_rows() -> None:
    print("zbv_arxiv_bubble_rates.csv: ZB-V (span metric), 1F1B-V (makespan metric); "
          "limit 2p chunk activations, weight 0.432")
    print("model,p,m,ZB-V,table_ZB-V,ZB-V_peak,feasible,1F1B-V,table_1F1B,1F1B-V_peak")
    for row in csv.DictReader(open(REF / "zbv_arxiv_bubble_rates.csv")):
        name = f"zbv-{row['model'].lower()}-p{row['p']}-m{row['m']}"
        inst = load_instance(f"instances/zbv-arxiv/{name}.yaml")
        r = simulate(inst, generate("zb-v", inst))
        r2 = simulate(inst, generate("1f1b-v", inst))
        print(",".join([row["model"], row["p"], row["m"], f"{r.bubble_span:.4f}", row["ZB-V"],
                        f"{max(r.peak_memory):g}", str(r.feasible), f"{r2.bubble_makespan:.4f}",
                        row["1F1B"], f"{max(r2.peak_memory):g}"]))


if __name__ == "__main__":
    unit_rows()
    print()
    arxiv_rows()
