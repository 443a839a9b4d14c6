"""Where a profiled step's time goes: phases, modules and top operators, from torch.profiler events.

The workload marks each phase with a `phase:<name>` range and each module of interest with
a `mod:<category>:<name>` range (forward hooks). Attribution, all on the profiler's clock:

- step = first phase start to last phase end; each phase its ranges' wall time.
- communication: collective events (c10d, gloo, nccl) inside a phase, moved out of it.
- forward: each module range's exclusive wall time (minus the module ranges nested in it)
  goes to its category; the rest of the forward phase (residual adds, masks, Python
  between modules) is `other`.
- backward: each `autograd::engine::evaluate_function` event goes to the category of the
  forward operator with the same autograd sequence number (the op that made that node);
  gradient accumulation and the engine's own time are `other`.
- optimizer: its whole phase.

So the categories of a step sum to the step's wall time exactly (shares add to 1).
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from llmdissect.measure.stats import Stats

CATEGORIES = ("embedding", "attention projections", "attention core", "MLP", "router", "experts", "shared experts",
              "norms", "output head", "loss", "optimizer", "communication", "other")
# A mixture of experts' parts; a dense model's step has none, and its table does not show them.
MOE_CATEGORIES = ("router", "experts", "shared experts")
# Attention's linear layers: Llama's four and latent attention's (DeepSeek-V2/V3) down- and
# up-projections of queries and of the compressed key-value latent.
_ATTN_PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")
_LAYER = re.compile(r"(^|\.)layers\.\d+$")
FORWARD_PHASES = ("forward", "prefill", "decode")
COMM_PREFIXES = ("c10d::", "_c10d_functional::", "gloo:", "nccl:", "record_param_comms")


def module_category(name: str) -> str | None:
    """The category of a module by its qualified name (Llama naming; PEFT prefixes allowed)."""
    last = name.rsplit(".", 1)[-1]
    if name == "":
        return "loss"  # the causal-LM's own forward: logits slicing and the loss
    if last == "embed_tokens":
        return "embedding"
    if last in _ATTN_PROJ:
        return "attention projections"
    if last in ("self_attn", "rotary_emb"):
        return "attention core"
    if last == "mlp":
        return "MLP"  # a MoE block's own time (reshapes, the weighted sum) stays here too
    parent = name.rsplit(".", 2)[-2] if name.count(".") else ""
    if parent == "mlp" and last in ("gate", "router"):  # Mixtral, Qwen-MoE, OLMoE, DeepSeek; gpt-oss
        return "router"
    if parent == "mlp" and last == "experts":  # the routed experts with their dispatch and combine
        return "experts"
    if parent == "mlp" and last in ("shared_experts", "shared_expert", "shared_expert_gate"):
        return "shared experts"
    if last.endswith("norm"):
        return "norms"
    if last == "lm_head":
        return "output head"
    if _LAYER.search(name) or last == "model":
        return "other"
    return None


def _start(e: Any) -> float:
    return e.time_range.start


def _end(e: Any) -> float:
    return e.time_range.end


def _dur_s(e: Any) -> float:
    return (e.time_range.end - e.time_range.start) / 1e6


def _ancestor(e: Any, prefix: str) -> Any:
    p = e.cpu_parent
    while p is not None and not p.name.startswith(prefix):
        p = p.cpu_parent
    return p


def attribute(events: Iterable[Any], steps: int, top_n: int = 10) -> dict[str, Any]:
    """Per step: seconds per phase and per category; plus the top operators (self time)."""
    events = list(events)
    phases = sorted((e for e in events if e.name.startswith("phase:")), key=_start)
    if not phases:
        raise ValueError("no phase ranges in the profile")
    per_step: list[dict[str, Any]] = []
    bounds = _split_steps(phases, steps, events)
    seq_category: dict[int, str] = {}
    for e in events:
        if e.sequence_nr >= 0 and not e.name.startswith("autograd::"):
            mod = _ancestor(e, "mod:")
            if mod is not None:
                seq_category.setdefault(e.sequence_nr, mod.name.split(":")[1])
    for lo, hi in bounds:
        mine = [e for e in events if lo <= _start(e) and _end(e) <= hi]
        per_step.append(_one_step(mine, [p for p in phases if lo <= _start(p) < hi], seq_category, (hi - lo) / 1e6))
    return {"steps": per_step, "top_ops": top_ops(events, sum(s["step_s"] for s in per_step), top_n)}


def add_top_ops(totals: dict[str, dict[str, list[float]]], result: dict[str, Any]) -> None:
    """Add one traced step's operators to `totals` (per operator: self seconds and calls, a sample a step)."""
    for o in result["top_ops"]:
        acc = totals.setdefault(o["op"], {"self_s": [], "calls": []})
        acc["self_s"].append(o["self_s"])
        acc["calls"].append(o["calls"])


