"""Quick-suite steps of the foundation: the environment and the specs."""
from __future__ import annotations

from llmdissect.suites.quick import QuickContext, QuickStep


def _environment(ctx: QuickContext) -> None:
    from llmdissect.measure.env import capture_env
    from llmdissect.specs.hardware import local_cpu

    env = capture_env()
    cpu = local_cpu()
    ctx.log(f"machine: {env['cpu_model']}, {env['cpu_cores']} cores, "
            f"{env['memory_bytes'] / 2**30:.1f} GiB; torch {env['libraries'].get('torch', 'missing')}; "
            f"gpus: {', '.join(g['name'] for g in env['gpus']) or 'none'}; "
            f"CPU peaks {'measured' if cpu.measured else 'not measured yet'}")


def _specs(ctx: QuickContext) -> None:
    from llmdissect.specs import list_hardware, list_models, list_platforms

    models, devices, platforms = list_models(), list_hardware(), list_platforms()
    ctx.log(f"specs: {len(models)} models, {len(devices)} devices, {len(platforms)} platforms load and validate")


def quick_steps() -> list[QuickStep]:
    return [QuickStep("environment", "machine, libraries, revision", _environment),
            QuickStep("specs", "model and hardware specs load", _specs)]
