"""`llmdissect models`, `llmdissect hardware`, `llmdissect env`: the specs and this machine."""
from __future__ import annotations

from typing import Optional

import typer

from llmdissect.cli.options import JsonOpt
from llmdissect.console import console, human_bytes, human_count, human_rate, print_json, table


def models(
    model: Optional[str] = typer.Argument(None, help="Show one model: a preset name, a config.json or a model folder."),
    json_out: bool = JsonOpt,
) -> None:
    """List the model presets with their parameter counts."""
    from llmdissect.specs.models import get_model, list_models

    specs = [get_model(model)] if model else list_models()
    if json_out:
        print_json([s.to_dict() for s in specs])
        return
    rows = [(s.name, s.model_type, human_count(s.params), human_count(s.params_active), human_count(s.params_matmul),
             human_count(s.params_embedding), s.hidden_size,
             s.expert_intermediate_size if s.is_moe else s.intermediate_size, s.num_layers,
             f"{s.num_heads}/{s.num_kv_heads}", _experts(s), s.vocab_size, s.max_position_embeddings) for s in specs]
    console.print(table("Models (params = all; active = those one token uses; matmul = N of the PaLM FLOP count, "
                        "active; embedding = input table; ffn = MLP width, a MoE's one expert; experts = routed "
                        "top-k/E + shared)",
                        ["model", "type", "params", "active", "matmul", "embedding", "hidden", "ffn", "layers",
                         "heads/kv", "experts", "vocab", "positions"], rows))


def _experts(s) -> str:
    if not s.is_moe:
        return "-"
    return f"{s.experts_per_token}/{s.num_experts}" + (f"+{s.num_shared_experts}" if s.num_shared_experts else "")


def hardware(json_out: bool = JsonOpt) -> None:
    """List the catalogued devices and platforms, and this machine's CPU."""
    from llmdissect.specs.hardware import list_hardware, list_platforms, local_cpu

    devices, platforms, cpu = list_hardware(), list_platforms(), local_cpu()
    if json_out:
        print_json({"devices": [d.to_dict() for d in devices], "platforms": [p.to_dict() for p in platforms],
                    "local_cpu": cpu.to_dict()})
        return
    rows = [(d.name, human_bytes(d.memory_bytes), human_rate(d.memory_bandwidth_bytes_per_s, "B/s"),
             human_rate(d.peak("fp32"), "FLOP/s"), human_rate(d.peak("bf16"), "FLOP/s"),
             human_rate(d.peak("fp8"), "FLOP/s"), d.link.kind if d.link else "-",
             human_rate(d.link.unidirectional_bytes_per_s, "B/s") if d.link else "-") for d in devices]
    console.print(table("Devices (dense peaks; link bandwidth per device, one direction)",
                        ["device", "memory", "bandwidth", "fp32", "bf16", "fp8", "link", "link bw"], rows))
    prow = [(p.name, p.num_devices, p.device.name, p.interconnect.kind if p.interconnect else "-",
             p.description) for p in platforms]
    console.print(table("Platforms", ["platform", "devices", "device", "interconnect", "description"], prow,
                        justify_numbers=False))
    peak = human_rate(cpu.peak("fp32"), "FLOP/s") if cpu.measured else "not measured (run `llmdissect peak`)"
    console.print(f"Local CPU: {cpu.description}, {human_bytes(cpu.memory_bytes)} memory; fp32 peak: {peak}")


def env(json_out: bool = JsonOpt) -> None:
    """Show the environment every record carries (versions, machine, revision)."""
    from llmdissect.measure.env import capture_env

    e = capture_env()
    if json_out:
        print_json(e)
        return
    rows = [(k, v) for k, v in e.items() if k not in ("libraries", "gpus")]
    rows += [(f"  {k}", v) for k, v in e["libraries"].items()]
    rows += [("gpus", ", ".join(g["name"] for g in e["gpus"]) or "none")]
    console.print(table("Environment", ["key", "value"], rows, justify_numbers=False))


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command()(models)
    app.command()(hardware)
    app.command()(env)
