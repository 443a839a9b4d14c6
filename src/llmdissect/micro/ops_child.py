"""`bench ops`, the child side: every operator of a model's decoder layer at its real shapes,
timed with the one timer and loop policy, each row placed against its roofline.

Ceilings: the dense matmul peak of the dtype and the memory bandwidth from the calibration
profile (`llmdissect peak`), or measured here quickly when the profile has none (the record
says which). Small operators run from the caches, faster than DRAM allows, so the bandwidth
ceiling of an operator is the copy bandwidth measured here at the smallest working set that
holds its bytes (a cache-aware roofline, Ilic, Pratas and Sousa, IEEE CAL 2014), never below
the DRAM bandwidth. Should a row still beat a ceiling, that ceiling is raised to the row's
rate and the record lists it (`ceilings.raised`): a fraction of peak never exceeds 1.
"""
from __future__ import annotations

from typing import Any

import llmdissect.metric_names as mn
from llmdissect.micro.ops_cases import SDPA_BACKENDS, OpCase
from llmdissect.micro.ops_config import OpsConfig

LADDER_BYTES = (32 * 2**10, 256 * 2**10, 2 * 2**20, 16 * 2**20)


ELEMENTWISE_TOKENS_MAX = 4096
"""The most tokens the element-wise curve's largest point runs (a 70B layer's SwiGLU at 4096
tokens is three 0.9 GB bf16 tensors)."""