def top_ops_per_step(totals: dict[str, dict[str, list[float]]], n: int, step_s: float, k: int = 10
                     ) -> list[dict[str, Any]]:
    """The `k` operators of most self time per step: means over the `n` traced steps (a step
    an operator did not run in counts 0), with their share of the mean step `step_s`."""
    rows = []
    for op, acc in totals.items():
        zeros = [0.0] * (n - len(acc["self_s"]))
        rows.append({"op": op, "self_s": Stats.of(acc["self_s"] + zeros).mean,
                     "calls": Stats.of(acc["calls"] + zeros).mean})
    top = sorted(rows, key=lambda o: -o["self_s"])[:k]
    for o in top:
        o["share"] = o["self_s"] / step_s
    return top


def summarize(steps: list[dict[str, Any]], top: list[dict[str, Any]]) -> dict[str, Any]:
    """Median over the profiled steps of each phase and category (seconds and shares)."""

    def med(key: str) -> dict[str, float]:
        return {k: Stats.of([s[key][k] for s in steps]).median for k in steps[0][key]}

    modules_s = med("modules_s")
    total = sum(modules_s.values())
    return {"phases_s": med("phases_s"), "phases_share": med("phases_share"), "modules_s": modules_s,
            "modules_share": {k: v / total for k, v in modules_s.items()}, "top_ops": top, "per_step": steps}


def profile_metrics(steps: list[dict[str, Any]], ops: dict[str, dict[str, list[float]]], untraced_s: list[float],
                    trace: str | None) -> dict[str, Any]:
    """The record's metrics: the traced steps summarized, their top operators, and the
    profiling overhead (median traced step over median untraced step, steps alternating)."""
    traced, untraced = Stats.of([s["step_s"] for s in steps]), Stats.of(untraced_s)
    top = top_ops_per_step(ops, len(untraced_s), traced.mean)
    return {**summarize(steps, top), "untraced_step_s": untraced.median, "untraced_steps_s": untraced_s,
            "profiled_step_s": traced.median, "profiling_overhead": traced.median / untraced.median - 1,
            "trace": trace}


def _split_steps(phases: list[Any], steps: int, events: list[Any] = ()) -> list[tuple[float, float]]:
    """`step:` ranges where the workload marks its steps (inference: one generate call);
    else a step begins with its first forward after an optimizer phase (or the first phase)."""
    marked = sorted((_start(e), _end(e)) for e in events if e.name.startswith("step:"))
    if marked:
        return marked[-steps:] if steps else marked
    starts, prev = [], None
    for p in phases:
        if p.name == "phase:forward" and (prev is None or prev == "phase:optimizer"):
            starts.append(_start(p))
        prev = p.name
    ends = [max(_end(p) for p in phases if a <= _start(p) < (starts[i + 1] if i + 1 < len(starts) else 1e30))
            for i, a in enumerate(starts)]
    return list(zip(starts, ends))[-steps:] if steps else list(zip(starts, ends))


