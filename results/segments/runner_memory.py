"""Segments in the runner, measured: gradients against the reference, activation peaks per rank,
and per-segment memory (a segment's keys and values are part of its activation).

    .venv/bin/python results/segments/runner_memory.py > results/segments/runner_memory.txt

CPU, gloo, 2 ranks; the runner's GPT (4 layers, h = 64, 4 heads, seq = 64, microbatch 2);
m = 4 microbatches; k = 1 (1F1B), 2 and 4 (Seq1F1B, equal lengths). Peaks are the runner's own
count of saved-for-backward and kept-for-W bytes (the CPU stand-in for the CUDA allocator).
"""

from __future__ import annotations

from zbsolve.baselines import generate
from zbsolve.export.executor import lower
from zbsolve.instance import load_instance
from zbsolve.runtime.launch import run_jobs
from zbsolve.runtime.model import GPTConfig
from zbsolve.runtime.runner import Job, RunOptions
from zbsolve.simulate import simulate

CFG = GPTConfig(layers=4, hidden=64, heads=4, seq=64, vocab=128, microbatch_size=2)
P, M = 2, 4


def instance(k: int):
    return load_instance(dict(name=f"gpt-p{P}-m{M}-k{k}", devices=P, microbatches=M,
                              segments=k, times=dict(F=1, I=1, W=0.5),
                              memory=dict(activation=1.0, weight=0.5)))


def main() -> None:
    jobs, predicted = [], []
    for k in (1, 2, 4):
        inst = instance(k)
        for name in (("1f1b", "zb-h1") if k == 1 else ("seq1f1b", "seq1f1b-zb")):
            sched = generate(name, inst)
            predicted.append(max(simulate(inst, sched).peak_memory))
            jobs.append(Job(lower(inst, sched).to_dict(), CFG.to_dict(), label=f"{name} k={k}"))
    reports = run_jobs(jobs, P, RunOptions(timeout_s=120, steps=2))
    base = {}
    print("| schedule | max rel. diff vs reference | predicted peak (activations) | measured "
          "peak bytes rank 0 | rank 1 | rank 0 / its k=1 figure |")
    print("|---|---|---|---|---|---|")
    for r, pred in zip(reports, predicted):
        peaks = r["peak_activation_bytes"]
        family = "split" if r["label"].startswith(("zb", "seq1f1b-zb")) else "fused"
        base.setdefault(family, peaks[0])
        print(f"| {r['label']} | {r['max_rel_diff']:.2e} ({'ok' if r['ok'] else 'FAIL'}) | "
              f"{pred:g} | {peaks[0]} | {peaks[1]} | {peaks[0] / base[family]:.3f} |")
    from zbsolve.profiler.segments import profile_segments

    print()
    print("Per segment, k = 4 (stage 0 of 2): bytes its F saves for the backward, of which its "
          "own keys and values; the dense CPU attention also saves the concatenated prefix "
          "keys and values (a copy) it attended over:")
    print()
    print("| segment | tokens | saved by F | own K/V | kept for W |")
    print("|---|---|---|---|---|")
    sp = profile_segments(CFG, 2, M, (16, 16, 16, 16), warmup=1, repeats=2)[0]
    for g, n in enumerate(sp.lengths):
        print(f"| {g} | {n} | {sp.saved_bytes[g]:.0f} | {sp.kv_bytes[g]:.0f} | "
              f"{sp.held_bytes[g]:.0f} |")


if __name__ == "__main__":
    main()
