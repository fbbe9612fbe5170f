"""Measure overlapped F&B (OVERLAP_F_B) against F + B on this machine, with both engines.

One launch of 2 gloo ranks runs DualPipeV (2 ranks, V placement, m microbatches) on a GPT:
- our engine, the table with OVERLAP_F_B pairs (``overlap: {FB: 0.7}``) and the same
  schedule's unpaired form (instance without ``overlap``: each pair's F then its B);
- torch's ``_PipelineScheduleRuntime`` on the pairs' CSV, with our custom function registered
  (``register_custom_function(OVERLAP_F_B, ...)``) and with torch's default (halves in order).
Each job runs ``--repeats`` times, interleaved, so machine load hits all of them alike; every
run is also the gradient proof (it fails loudly if a gradient differs from the reference).

    .venv/bin/python scripts/measure_overlap.py --out results/runtime/overlap

writes ``results.json`` (every report) and ``summary.json`` (the figures the README quotes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path


def _tables(m: int):
    from zbsolve.baselines import generate
    from zbsolve.export.executor import lower
    from zbsolve.instance import load_instance

    base = {"devices": 2, "microbatches": m, "chunks": 2, "placement": "v",
            "times": {"F": 1, "I": 1, "W": 1}, "comm": 0.1}
    paired = load_instance({**base, "name": "dualpipev-pairs", "overlap": {"FB": 0.7}})
    plain = load_instance({**base, "name": "dualpipev-unpaired"})
    return lower(paired, generate("dualpipev", paired)), lower(plain, generate("dualpipev", plain))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/runtime/overlap")
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    from zbsolve.io import atomic_write_text
    from zbsolve.runtime.launch import run_jobs
    from zbsolve.runtime.model import GPTConfig
    from zbsolve.runtime.runner import Job, RunOptions
    from zbsolve.runtime.torch_engine import write_csv_for

    cfg = GPTConfig.preset("gpt-small", layers=args.layers, hidden=args.hidden)
    paired, plain = _tables(args.microbatches)
    tmp = tempfile.mkdtemp(prefix="zbsolve-overlap-")
    csv_path = os.path.join(tmp, "dualpipev.csv")
    write_csv_for(paired, csv_path)
    kinds = {
        "ours pairs": dict(table=paired, engine="ours"),
        "ours unpaired": dict(table=plain, engine="ours"),
        "torch custom function": dict(table=paired, engine="torch", overlap_function=True),
        "torch default": dict(table=paired, engine="torch", overlap_function=False),
    }
    jobs = []
    for rep in range(args.repeats):
        for label, k in kinds.items():
            extra = {"torch_csv": csv_path, "overlap_function": k["overlap_function"]} \
                if k["engine"] == "torch" else {}
            jobs.append(Job(k["table"].to_dict(), cfg.to_dict(), engine=k["engine"],
                            label=f"{label} #{rep}", **extra))
    reports = run_jobs(jobs, 2, RunOptions(steps=args.steps, timeout_s=600))
    bad = [r["label"] for r in reports if not r["ok"]]
    if bad:
        raise SystemExit(f"gradient mismatch in {bad}")

    def runs(label: str) -> list[dict]:
        return [r for r in reports if r["label"].rsplit(" #", 1)[0] == label]

    def med(values: list[float]) -> float:
        return round(statistics.median(values), 2)

    summary = {"model": reports[0]["model"], "microbatches": args.microbatches,
               "steps": args.steps, "repeats": args.repeats, "load": os.getloadavg(),
               "max_rel_diff": max(r["max_rel_diff"] for r in reports)}
    for label in kinds:
        summary[label] = {"step_ms_median": med([r["timing"]["step_ms"] for r in runs(label)]),
                          "step_ms": [round(r["timing"]["step_ms"], 2) for r in runs(label)],
                          "overlap_f_b_ran": runs(label)[0]["overlap_f_b_ran"],
                          "sent_early": runs(label)[0]["sent_early"]}
    pairs = [r["timing"]["pairs"] for r in runs("ours pairs")]
    summary["ours pairs"]["pairs"] = {
        "count": pairs[0]["count"],
        "pair_ms_median": med([p["mean_ms"] for p in pairs]),
        "halves_ms_median": med([p["halves_mean_ms"] for p in pairs]),
        "unpaired_f_plus_b_ms_median": med([p["unpaired_f_plus_b_mean_ms"] for p in pairs]),
        "ratio_median": round(statistics.median(p["ratio"] for p in pairs), 3),
        "halves_ratio_median": round(statistics.median(
            p["halves_mean_ms"] / p["unpaired_f_plus_b_mean_ms"] for p in pairs), 3),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, data in (("results.json", reports), ("summary.json", summary)):
        atomic_write_text(out / name, json.dumps(data, indent=1, default=str) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
