"""Reports rendered from a store of RunRecord objects (no runs: fast).

The records here are built by hand but carry exactly the config keys and metric names of
docs/metrics.md (Stats with samples, comm rows, ops rows, serve percentiles), so every
section has its data; the browser test (test_report_browser.py) adds real runs.
"""
from __future__ import annotations

import random
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import assert_user_error, run_cli
from llmdissect.measure.stats import Stats
from llmdissect.results import open_store
from llmdissect.results.schema import RunRecord

XSS = "<script>alert(1)</script>"
ENV = {"cpu_model": "Test CPU", "cpu_cores": 2, "memory_bytes": 8 * 2**30, "gpus": [], "python": "3.11",
       "libraries": {"torch": "2.x"}, "git_revision": "abc"}
SECTIONS = ["environment", "ablations", "breakdown", "operators", "collectives", "inference", "serving", "estimates",
            "failures"]
PLOTS = ["ablation-throughput-0", "ablation-memory-0", "breakdown-phases", "breakdown-modules", "roofline-0",
         "comm-busbw-0", "infer-ttft", "infer-tpot", "infer-throughput", "serve-latency-0", "serve-goodput-0",
         "estimate-vs-measured"]


def stats(center: float, n: int = 6, spread: float = 0.03, seed: int = 0) -> dict:
    rng = random.Random(seed)
    return Stats.of([center * (1 + rng.uniform(-spread, spread)) for _ in range(n)]).to_dict()


def train(model: str = "tiny-llama", step: float = 1.0, mem: float = 4e8, seed: int = 0, **cfg) -> RunRecord:
    config = {"model": model, "hardware": "cpu", "engine": "single", "nproc": 1, "zero": 0, "offload": "none",
              "recompute": "none", "attn": "sdpa", "dtype": "fp32", "optimizer": "adamw", "micro_batch": 2, "seq": 128,
              "grad_accum": 1, "tp": 1, "pp": 1, "method": "full", "quant": "none", **cfg}
    m = {"step_time_s": stats(step, seed=seed), "forward_s": stats(step * 0.3, seed=seed + 1),
         "backward_s": stats(step * 0.6, seed=seed + 2), "optimizer_s": stats(step * 0.08, seed=seed + 3),
         "tokens_per_step": 256, "tokens_per_s": 256 / step, "peak_memory_bytes": mem, "peak_rss_bytes": mem * 2,
         "world_size": config["nproc"], "mfu": None}
    return RunRecord(kind=cfg.pop("kind", "pretrain"), config=config, env=ENV, metrics=m)


def synthetic_records() -> list[RunRecord]:
    recs = [train(), train(step=1.3, mem=2.5e8, seed=10, recompute="full"), train(model=XSS, step=0.9, seed=20)]
    for b in (1, 4):
        for length in (32, 128):
            recs.append(RunRecord(kind="infer", env=ENV, config={
                "model": "tiny-llama", "hardware": "cpu", "batch": b, "input_len": length, "output_len": 16,
                "dtype": "fp32", "attn": "sdpa", "cache": "dynamic", "quant": "none", "compile": False},
                metrics={"ttft_s": stats(0.002 * b * length, seed=b), "tpot_s": stats(0.02 + 0.005 * b, seed=length),
                         "decode_tokens_per_s": stats(b / (0.02 + 0.005 * b)), "prefill_tokens_per_s": stats(500.0),
                         "weights_bytes": 6e7}))
    for rate, tput, ttft in ((2.0, 1.9, 0.2), (8.0, 4.0, 0.6), ("inf", 4.2, 1.5)):
        recs.append(RunRecord(kind="serve", env=ENV, config={"model": "tiny-llama", "request_rate": rate},
                              metrics={"completed": 12, "request_throughput_per_s": tput,
                                       "output_tokens_per_s": 24 * tput,
                                       "ttft_s": stats(ttft, spread=0.5), "tpot_s": stats(0.05),
                                       "e2e_latency_s": stats(ttft + 1.2, spread=0.3), "goodput_per_s": tput / 2}))
    sizes = [2**k for k in range(10, 21, 2)]
    rows = [{"op": op, "placement": "out-of-place", "size_bytes": s, "count": s // 4, "wrong": 0,
             "time_s": 1e-4 + s / f, "algbw_bytes_per_s": s / (1e-4 + s / f),
             "busbw_bytes_per_s": s / (1e-4 + s / f) * k} for op, f, k in (("all_reduce", 2e9, 1.0),
                                                                            ("all_gather", 3e9, 0.5)) for s in sizes]
    recs.append(RunRecord(kind="comm", env=ENV, config={"backend": "gloo", "nproc": 2, "ops": "all_reduce,all_gather"},
                          metrics={"rows": rows, "avg_busbw_bytes_per_s": 1e9,
                                   "fits": {"all_reduce": {"alpha_s": 1e-4, "beta_s_per_byte": 5e-10,
                                                           "fit_error": 0.05}}}))
    recs.append(RunRecord(kind="ops", env=ENV, config={"what": "peak", "hardware": "cpu"}, metrics={"devices": {
        "cpu": {"peak_flops_per_s": {"fp32": 6e10}, "memory_bandwidth_bytes_per_s": 1.6e10}}}))
    ops_rows = [{"op": op, "pass": "fwd", "shape": "[256, 512]", "dtype": "fp32", "class": cls, "time_s": stats(t),
                 "flops": fl, "bytes": by, "intensity": fl / by, "flops_per_s": fl / t, "bytes_per_s": by / t,
                 "peak_fraction": min(1.0, max(fl / t / 6e10, by / t / 1.6e10))}
                for op, cls, fl, by, t in (("qkv_proj", "gemm", 4e8, 4e6, 0.01),
                                           ("rmsnorm", "memory", 1e6, 1e6, 2e-4),
                                           ("silu_mul", "memory", 5e5, 3e6, 3e-4),
                                           ("attention", "attention", 1e8, 2e6, 5e-3))]
    recs.append(RunRecord(kind="ops", env=ENV, config={"model": "tiny-llama", "what": "ops", "tokens": 256},
                          metrics={"rows": ops_rows, "ceilings": {"peak_flops_per_s": {"fp32": 6e10},
                                                                  "memory_bandwidth_bytes_per_s": 1.6e10}}))
    recs.append(RunRecord(kind="ops", env=ENV,
                          config={"model": "tiny-llama", "what": "dissect", "workload": "pretrain"},
                          metrics={"phases_s": {"forward": 0.3, "backward": 0.6, "optimizer": 0.1,
                                                "communication": 0.0},
                                   "modules_s": {"attention core": 0.3, "MLP": 0.5, "norms": 0.05, "output head": 0.15},
                                   "top_ops": [{"op": "aten::mm", "self_s": 0.4, "calls": 129, "share": 0.4}],
                                   "profiling_overhead": 0.2}))
    est = dict(recs[0].config, kind_estimated="pretrain")
    recs.append(RunRecord(kind="estimate", source="estimated", env=ENV, config=est, metrics={
        "tokens_per_s": 300.0, "time": {"step_s": 0.85}, "memory": {"total_bytes": 3.5e8}, "mfu": 0.5, "fits": True}))
    recs.append(RunRecord(kind="pretrain", status="failed", env=ENV, config={"model": "tiny-llama"},
                          error='<img src=x onerror="alert(2)"> out of memory'))
    return recs


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("report") / "r.db"
    with open_store(db) as s:
        for r in synthetic_records():
            r.suite = "demo"
            s.add(r)
    return db


