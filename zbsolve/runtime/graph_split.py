"""The I/W split of an arbitrary autograd graph: for modules we did not write.

:mod:`zbsolve.runtime.iw_split` splits the backward of the runner's own GPT through custom ops.
A user's model (a Hugging Face decoder, any ``nn.Module``) has plain torch ops, so the split has
to be made on the autograd graph the forward built. The approach is the one of torch's
pipelining (``stage_backward_input`` / ``stage_backward_weight``), written again here:

1. **Closure.** The nodes from which the stage input's gradient node is reachable lie on the
   input-gradient path; I has to run them. Every other node leads only to parameters: W.
2. **Frontier.** A closure node with an edge leaving the closure towards a parameter (a linear's
   ``AddmmBackward``: one edge to its input, one to its weight) is run by both passes, each
   computing only its own outputs. The autograd engine already does that: a node computes an
   output only when that output's edge leads to a requested input (``should_compute_output``),
   so ``autograd.grad(root, inputs=[x])`` computes ``grad_x = g @ W`` and not ``g^T @ x``.
3. **I** = ``autograd.grad(root, x, retain_graph=True)`` with a pre-hook on every frontier node
   that keeps the gradient arriving there.
4. **W** = per group of frontier nodes sharing parameters, ``autograd.grad`` from those nodes
   (``GradientEdge`` outputs, the kept gradients) to the group's parameters only; with several
   nodes in a group, each node's pre-hook replaces what arrives by what I kept, so a path between
   two of them is not counted twice.

No node's output is computed twice, so FLOPs(I) + FLOPs(W) = FLOPs(one plain backward); the
tests count them with ``torch.utils.flop_counter``.

**Stage 0.** Token ids have no gradient: the closure is empty, and torch's runtime then does
nothing at I and the whole backward at W (``backward_weight_one_chunk`` falls back to a full
backward on stage 0). A profiler that calls ``stage_backward_input`` / ``stage_backward_weight``
there directly finds no parameter groups and runs *no* weight gradient at all, which is how a
hand-written profiler measured a stage-0 backward of 0.9 ms against 7.1 ms. Here the layer
stack handles it (:class:`~zbsolve.runtime.layered.GraphStageRunner`): the first layer's output
is cut from its graph and made the input of the rest, so I runs the backward of the rest to the
embedding output and W runs every weight gradient, the embedding's included.

**Fallback.** A frontier node that is a Python ``autograd.Function`` may compute all its
outputs whatever is asked, so running it twice could double its work; then this split is not
trusted and ``split_backward_input`` returns a fused plan (I = the whole backward, W = nothing)
whose ``fallback`` says why. The profiler also checks every layer by FLOP counts and falls
back, saying so, when I + W exceeds one backward.

**Memory.** ``retain_graph=True`` would keep every saved tensor of the graph until W. With the
:class:`SavedTensorCensus` that recorded the forward, I notes which saved tensors the nodes W
runs again unpack, and afterwards frees the others (attention's internals, activation-function
inputs, norm statistics): what stays until W is what the weight gradients need, plus the
gradients kept at the frontier. The census counts the storages really alive, so what a profile
writes as "kept until W" is measured, not assumed.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import torch
from torch.autograd.graph import GradientEdge, Node, get_gradient_edge


def grad_node(t: torch.Tensor) -> Node | None:
    """The node a gradient for ``t`` flows into: its grad_fn, or its accumulator for a leaf."""
    if not t.requires_grad:
        return None
    return get_gradient_edge(t).node


# ---------------------------------------------------------------------- graph analysis
def _walk(roots: Iterable[Node]) -> dict[Node, list[Node]]:
    """Reverse edges (child -> parents) of every node reachable from the roots."""
    parents: dict[Node, list[Node]] = {}
    queue: deque[Node] = deque()
    for root in roots:
        if root is not None and root not in parents:
            parents[root] = []
            queue.append(root)
    while queue:
        node = queue.popleft()
        for child, _ in node.next_functions:
            if child is None:
                continue
            if child not in parents:
                parents[child] = []
                queue.append(child)
            parents[child].append(node)
    return parents


def _closure(targets: Iterable[Node], parents: dict[Node, list[Node]]) -> set[Node]:
    """Nodes from which one of ``targets`` is reachable (targets included)."""
    seen = {t for t in targets if t in parents}
    queue = deque(seen)
    while queue:
        for parent in parents[queue.popleft()]:
            if parent not in seen:
                seen.add(parent)
                queue.append(parent)
    return seen


def _params_below(node: Node, params: set[Node], memo: dict[Node, frozenset[Node]]) -> frozenset[Node]:
    """Parameter accumulators reachable from a node outside the closure (iterative DFS)."""
    if node in memo:
        return memo[node]
    stack = [(node, False)]
    while stack:
        current, expanded = stack.pop()
        if current in memo:
            continue
        children = [c for c, _ in current.next_functions if c is not None]
        if not expanded:
            stack.append((current, True))
            stack.extend((c, False) for c in children if c not in memo)
            continue
        found = {current} if current in params else set()
        for c in children:
            found |= memo[c]
        memo[current] = frozenset(found)
    return memo[node]


@dataclass
class _Group:
    """Frontier nodes whose weight parts reach the same parameters, and those parameters."""

    nodes: list[Node]
    params: list[Node]
    grads: dict[Node, tuple[torch.Tensor | None, ...]] = field(default_factory=dict)
    roots: list[tuple[torch.Tensor, torch.Tensor | None]] = field(default_factory=list)


def _groups(frontier: dict[Node, frozenset[Node]]) -> list[_Group]:
    """Union of frontier nodes that share a parameter (tied or reused weights)."""
    owner: dict[Node, int] = {}
    members: list[tuple[list[Node], set[Node]]] = []
    for node, params in frontier.items():
        hits = sorted({owner[p] for p in params if p in owner})
        if not hits:
            members.append(([node], set(params)))
            index = len(members) - 1
        else:
            index = hits[0]
            members[index][0].append(node)
            members[index][1].update(params)
            for other in hits[1:]:
                members[index][0].extend(members[other][0])
                members[index][1].update(members[other][1])
                members[other] = ([], set())
        for p in members[index][1]:
            owner[p] = index
    return [_Group(nodes, list(params)) for nodes, params in members if nodes]


# ---------------------------------------------------------------------- the two passes
@dataclass
class WeightPass:
    """What I left for W: the kept frontier gradients per group, or a fused/whole backward."""

    groups: list[_Group]
    accumulators: dict[Node, torch.Tensor]  # parameter accumulator -> parameter
    fallback: str = ""  # non-empty: why this backward was not split
    done: bool = False

    @property
    def held_bytes(self) -> int:
        """Bytes of the gradients kept for W (each storage once)."""
        seen: dict[int, int] = {}
        for group in self.groups:
            for grads in group.grads.values():
                for g in grads:
                    if g is not None:
                        seen.setdefault(g.untyped_storage().data_ptr(), g.untyped_storage().nbytes())
            for _, g in group.roots:
                if g is not None:
                    seen.setdefault(g.untyped_storage().data_ptr(), g.untyped_storage().nbytes())
        return sum(seen.values())

    def run(self) -> None:
        """W: the weight gradients, accumulated into ``.grad``; frees the retained graph."""
        if self.done:
            raise RuntimeError("weight pass ran twice")
        self.done = True
        for group in self.groups:
            self._run_group(group)
        self.groups = []

    def _run_group(self, group: _Group) -> None:
        outputs: list[GradientEdge | torch.Tensor] = []
        grads: list[torch.Tensor | None] = []
        for node in group.nodes:
            for i, g in enumerate(group.grads.get(node, ())):
                if g is not None:
                    outputs.append(GradientEdge(node, i))
                    grads.append(g)
        for root, g in group.roots:  # outputs that do not depend on the stage input
            outputs.append(root)
            grads.append(g)
        if not outputs:
            return
        handles = []
        if len(group.nodes) > 1:
            # a frontier node reached from another one of the group must see exactly what I
            # gave it, not that plus a second copy through the path between them
            for node in group.nodes:
                kept = group.grads.get(node)
                if kept is not None:
                    handles.append(node.register_prehook(lambda _g, kept=kept: kept))
        try:
            params = [self.accumulators[p] for p in group.params]
            edges = [GradientEdge(p, 0) for p in group.params]
            dws = torch.autograd.grad(outputs, edges, grad_outputs=grads, allow_unused=True)
        finally:
            for h in handles:
                h.remove()
        group.grads.clear()
        group.roots.clear()
        for param, dw in zip(params, dws):
            if dw is None:
                continue
            if param.grad is None:
                param.grad = dw
            else:
                param.grad += dw


def _custom_function(node: Node) -> bool:
    return isinstance(node, torch.autograd.function.BackwardCFunction)


def split_backward_input(
    roots: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None],
    inputs: Sequence[torch.Tensor], params: Iterable[torch.Tensor], *, force_fused: str = "",
    census: SavedTensorCensus | None = None,
) -> tuple[list[torch.Tensor | None], WeightPass]:
    """I: the gradients of ``inputs`` only; returns them and the :class:`WeightPass` for W.

    ``roots`` are the stage outputs (or the loss, with ``grads`` None), ``inputs`` the stage
    inputs that require a gradient (possibly none: then I computes nothing and W everything).
    ``force_fused`` (a reason): run the whole backward now and leave W empty. ``census``: the
    one that recorded the forward; then the saved tensors only I needed are freed after it.
    """
    accumulators: dict[Node, torch.Tensor] = {}
    for p in params:
        if p.requires_grad:
            accumulators[get_gradient_edge(p).node] = p
    live = [(r, g) for r, g in zip(roots, grads) if r.requires_grad]
    inputs = [x for x in inputs if x.requires_grad]
    root_nodes = [grad_node(r) for r, _ in live]
    parents = _walk(root_nodes)
    input_nodes = [grad_node(x) for x in inputs]
    closure = _closure(input_nodes, parents)
    frontier: dict[Node, frozenset[Node]] = {}
    memo: dict[Node, frozenset[Node]] = {}
    param_nodes = set(accumulators)
    for node in closure:
        reach: set[Node] = set()
        for child, _ in node.next_functions:
            if child is not None and child not in closure:
                reach |= _params_below(child, param_nodes, memo)
        if reach:
            frontier[node] = frozenset(reach)
    reason = force_fused or next(
        (f"{type(n).__name__} is a Python autograd.Function: it may compute its weight gradient "
         "in I as well, so its backward runs fused" for n in frontier if _custom_function(n)), "")
    if reason:
        return _fused(live, inputs, accumulators, reason), WeightPass([], accumulators, reason)
    groups = _groups(frontier)
    by_node = {node: g for g in groups for node in g.nodes}
    # roots outside the closure (outputs that do not depend on the input): all of it is W
    loose = [(r, g) for (r, g), n in zip(live, root_nodes) if n not in closure]
    if loose:
        groups.append(_Group([], list(param_nodes), roots=loose))
    needed = _rerun_by_weight_pass(groups, closure, param_nodes, memo)
    handles = []

    def keeper(node: Node):
        def hook(grad_outputs):
            by_node[node].grads[node] = tuple(grad_outputs)
        return hook

    try:
        for node in frontier:
            handles.append(node.register_prehook(keeper(node)))
        in_closure = [(r, g) for (r, g), n in zip(live, root_nodes) if n in closure]
        if inputs and in_closure:
            tracking = census.tracking_input_pass(needed) if census is not None else nullcontext()
            with tracking:
                got = torch.autograd.grad([r for r, _ in in_closure], inputs,
                                          grad_outputs=[g for _, g in in_closure],
                                          retain_graph=True, allow_unused=True)
            if census is not None:
                census.release_input_only()
        else:
            got = tuple(None for _ in inputs)
    finally:
        for h in handles:
            h.remove()
    for x, g in zip(inputs, got):
        if g is not None:
            x.grad = g if x.grad is None else x.grad + g
    for r, _ in in_closure if inputs else []:
        if not r._is_view():
            r.detach_()  # the graph above the frontier is not needed by W: free it
    return list(got), WeightPass(groups, accumulators)


def _rerun_by_weight_pass(groups: list[_Group], closure: set[Node], params: set[Node],
                          memo: dict[Node, frozenset[Node]]) -> set[Node]:
    """The closure nodes W runs again: every frontier node, and, in a group of several, the
    closure nodes on a path from one of them to the group's parameters (the engine runs
    those too; the replacing pre-hooks only stop the double count)."""
    needed: set[Node] = set()
    for group in groups:
        needed.update(group.nodes)
        if len(group.nodes) < 2:
            continue
        wanted = set(group.params)
        stack = list(group.nodes)
        seen = set(stack)
        while stack:
            for child, _ in stack.pop().next_functions:
                if child is None or child in seen or child not in closure:
                    continue
                seen.add(child)
                if _params_below(child, params, memo) & wanted:
                    needed.add(child)
                    stack.append(child)
    return needed


def _fused(live, inputs, accumulators, reason) -> list[torch.Tensor | None]:
    """The whole backward at once (the fallback): input and weight gradients together."""
    if not live:
        return [None for _ in inputs]
    targets = list(inputs) + list(accumulators.values())
    torch.autograd.backward([r for r, _ in live], [g for _, g in live], inputs=targets)
    return [x.grad for x in inputs]


# ---------------------------------------------------------------------- memory census
class _Held:
    """A saved tensor as autograd keeps it (the packed object); its death is counted."""

    __slots__ = ("tensor", "ptr", "used_in_i", "keep", "release", "__weakref__")

    def __init__(self, tensor: torch.Tensor, ptr: int) -> None:
        self.tensor: torch.Tensor | None = tensor
        self.ptr = ptr
        self.used_in_i = False  # unpacked by a node while I ran
        self.keep = False  # unpacked by a node W runs again (a frontier node, or on a path
        # between two frontier nodes of one group)
        self.release: weakref.finalize | None = None


class DroppedTensorError(RuntimeError):
    """A saved tensor released after I was asked for by W (a bug in the needed-node set)."""


@dataclass
class SavedTensorCensus:
    """Bytes of the distinct storages autograd keeps for backward, alive right now; and the
    release, after I, of the saved tensors only I needed.

    Every tensor saved while :meth:`recording` is active is packed into a small holder; when
    autograd drops it (a node ran with ``retain_graph=False``, or the graph died) the holder
    dies and its storage is uncounted once no other holder refers to it. Parameters are not
    counted (they are resident anyway).

    ``retain_graph=True`` would keep every saved tensor until W. While I runs, the holders
    record which node kind unpacked them (:meth:`tracking_input_pass`): nodes W runs again mark
    theirs ``keep``. :meth:`release_input_only` then drops the tensors unpacked during I and not
    kept (attention's probabilities, activation inputs, norms' statistics ...), so what stays
    until W is what the weight gradients need, as the papers' memory model says (M_W < M_B).
    """

    exclude: set[int] = field(default_factory=set)  # storage pointers not counted (parameters)
    refs: dict[int, int] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)
    holders: weakref.WeakSet = field(default_factory=weakref.WeakSet)
    in_input_pass: bool = False
    in_needed_node: int = 0

    @property
    def live_bytes(self) -> int:
        return sum(self.sizes[p] for p in self.refs)

    def _pack(self, t: torch.Tensor):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr in self.exclude or storage.nbytes() == 0:
            return t
        held = _Held(t, ptr)
        self.refs[ptr] = self.refs.get(ptr, 0) + 1
        self.sizes[ptr] = storage.nbytes()
        held.release = weakref.finalize(held, self._release, ptr)
        self.holders.add(held)
        return held

    def _release(self, ptr: int) -> None:
        n = self.refs.get(ptr, 0) - 1
        if n <= 0:
            self.refs.pop(ptr, None)
            self.sizes.pop(ptr, None)
        else:
            self.refs[ptr] = n

    def _unpack(self, packed):
        if not isinstance(packed, _Held):
            return packed
        if packed.tensor is None:
            raise DroppedTensorError("a saved tensor freed after I was needed again in W; "
                                     "run this stage fused (GraphStageRunner(fused=...))")
        if self.in_input_pass:
            packed.used_in_i = True
            if self.in_needed_node:
                packed.keep = True
        return packed.tensor

    @contextmanager
    def recording(self) -> Iterator[SavedTensorCensus]:
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            yield self

    @contextmanager
    def tracking_input_pass(self, needed: Iterable[Node]) -> Iterator[None]:
        """During I: mark what the ``needed`` nodes (those W runs again) unpack."""
        def enter(_grads):
            self.in_needed_node += 1

        def leave(_grad_inputs, _grad_outputs):
            self.in_needed_node -= 1

        handles = []
        for node in needed:
            handles.append(node.register_prehook(enter))
            handles.append(node.register_hook(leave))
        self.in_input_pass = True
        try:
            yield
        finally:
            self.in_input_pass = False
            self.in_needed_node = 0
            for h in handles:
                h.remove()

    def release_input_only(self) -> int:
        """Drop the tensors only I used; returns the bytes no longer counted."""
        before = self.live_bytes
        for held in list(self.holders):
            if held.used_in_i and not held.keep and held.tensor is not None:
                held.tensor = None
                if held.release is not None:
                    held.release()  # uncount now (the holder itself lives on in the graph)
        return before - self.live_bytes
