"""Entry point: builds the typer app from the subcommand modules and maps errors to exit codes."""
from __future__ import annotations

import importlib
import os
import sys

import typer

from llmdissect.errors import EXIT_USER_ERROR, UserError

app = typer.Typer(name="llmdissect", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Measure, dissect and predict the runtime performance of LLM training, fine-tuning, "
                       "inference and serving.")
bench_app = typer.Typer(no_args_is_help=True, help="Measure a workload on this machine (one record per run).")
app.add_typer(bench_app, name="bench")

# Each module has `register(app, bench_app)`. Imports inside the commands stay lazy so
# that `--help` and the analytical commands start fast.
COMMAND_MODULES = [
    "llmdissect.cli.report_cmd",
    "llmdissect.cli.compare_cmd",
    "llmdissect.cli.specs_cmd",
    "llmdissect.cli.results_cmd",
    "llmdissect.cli.run_cmd",
    "llmdissect.cli.infer_cmd",
    "llmdissect.cli.comm_cmd",
    "llmdissect.cli.serve_cmd",
    "llmdissect.cli.train_cmd",
    "llmdissect.cli.estimate_cmd",
    "llmdissect.cli.advise_cmd",
    "llmdissect.cli.ops_cmd",
    "llmdissect.cli.peak_cmd",
    "llmdissect.cli.calibrate_cmd",
    "llmdissect.cli.dissect_cmd",
]
for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app, bench_app)


def run() -> None:
    """Console-script entry: user errors become one line on stderr and exit 2."""
    from typer._click import exceptions as cx  # the click that typer vendors

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        rc = app(standalone_mode=False)
    except cx.NoArgsIsHelpError as e:
        sys.stdout.write(e.ctx.get_help() + "\n")
        sys.exit(0)
    except cx.UsageError as e:  # bad option or argument: one line, not a usage box
        hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
        sys.stderr.write(f"error: {e.format_message()}{hint}\n")
        sys.exit(EXIT_USER_ERROR)
    except cx.ClickException as e:
        sys.stderr.write(f"error: {e.format_message()}\n")
        sys.exit(e.exit_code)
    except (getattr(cx, "Abort", KeyboardInterrupt), KeyboardInterrupt):
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except UserError as e:
        sys.stderr.write(f"error: {e}\n")
        sys.exit(EXIT_USER_ERROR)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    run()