@pytest.fixture(scope="module")
def report_dir(store: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("out")
    run_cli("report", "--db", str(store), "--suite", "demo", "--out", str(out), check=True, timeout=240)
    return out


def test_every_section_and_plot_present(report_dir: Path) -> None:
    html = (report_dir / "report.html").read_text()
    for s in SECTIONS:
        assert f'data-section="{s}"' in html, s
    for p in PLOTS:
        assert f'data-plot="{p}"' in html, p
        assert (report_dir / "plots" / f"{p}.svg").is_file(), p
    md = (report_dir / "report.md").read_text()
    assert md.count("![") == len(PLOTS)


def test_self_contained_and_escaped(report_dir: Path) -> None:
    html = (report_dir / "report.html").read_text()
    assert "<script" not in html.lower()
    assert not re.search(r"<[^>]*\bon[a-z]+\s*=", html), "an event-handler attribute in markup"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert not re.search(r'(?:src|href)\s*=\s*"(?:https?:)?//', html), "external reference"
    assert "&lt;img src=x" in html  # the failed run's error text, escaped
    assert "<script" not in (report_dir / "report.md").read_text()


def test_plots_have_title_labels_with_units_and_legend(report_dir: Path) -> None:
    for p in PLOTS:
        svg = (report_dir / "plots" / f"{p}.svg").read_text()
        root = ET.fromstring(svg)
        texts = {}
        for g in root.iter("{http://www.w3.org/2000/svg}g"):
            part = (g.get("id") or "").removeprefix(p + "-")
            if part in ("title", "xlabel", "ylabel", "legend"):
                texts[part] = " ".join(t.strip() for t in g.itertext() if t.strip())
        assert set(texts) == {"title", "xlabel", "ylabel", "legend"}, (p, texts)
        assert all(texts.values()), (p, texts)
        for axis in ("xlabel", "ylabel"):
            assert re.search(r"\(.+\)", texts[axis]), f"{p} {axis} has no unit: {texts[axis]!r}"


def test_findings_carry_numbers_from_the_data(report_dir: Path) -> None:
    md = (report_dir / "report.md").read_text()
    # recompute=full: step 1.0 -> 1.3 s (256 tokens/step), memory 4e8 -> 2.5e8 bytes
    assert "recompute=full cut throughput by 23 %" in md
    assert "cut peak memory by 38 %" in md
    assert "Backward is the largest part of the step" in md
    assert "4.2 requests/s" in md
    assert "Under the profiler, MLP 50 %, attention core 30 %, output head 15 % of the step" in md
    assert "step_time_s: the estimate is off by -15%" in md  # stored estimate 0.85 s against a ~1.0 s median


def test_bad_input_is_one_line(store: Path, tmp_path: Path) -> None:
    assert_user_error(run_cli("report", "--db", str(tmp_path / "missing.db"), "--out", str(tmp_path)), "not found")
    assert_user_error(run_cli("report", "--db", str(store), "--suite", "nope", "--out", str(tmp_path)), "no records")
    assert_user_error(run_cli("report", "--db", str(store), "--since", "yesterday", "--out", str(tmp_path)), "--since")
    assert_user_error(run_cli("report", "--db", str(store), "--suite", "demo", "--ids", "x", "--out", str(tmp_path)),
                      "at most one")


def test_ids_select_only_their_sections(store: Path, tmp_path: Path) -> None:
    with open_store(store) as s:
        serve_ids = [r.id[:10] for r in s.query(kind="serve")]
    run_cli("report", "--db", str(store), "--ids", ",".join(serve_ids), "--out", str(tmp_path), check=True)
    html = (tmp_path / "report.html").read_text()
    assert re.findall(r'data-section="([a-z]+)"', html) == ["environment", "serving"]
    assert "3 record(s)" in html