def _one_step(events: list[Any], phases: list[Any], seq_category: dict[int, str], step_s: float) -> dict[str, Any]:
    names = {p.name.split(":", 1)[1] for p in phases}
    phase_s = dict.fromkeys(["prefill", "decode"] if "decode" in names or "prefill" in names else
                            ["forward", "backward", "optimizer"], 0.0)
    phase_s["communication"] = 0.0
    for p in phases:
        phase_s[p.name.split(":", 1)[1]] = phase_s.get(p.name.split(":", 1)[1], 0.0) + _dur_s(p)
    comm = step_communication(events, phases)
    for e in comm:
        ph = _ancestor(e, "phase:")
        if ph is not None:
            phase_s[ph.name.split(":", 1)[1]] -= _dur_s(e)
        phase_s["communication"] += _dur_s(e)
    cat = {c: 0.0 for c in CATEGORIES}
    cat["communication"] = phase_s["communication"]
    cat["optimizer"] = phase_s.get("optimizer", 0.0)
    fwd_mod = [e for e in events if e.name.startswith("mod:") and _phase_of(e) in FORWARD_PHASES]
    for e in fwd_mod:
        inner = sum(_dur_s(c) for c in _child_modules(e))
        cat[e.name.split(":")[1]] += _dur_s(e) - inner
    top_fwd = sum(_dur_s(e) for e in fwd_mod if _ancestor(e, "mod:") is None)
    bwd_nodes = [e for e in events if e.name.startswith("autograd::engine::evaluate_function")
                 and _ancestor(e, "autograd::engine::evaluate_function") is None]
    for e in bwd_nodes:
        cat[seq_category.get(e.sequence_nr, "other")] += _dur_s(e)
    bwd_attr = sum(_dur_s(e) for e in bwd_nodes)
    fwd_s = sum(_dur_s(p) for p in phases if p.name.split(":", 1)[1] in FORWARD_PHASES)
    bwd_s = sum(_dur_s(p) for p in phases if p.name == "phase:backward")
    cat["other"] += max(0.0, fwd_s - top_fwd) + max(0.0, bwd_s - bwd_attr)
    cat["other"] += max(0.0, step_s - sum(_dur_s(p) for p in phases))  # between phases (generate's own loop)
    for e in comm:  # counted above where it ran (a module, a backward node, between modules); it is communication
        where = _counted_in(e, seq_category)
        if where is not None:
            cat[where] -= _dur_s(e)
    for c in MOE_CATEGORIES:
        if cat[c] == 0.0 and not any(e.name.startswith(f"mod:{c}:") for e in fwd_mod):
            del cat[c]
    total = sum(cat.values())
    return {"step_s": step_s, "phases_s": phase_s, "modules_s": cat, "attributed_s": total,
            "modules_share": {k: v / total for k, v in cat.items()},
            "phases_share": {k: v / step_s for k, v in phase_s.items()}}


def step_communication(events: list[Any], phases: list[Any]) -> list[Any]:
    """The collectives the step's own thread spent its time in: the outermost communication
    events on the thread that ran the phases (a synchronous call, a launch, the wait for an
    asynchronous one). The backend's worker threads (gloo's) run the transfers alongside,
    often hidden behind compute, so they are not the step's time."""
    threads = {p.thread for p in phases}
    return [e for e in events if e.name.startswith(COMM_PREFIXES) and e.thread in threads
            and not _comm_ancestor(e)]


def _comm_ancestor(e: Any) -> bool:
    p = e.cpu_parent
    while p is not None:
        if p.name.startswith(COMM_PREFIXES):
            return True
        p = p.cpu_parent
    return False


def _counted_in(e: Any, seq_category: dict[int, str]) -> str | None:
    """The category whose time includes the communication event `e` before it is moved out."""
    phase = _phase_of(e)
    if phase == "optimizer":
        return None  # the optimizer's category is its phase's time, which already excludes it
    if phase in FORWARD_PHASES:
        mod = _ancestor(e, "mod:")
        return mod.name.split(":")[1] if mod is not None else "other"
    if phase == "backward":
        node, p = None, e.cpu_parent
        while p is not None:  # the outermost autograd node, as the backward attribution takes them
            if p.name.startswith("autograd::engine::evaluate_function"):
                node = p
            p = p.cpu_parent
        return seq_category.get(node.sequence_nr, "other") if node is not None else "other"
    return "other"


def _phase_of(e: Any) -> str | None:
    p = _ancestor(e, "phase:")
    return p.name.split(":", 1)[1] if p is not None else None


def _child_modules(e: Any) -> list[Any]:
    """The module ranges nested directly in `e` (not inside a deeper module range)."""
    out, stack = [], list(e.cpu_children)
    while stack:
        c = stack.pop()
        if c.name.startswith("mod:"):
            out.append(c)
        else:
            stack.extend(c.cpu_children)
    return out


def top_ops(events: list[Any], total_s: float, n: int = 10) -> list[dict[str, Any]]:
    """Operators by self time over the profiled steps (aten::*, and other kernels)."""
    agg: dict[str, list[float]] = {}
    for e in events:
        if e.name.startswith(("phase:", "mod:", "step:", "autograd::", "ProfilerStep", "Optimizer.")) \
                or e.name.endswith("Backward0"):
            continue
        a = agg.setdefault(e.name, [0.0, 0])
        a[0] += e.self_cpu_time_total / 1e6
        a[1] += 1
    rows = sorted(agg.items(), key=lambda kv: -kv[1][0])[:n]
    return [{"op": k, "self_s": v[0], "calls": v[1], "share": v[0] / total_s if total_s else None} for k, v in rows]