def elementwise_tokens(tokens: int) -> list[int]:
    """The token counts a layer's element-wise operators are timed at, forward: a quarter of
    the run's, the run's, and eight times it (at most ELEMENTWISE_TOKENS_MAX): their rate per
    byte rises with size (dispatch amortized, more threads), and the estimate prices a decode
    step of a few tokens and a prefill of thousands with the same operators."""
    return sorted({max(1, tokens // 4), tokens, max(tokens, min(8 * tokens, ELEMENTWISE_TOKENS_MAX))})


def default_seqs(tokens: int, max_len: int) -> list[int]:
    top = min(tokens, max_len)
    return sorted({max(16, min(top, s)) for s in (top // 4, top // 2, top)})


def sdpa_backends(device: str) -> list[str]:
    """math and flash on CPU; also memory-efficient and cuDNN on CUDA (a backend that cannot
    run the inputs is left out at run time, with its reason)."""
    names = ["math", "flash"]
    if device.startswith("cuda"):
        names += ["efficient", "cudnn"]
    from torch.nn.attention import SDPBackend

    return [n for n in names if hasattr(SDPBackend, SDPA_BACKENDS[n])]


def build_cases(cfg: OpsConfig) -> tuple[list[OpCase], list[str]]:
    """Every case of the run, and the reasons for those left out."""
    from llmdissect.dtypes import dtype_bytes, torch_dtype
    from llmdissect.micro import ops_cases as oc
    from llmdissect.micro.ops_quant import quant_cases
    from llmdissect.specs.models import get_model

    spec = get_model(cfg.model)
    T, e = cfg.tokens, dtype_bytes(cfg.dtype)
    seed = [cfg.seed]

    def maker() -> oc.Maker:
        seed[0] += 1  # each case its own fixed stream
        return oc.Maker(cfg.device, torch_dtype(cfg.dtype), seed[0])

    h, f, qd, kvd, V = spec.hidden_size, spec.intermediate_size, spec.q_dim, spec.kv_dim, spec.vocab_size
    passes = ["fwd", "bwd"] if cfg.passes == "both" else [cfg.passes]
    seqs = cfg.seqs or default_seqs(T, spec.max_position_embeddings)
    cases: list[OpCase] = []
    for p in passes:
        cases += oc.elementwise_cases(maker, spec, T, e, p, max(seqs))
        for name, k, n in (("q_proj", h, qd), ("k_proj", h, kvd), ("v_proj", h, kvd), ("o_proj", qd, h),
                           ("gate_proj", h, f), ("up_proj", h, f), ("down_proj", f, h), ("lm_head", h, V)):
            cases.append(oc.linear_case(maker, name, T, k, n, e, p))
        if spec.is_moe:
            cases += oc.moe_cases(maker, spec, T, e, p)
        for s in seqs:
            for backend in ["eager", *sdpa_backends(cfg.device)]:
                cases.append(oc.attention_case(maker, spec, max(1, T // s), s, e, p, backend))
    for t in elementwise_tokens(T):
        if t != T or "fwd" not in passes:
            cases += oc.layer_elementwise_cases(maker, spec, t, e)
    if "bwd" in passes:
        cases.append(oc.adamw_case(maker, spec))
    skipped: list[str] = []
    if cfg.quant:
        qcases, skipped = quant_cases(maker, spec, T, e, cfg.dtype, cfg.device)
        cases += qcases
    for c in cases:
        c.dtype = c.dtype or cfg.dtype
    return cases, skipped


def bandwidth_ceiling(nbytes: float, points: list[tuple[float, float]], dram: float) -> float:
    """The fastest rate among (bytes moved, bytes/s) points of at least `nbytes`, or DRAM's."""
    return max([bw for moved, bw in points if moved >= nbytes] + [dram])


def raw_row(case: OpCase, stats: Any) -> dict[str, Any]:
    """A row's measured part: time Stats, FLOPs, bytes and the rates."""
    t = stats.median
    return {"op": case.op, "shape": case.shape, "dtype": case.dtype, "pass": case.passes, "class": case.cls,
            mn.TIME_S: stats.to_dict(), mn.FLOPS: case.cost.flops, mn.BYTES: case.cost.bytes,
            mn.INTENSITY: case.cost.intensity, mn.FLOPS_PER_S: case.cost.flops / t, mn.BYTES_PER_S: case.cost.bytes / t,
            **({"rows_per_expert": case.rows_per_expert} if case.rows_per_expert else {}),
            **({"tokens": case.tokens} if case.tokens else {}), **({"seq": case.seq} if case.seq else {})}


def place_rows(rows: list[dict[str, Any]], peaks: dict[str, float], ladder: list[tuple[float, float]],
               dram: float) -> list[str]:
    """Add each row's ceilings and `peak_fraction` (docs/metrics.md: the larger of
    flops_per_s / peak and bytes_per_s / bandwidth). A ceiling is the measured one, raised to
    any rate a row of this run reached beyond it (FLOP/s per dtype; bytes/s at the same or a
    larger working set), so no fraction exceeds 1. Returns what was raised, for the record."""
    raised = []
    top: dict[str, float] = {}
    for r in rows:
        top[r["dtype"]] = max(top.get(r["dtype"], 0.0), r[mn.FLOPS_PER_S])
    points = ladder + [(r[mn.BYTES], r[mn.BYTES_PER_S]) for r in rows]
    for r in rows:
        measured_peak = peaks[r["dtype"]]
        peak = max(measured_peak, top[r["dtype"]])
        bw_measured = bandwidth_ceiling(r[mn.BYTES], ladder, dram)
        bw = bandwidth_ceiling(r[mn.BYTES], points, dram)
        if r[mn.FLOPS_PER_S] > measured_peak:
            raised.append(f"{r['op']} {r['pass']}: {r[mn.FLOPS_PER_S]:.4g} FLOP/s above the measured peak")
        if r[mn.BYTES_PER_S] > bw_measured:
            raised.append(f"{r['op']} {r['pass']}: {r[mn.BYTES_PER_S]:.4g} B/s above the measured copy rate")
        r.update(peak_flops_per_s=peak, bandwidth_ceiling_bytes_per_s=bw,
                 peak_fraction=max(r[mn.FLOPS_PER_S] / peak, r[mn.BYTES_PER_S] / bw),
                 bound="compute" if r[mn.INTENSITY] >= peak / bw else "memory")
    return raised


def _clamp(x: float) -> float:
    return min(1.0, max(1e-6, x))


LAUNCH_BOUND_FACTOR = 10
"""On an asynchronous device a timed loop of one operator runs at the slower of the host's
launch rate and its kernels: a row under this many times the per-operator fixed cost
(`op_fixed_s`, measured by peak; a backward or an eager norm launches several kernels) was
timed at its launch rate and says nothing of the kernels' bandwidth or FLOP rate, so it is
left out of the class efficiencies. (On an H200, every row of a 1.1 B model's layer at 512
tokens was: attention at "1.4 %" and element-wise at "7.7 %" of the ceilings.)"""


def kernel_rows(rows: list[dict[str, Any]], ceil: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows whose time is the kernel's own (all of them on a CPU, whose operators run in
    the calling thread and pay the fixed cost apart: perfmodel adds it on its own)."""
    fixed = ceil.get("op_fixed_s") or 0.0
    if not ceil.get("asynchronous") or fixed <= 0:
        return rows
    return [r for r in rows if r[mn.TIME_S]["median"] >= LAUNCH_BOUND_FACTOR * fixed]


def _by_size(rows: list[dict[str, Any]], key: str, work: str, ceiling: float) -> list[list[float]]:
    """[size, efficiency] per distinct `key` among rows (their `work` over their time, against
    `ceiling`, time-weighted), ascending; [] unless at least two sizes were measured."""
    groups: dict[float, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r[key], []).append(r)
    if len(groups) < 2:
        return []
    return sorted([float(size), _clamp(sum(r[work] for r in g) / sum(r[mn.TIME_S]["median"] for r in g) / ceiling)]
                  for size, g in groups.items())


def efficiencies(rows: list[dict[str, Any]], ceil: dict[str, Any], tokens: int | None = None) -> dict[str, Any]:
    """Per roofline class against the measured ceilings, time-weighted (total work / total
    time / ceiling), as perfmodel reads them (`gemm`, `attention`, `memory`, fractions in (0, 1]);
    plus forward GEMMs by size (`gemm_by_flops`), a MoE model's forward grouped expert GEMMs
    by the rows each expert got (`experts_by_rows`), the fused attention's forward and
    backward by sequence length (`attention_by_seq`, `attention_bwd_by_seq`) and a layer's
    element-wise operators' forward by token count (`memory_by_tokens`). On a GPU only rows
    that were not launch-bound count (kernel_rows); a class with none is left to the defaults.

    attention: per shape and pass the fastest fused (sdpa) backend, what dispatch would pick.
    memory: forward element-wise bytes at the run's `tokens` against the DRAM bandwidth
    (capped at 1 where they ran from cache).
    """
    dram, peaks = ceil["memory_bandwidth_bytes_per_s"], ceil["peak_flops_per_s"]
    kept = kernel_rows(rows, ceil)
    out: dict[str, Any] = {}
    gemm = [r for r in kept if r["class"] == "gemm"]
    if gemm:
        out["gemm"] = _clamp(sum(r[mn.FLOPS] for r in gemm) / sum(r[mn.TIME_S]["median"] for r in gemm)
                             / peaks[gemm[0]["dtype"]])
        # the curve by size from forward GEMMs only: the estimator prices a backward as twice
        # its forward, and a backward row's two matmuls at one size would blur the curve
        fwd = [r for r in gemm if r.get("pass") == "fwd"] or gemm
        out["gemm_by_flops"] = sorted([r[mn.FLOPS], _clamp(r[mn.FLOPS_PER_S] / peaks[r["dtype"]])] for r in fwd)
    experts = [r for r in kept if r["class"] == "experts" and r.get("pass") == "fwd"]
    if experts:  # a MoE model's grouped expert GEMMs, by the tokens each expert got
        out["experts_by_rows"] = sorted([r["rows_per_expert"], _clamp(r[mn.FLOPS_PER_S] / peaks[r["dtype"]])]
                                        for r in experts)
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        if r["class"] == "attention" and not r["op"].endswith("eager"):
            key = (r["shape"], r["pass"])
            if key not in best or r[mn.TIME_S]["median"] < best[key][mn.TIME_S]["median"]:
                best[key] = r
    att = [r for r in best.values() if r in kept]  # the backend dispatch picks, where not launch-bound
    if att:
        out["attention"] = _clamp(sum(r[mn.FLOPS] for r in att) / sum(r[mn.TIME_S]["median"] for r in att)
                                  / peaks[att[0]["dtype"]])
        for key, passes in (("attention_by_seq", "fwd"), ("attention_bwd_by_seq", "bwd")):
            by_seq = _by_size([r for r in att if r.get("pass") == passes and r.get("seq")], "seq", mn.FLOPS,
                              peaks[att[0]["dtype"]])
            if by_seq:
                out[key] = by_seq
    # forward rows only, as for the GEMM curve: a CPU's element-wise backward rows also pay
    # autograd's fresh gradient buffers (embedding's is the whole table, zero-filled), whose
    # cost follows the allocator's state: their rate moved 0.24 -> 0.55 of the copy rate
    # between two quick runs on one machine while the forward rows' held 0.38 -> 0.40
    mem = [r for r in kept if r["class"] == "memory"]
    by_tokens = _by_size([r for r in mem if r.get("pass") == "fwd" and r.get("tokens")], "tokens", mn.BYTES, dram)
    if by_tokens:
        out["memory_by_tokens"] = by_tokens
    mem = [r for r in mem if tokens is None or r.get("tokens") in (None, tokens)]  # the curve's other sizes apart
    mem = [r for r in mem if r.get("pass") == "fwd"] or mem
    if mem:
        out["memory"] = _clamp(sum(r[mn.BYTES] for r in mem) / sum(r[mn.TIME_S]["median"] for r in mem) / dram)
    return out


def ceilings(cfg: OpsConfig, profile: dict[str, Any]) -> dict[str, Any]:
    """The peak FLOP/s of the dtype and the bandwidths: from the profile, else measured now."""
    import torch

    from llmdissect.micro import peak as pk

    dev = cfg.device
    name = "cpu" if dev == "cpu" else torch.cuda.get_device_name(dev)
    section = profile.get("cpu", {}) if dev == "cpu" else profile.get("gpus", {}).get(name, {})
    stored = section.get("peak_flops_per_s") or {}
    peaks = {d: stored[d] for d in {cfg.dtype, "fp32"} if stored.get(d)}
    dram = section.get("memory_bandwidth_bytes_per_s")
    source = "calibration profile (llmdissect peak)"
    if len(peaks) < len({cfg.dtype, "fp32"}) or not dram:
        source = "measured now, quickly (run `llmdissect peak` for the stored, longer measurement)"
        for d in {cfg.dtype, "fp32"} - set(peaks):
            sizes = {d: ((1024,) if d == "fp32" else (256,)) if dev == "cpu" else (4096,)}
            peaks[d] = max(r[mn.FLOPS_PER_S] for r in pk.matmul_rows(dev, sizes, 0.3))
        dram = dram or pk.copy_row(dev, (pk.COPY_BYTES_QUICK["cpu" if dev == "cpu" else "cuda"]), 0.3)[mn.BYTES_PER_S]
    ladder = [(float(r[mn.BYTES]), r[mn.BYTES_PER_S]) for r in (pk.copy_row(dev, n, 0.05) for n in LADDER_BYTES)]
    if section.get("threads") and section["threads"] != torch.get_num_threads() and dev == "cpu":
        source += f"; measured with {section['threads']} threads, these operators with {torch.get_num_threads()}"
    return {"device_name": name, "peak_flops_per_s": {k: float(v) for k, v in peaks.items()},
            "memory_bandwidth_bytes_per_s": float(dram), "asynchronous": dev != "cpu",
            "op_fixed_s": section.get("op_fixed_s"),
            "source": source, "cache_ladder": [{mn.BYTES: b, mn.BYTES_PER_S: bw} for b, bw in ladder]}


def run(config: dict[str, Any]) -> dict[str, Any]:
    """Child entry: the rows of every case."""
    import torch

    from llmdissect.calibration_profile import load_profile
    from llmdissect.measure import LoopPolicy, Timer, measure_loop
    from llmdissect.measure.env import capture_device_env
    from llmdissect.progress import report

    cfg = OpsConfig(**{k: v for k, v in config.items() if k in OpsConfig.model_fields})
    torch.manual_seed(cfg.seed)
    cases, skipped = build_cases(cfg)
    report(config, 0, len(cases) + 1, "ceilings")
    ceil = ceilings(cfg, load_profile())
    ladder = [(c[mn.BYTES], c[mn.BYTES_PER_S]) for c in ceil["cache_ladder"]]
    sync = (lambda: torch.cuda.synchronize()) if cfg.device.startswith("cuda") else None
    policy = LoopPolicy(warmup=2, min_iters=5, min_time_s=cfg.min_time_s)
    rows = []
    for i, case in enumerate(cases):
        report(config, i + 1, len(cases) + 1, f"{case.op} {case.passes}")
        try:
            fn = case.make()
        except Exception as exc:  # a backend or library that cannot run these inputs here
            skipped.append(f"{case.op} {case.passes} {case.shape}: {type(exc).__name__}: {str(exc)[:160]}")
            continue
        stats = measure_loop(fn, policy, Timer(cfg.device, sync)).stats
        rows.append(raw_row(case, stats))
        del fn
    ceil["raised"] = place_rows(rows, ceil["peak_flops_per_s"], ladder, ceil["memory_bandwidth_bytes_per_s"])
    return {"metrics": {"rows": rows, "ceilings": ceil, "skipped": skipped,
                        "efficiency": efficiencies(rows, ceil, cfg.tokens)}, "env": capture_device_env()}
