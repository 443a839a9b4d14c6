"""perfmodel imports no torch: neither on import nor through a whole `estimate --json` run."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, sys, pkgutil, importlib, io, contextlib
    import llmdissect.perfmodel as pm
    for mod in pkgutil.iter_modules(pm.__path__):
        importlib.import_module("llmdissect.perfmodel." + mod.name)
    after_import = sorted(m for m in ("torch", "transformers") if m in sys.modules)
    from llmdissect.cli.main import app
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            app(["estimate", "pretrain", "--model", "llama2-70b", "--hardware", "8xa800", "--zero", "3",
                 "--json", "--db", sys.argv[1]], standalone_mode=False)
        except SystemExit:
            pass
    record = json.loads(out.getvalue())
    after_cli = sorted(m for m in ("torch", "transformers") if m in sys.modules)
    print(json.dumps({"after_import": after_import, "after_cli": after_cli, "source": record["source"]}))
""")


def test_perfmodel_and_estimate_import_no_torch(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "r.db")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["after_import"] == [], got
    assert got["after_cli"] == [], got
    assert got["source"] == "estimated"
