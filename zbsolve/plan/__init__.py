"""Planning before the GPUs exist: an analytic cost model, the layer split as a decision, a plan.

- ``zbsolve.plan.cost_model.analytic_profile(shape, accelerator, microbatch_size)``: per-layer
  F, I, W and bytes (a ``zbsolve.layers.LayerProfile``) from FLOPs and bytes of each kernel;
- ``zbsolve.plan.validate``: that model against the Zero Bubble paper's measured A100 times;
- ``zbsolve.plan.rules``: the layer splits torchtitan and the Zero Bubble repository use;
- ``zbsolve.plan.split_search``: the split chosen jointly with the schedule (bounds + CP-SAT);
- ``zbsolve.plan.planner``: ``zbsolve plan``'s search over splits x layouts x microbatch counts.
"""
