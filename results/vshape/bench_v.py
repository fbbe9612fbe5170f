"""V-family figures on the shipped V instances vs the published tables.

Run from the repository root:
    .venv/bin/python results/vshape/bench_v.py > results/vshape/bench_v.txt
"""

import csv
import time

from zbsolve.baselines import generate
from zbsolve.data import reference_dir
from zbsolve.instance import load_instance
from zbsolve.simulate import simulate

REF = reference_dir()


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
    print("(ZB-V_s: seconds to generate ZB-V, wall clock on a shared 2-core machine)")
    print("model,p,m,ZB-V,table_ZB-V,diff,ZB-V_peak,feasible,ZB-V_s,"
          "1F1B-V,table_1F1B,1F1B-V_peak")
    for row in csv.DictReader(open(REF / "zbv_arxiv_bubble_rates.csv")):
        name = f"zbv-{row['model'].lower()}-p{row['p']}-m{row['m']}"
        inst = load_instance(f"instances/zbv-arxiv/{name}.yaml")
        t0 = time.perf_counter()
        sched = generate("zb-v", inst)
        secs = time.perf_counter() - t0
        r = simulate(inst, sched)
        r2 = simulate(inst, generate("1f1b-v", inst))
        print(",".join([row["model"], row["p"], row["m"], f"{r.bubble_span:.4f}", row["ZB-V"],
                        f"{r.bubble_span - float(row['ZB-V']):+.4f}",
                        f"{max(r.peak_memory):g}", str(r.feasible), f"{secs:.2f}",
                        f"{r2.bubble_makespan:.4f}", row["1F1B"], f"{max(r2.peak_memory):g}"]))


# The per-row profiled times (microseconds; p, m, F, I, W, comm) the authors fed their own V
# generator for the arXiv table (figures from sail-sg/zero-bubble-pipeline-parallelism,
# megatron/core/pipeline_parallel/v_schedule.py); the CSV rounds them per model.
PROFILED = [(16, 48, 14407, 14380, 9676, 1610), (16, 64, 14412, 14393, 9688, 1621),
            (16, 128, 14316, 14306, 9639, 1619), (24, 72, 6763, 6969, 5251, 755),
            (24, 96, 6783, 6984, 5259, 758), (24, 192, 6785, 6990, 5260, 770),
            (32, 96, 9458, 9748, 7288, 879), (32, 128, 9469, 9744, 7306, 892),
            (32, 256, 9447, 9644, 7193, 887)]


def arxiv_rows_profiled() -> None:
    print("ZB-V with the per-row profiled times the authors used (ms = us / 1000), "
          "same memory (weight 0.432, limit 2p)")
    print("p,m,F,I,W,comm,ZB-V,table_ZB-V,diff")
    rows = list(csv.DictReader(open(REF / "zbv_arxiv_bubble_rates.csv")))
    for (p, m, f, i, w, c), row in zip(PROFILED, rows, strict=True):
        inst = load_instance({
            "devices": p, "microbatches": m, "chunks": 2, "placement": "v",
            "times": {"F": f / 1000, "I": i / 1000, "W": w / 1000}, "comm": c / 1000,
            "memory": {"activation": 1, "weight": 0.432, "limit": 2 * p}})
        r = simulate(inst, generate("zb-v", inst))
        print(",".join(map(str, [p, m, f / 1000, i / 1000, w / 1000, c / 1000]))
              + f",{r.bubble_span:.5f},{row['ZB-V']},{r.bubble_span - float(row['ZB-V']):+.5f}")


if __name__ == "__main__":
    unit_rows()
    print()
    arxiv_rows()
    print()
    arxiv_rows_profiled()
