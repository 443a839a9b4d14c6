"""The report in a real browser: headless Chromium (Debian's package) driven over the DevTools
protocol (aiohttp's websocket client, a project dependency).

The store holds records of every kind: real runs where they are cheap (debug-llama
pre-training with and without full recompute, two debug-llama inference points, a 2-process
gloo all-reduce sweep, analytical estimates) and, for what would take minutes here (serving
against a server, operators, dissect, a failed run), the RunRecord objects of
test_report_render.py with the documented metric names. One record's model name is
`<script>alert(1)</script>`: it must show as text and run nothing.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from test_report_render import PLOTS, SECTIONS, XSS, synthetic_records

from conftest import run_cli
from llmdissect.results import open_store

pytestmark = pytest.mark.slow

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--remote-debugging-port=0", "--window-size=1280,900"]
SCREENSHOT = (Path(os.environ.get("LLMDISSECT_REPORT_SCREENSHOT", ""))
              if os.environ.get("LLMDISSECT_REPORT_SCREENSHOT") else None)


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path:
        return path
    if os.environ.get("CI"):
        pytest.fail("chromium is missing in CI: .ci/run must install it (apt-get install chromium)")
    pytest.skip("chromium is not installed (apt-get install chromium); the report's browser check needs it")


async def _drive(ws_url: str, page_url: str, shot: Path) -> dict:
    """Load the page; collect console messages, exceptions, dialogs; query the DOM; screenshot."""
    import aiohttp

    events: list[dict] = []
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url, max_msg_size=0) as ws:
        counter = 0

        async def call(method: str, **params):
            nonlocal counter
            counter += 1
            await ws.send_json({"id": counter, "method": method, "params": params})
            while True:
                msg = json.loads((await ws.receive(timeout=60)).data)
                if msg.get("id") == counter:
                    if "error" in msg:
                        raise RuntimeError(f"{method}: {msg['error']}")
                    return msg.get("result", {})
                events.append(msg)

        for domain in ("Page", "Runtime", "Log"):
            await call(f"{domain}.enable")
        await call("Page.navigate", url=page_url)
        deadline = time.monotonic() + 60
        while not any(e.get("method") == "Page.loadEventFired" for e in events) and time.monotonic() < deadline:
            events.append(json.loads((await ws.receive(timeout=60)).data))
        await asyncio.sleep(0.5)  # late console messages
        dom = await call("Runtime.evaluate", returnByValue=True, expression="""({
            sections: [...document.querySelectorAll('section[data-section]')].map(s => s.dataset.section),
            plots: [...document.querySelectorAll('figure[data-plot] svg')].map(s => s.closest('figure').dataset.plot),
            scripts: document.querySelectorAll('script').length,
            handlers: [...document.querySelectorAll('*')]
                .filter(e => [...e.attributes].some(a => a.name.startsWith('on'))).length,
            text: document.body.innerText,
            height: document.documentElement.scrollHeight,
            alerted: window.__alerted === true})""")
        metrics = await call("Page.getLayoutMetrics")
        size = metrics["cssContentSize"]
        png = await call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                         clip={"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 6000), "scale": 1})
        import base64

        shot.write_bytes(base64.b64decode(png["data"]))
    return {"dom": dom["result"]["value"], "events": events}


def open_in_chromium(html: Path, shot: Path, tmp: Path) -> dict:
    profile = tmp / "chromium-profile"
    proc = subprocess.Popen([chromium(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            assert proc.poll() is None and time.monotonic() < deadline, "chromium did not start"
            time.sleep(0.2)
        port = port_file.read_text().split()[0]
        import urllib.request

        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30).read())
        page = next(t for t in targets if t.get("type") == "page")
        return asyncio.run(_drive(page["webSocketDebuggerUrl"], html.resolve().as_uri(), shot))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def real_records(db: Path) -> None:
    """Fast real runs on debug-llama (a few seconds each) into `db`, suite 'mixed'."""
    common = ["--db", str(db), "--model", "debug-llama"]
    for extra in ([], ["--recompute", "full"]):
        run_cli("bench", "pretrain", *common, "--steps", "3", "--warmup", "1", "--micro-batch", "2", "--seq", "32",
                *extra, check=True, timeout=240)
    run_cli("bench", "infer", *common, "--batch", "1,2", "--input-len", "16", "--output-len", "4", "--repeats", "3",
            check=True, timeout=240)
    run_cli("bench", "comm", "--db", str(db), "--ops", "all_reduce", "--nproc", "2", "--backend", "gloo",
            "--min-bytes", "1K", "--max-bytes", "16K", "--iters", "4", "--warmup", "1", check=True, timeout=240)
    run_cli("estimate", "pretrain", *common, "--hardware", "cpu", "--seq", "32", "--micro-batch", "2", "--store",
            check=True, timeout=120)
    run_cli("estimate", "infer", *common, "--hardware", "cpu", "--batch", "1", "--input-len", "16",
            "--output-len", "4", "--store", check=True, timeout=120)


def test_report_in_headless_chromium(tmp_path: Path) -> None:
    chromium()  # skip (or fail in CI) before spending time on runs
    db = tmp_path / "mixed.db"
    real_records(db)
    with open_store(db) as store:
        kinds_real = {r.kind for r in store.query()}
        for r in synthetic_records():
            if r.kind in ("serve", "ops") or r.status != "ok" or r.config.get("model") == XSS:
                store.add(r)
    assert {"pretrain", "infer", "comm", "estimate"} <= kinds_real
    out = tmp_path / "report"
    proc = run_cli("report", "--db", str(db), "--out", str(out), check=True, timeout=240)
    assert str(out / "report.html") in proc.stdout
    shot = SCREENSHOT or tmp_path / "report.png"
    seen = open_in_chromium(out / "report.html", shot, tmp_path)
    dom, events = seen["dom"], seen["events"]

    bad = [e for e in events if e.get("method") in ("Runtime.exceptionThrown", "Page.javascriptDialogOpening")
           or (e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") in ("error", "warning"))
           or (e.get("method") == "Log.entryAdded" and e["params"]["entry"].get("level") in ("error", "warning"))]
    assert not bad, bad
    assert set(SECTIONS) <= set(dom["sections"]), dom["sections"]
    expected_plots = set(PLOTS) | {"comm-busbw-0"}
    assert expected_plots <= set(dom["plots"]), sorted(set(PLOTS) - set(dom["plots"]))
    assert dom["scripts"] == 0 and dom["handlers"] == 0 and not dom["alerted"]
    assert XSS in dom["text"]  # shown as text, escaped in the markup
    assert shot.stat().st_size > 50_000 and dom["height"] > 2000
