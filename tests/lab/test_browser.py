"""A real JupyterLab in headless Chromium: run the lab notebook, click, check the kernel.

Needs Debian's chromium (/usr/bin/chromium) and the playwright Python package; `.ci/run`
installs both. The screenshot is saved in the test's tmp dir (its path is printed).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

CHROMIUM = "/usr/bin/chromium"
NOTEBOOK = Path(__file__).with_name("browser_lab.ipynb")
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

pytestmark = [pytest.mark.browser, pytest.mark.slow]

_KERNEL_EXEC = """async (code) => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  const future = kernel.requestExecute({code});
  let out = '';
  future.onIOPub = (msg) => {
    if (msg.header.msg_type === 'stream') { out += msg.content.text; }
    if (msg.header.msg_type === 'error') { out += msg.content.ename + ': ' + msg.content.evalue; }
  };
  await future.done;
  return out;
}"""


_CUT_PLACEHOLDERS = """() => {
  const ctx = document.createElement('canvas').getContext('2d');
  return [...document.querySelectorAll('.cl-lab input[placeholder]')].filter((input) => {
    const style = getComputedStyle(input);
    ctx.font = style.font;
    const room = input.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    return input.placeholder && ctx.measureText(input.placeholder).width > room;
  }).map((input) => input.placeholder);
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def jupyter(tmp_path):
    """A throw-away JupyterLab on 127.0.0.1 serving a copy of the fixture notebook."""
    yield from _serve(tmp_path, [NOTEBOOK])


@pytest.fixture
def bundled(tmp_path):
    """A throw-away JupyterLab on 127.0.0.1 serving a copy of the bundled notebooks."""
    yield from _serve(tmp_path, sorted(NOTEBOOKS.glob("*.ipynb")))


def _serve(tmp_path: Path, notebooks: list[Path]) -> Iterator[str]:
    """Serve copies of ``notebooks`` with JupyterLab on 127.0.0.1; yields its address."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium), as .ci/run does")
    pytest.importorskip("playwright", reason="pip install playwright (no browser download needed)")
    root = tmp_path / "nb"
    root.mkdir()
    for notebook in notebooks:
        shutil.copy(notebook, root / notebook.name)
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)  # no news pop-up over the page
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", "--IdentityProvider.token=",
         "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True", f"--ServerApp.root_dir={root}",
         f"--LabApp.workspaces_dir={tempfile.mkdtemp(dir=tmp_path)}", "--LabApp.expose_app_in_browser=True",
         f"--LabApp.user_settings_dir={tmp_path / 'settings'}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "jupyter.log", "w"), cwd=root)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail(f"JupyterLab did not start; see {tmp_path / 'jupyter.log'}")
        yield url
    finally:
        server.terminate()  # (it shuts its kernels down first: on a loaded machine, one may still be starting)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_unticking_and_moving_a_pass_in_the_browser_changes_the_engine(jupyter, tmp_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, kernel = _open_lab(p, jupyter)
        before = json.loads(kernel("import json; "
                                   "print(json.dumps([type(a).__name__ for a in trainer.state.algorithms]))"))
        assert before == ["SelectiveBackprop", "LabelSmoothing"]

        page.click(".cl-algorithm-LabelSmoothing input[type=checkbox]")
        page.click(".cl-pass-up-sort_selective_backprop_first")
        page.wait_for_selector(".cl-pass-down-set_filo_order")  # the rows were rebuilt
        code = ("print(json.dumps({'algorithms': [type(a).__name__ for a in trainer.state.algorithms], "
                "'passes': [p.__name__ for p in trainer.engine.passes], "
                "'notes': list(trainer.trace.notes['text'])}))")
        for _ in range(50):  # the clicks reach the kernel as comm messages, shortly after
            after = json.loads(kernel(code))
            if len(after["notes"]) == 2:
                break
            time.sleep(0.1)
        assert after["algorithms"] == ["SelectiveBackprop"]
        assert after["passes"][:2] == ["sort_selective_backprop_first", "set_filo_order"]
        assert after["notes"][0] == "LabelSmoothing off"
        preview = page.inner_text(".cl-order-preview")
        assert "SelectiveBackprop" in preview and "LabelSmoothing" not in preview
        assert page.evaluate(_CUT_PLACEHOLDERS) == [], "every placeholder fits its field"
        lab, dropdown = (page.locator(s).bounding_box() for s in (".cl-lab", ".cl-preview-event"))
        assert dropdown["x"] + dropdown["width"] <= lab["x"] + lab["width"], "the event dropdown stays in the lab"
        shot = tmp_path / "lab.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")
        browser.close()
    assert shot.stat().st_size > 0


def _open_lab(p, url: str):
    """Chromium on the fixture notebook, every cell run, the lab shown; (browser, page, kernel)."""
    browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    page.goto(f"{url}/lab/tree/{NOTEBOOK.name}?reset")
    page.wait_for_function("() => window.jupyterapp?.shell?.currentWidget?.sessionContext?.session?.kernel"
                           "?.status === 'idle'", timeout=120_000)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    page.wait_for_selector(".cl-lab", timeout=120_000)
    return browser, page, lambda code: page.evaluate(_KERNEL_EXEC, code)


def _wait_text(page, selector: str, text: str, timeout: float = 60) -> str:
    """The selector's text once it contains ``text`` (fails after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = page.inner_text(selector)
        if text in shown:
            return shown
        time.sleep(0.2)
    pytest.fail(f"{selector} never showed {text!r}; it shows {page.inner_text(selector)!r}")


def _start(page, duration: str) -> None:
    page.fill(".cl-run-duration input", duration)
    page.click(".cl-run-start")


def test_the_run_panel_runs_stops_is_interrupted_continues_and_follows_a_cell_fit(jupyter, tmp_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, kernel = _open_lab(p, jupyter)
        kernel("import time\nfrom composer_lab import Callback\n"
               "class Slow(Callback):\n    def batch_end(self, state, logger): time.sleep(0.05)\n"
               "trainer.state.callbacks.append(Slow())")
        batch = "print(trainer.state.timestamp.batch)"

        _start(page, "400ba")  # run, then Stop
        _wait_text(page, ".cl-run-status", "training")
        while int(kernel(batch)) < 5:
            time.sleep(0.1)
        page.click(".cl-run-stop")
        status = _wait_text(page, ".cl-run-status", "stopped: ")
        stopped = int(kernel(batch))
        assert f"stopped: {stopped} batches trained (max_duration 400ba)" in status
        assert page.inner_text(".cl-run-label").strip() == f"{stopped} / 400 batches", "total: the run's length"

        _start(page, "400ba")  # run, then interrupt the kernel (JupyterLab's stop button)
        while int(kernel(batch)) < stopped + 5:
            time.sleep(0.1)
        page.evaluate("() => window.jupyterapp.commands.execute('kernelmenu:interrupt')")
        _wait_text(page, ".cl-run-status", "interrupted by the kernel: ")
        notes = json.loads(kernel("import json; print(json.dumps(list(trainer.trace.notes['kind'])))"))
        assert notes.count("interrupt") == 2 and notes[-1] == "interrupt"
        interrupted = int(kernel(batch))

        _start(page, "5ba")  # continue
        _wait_text(page, ".cl-run-status", f"done: {interrupted + 5} batches trained")
        kernel("trainer.fit('3ba')")  # a fit from a cell: the lab follows
        _wait_text(page, ".cl-run-status", f"done: {interrupted + 8} batches trained (a fit() outside the panel")
        length = int(kernel("print(trainer.state.max_duration.value)"))  # fits within the run keep its length
        assert page.inner_text(".cl-run-label").strip() == f"{interrupted + 8} / {length} batches"
        page.wait_for_selector(".cl-run-live-plot", state="visible")
        shot = tmp_path / "run_panel.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")
        browser.close()
    assert shot.stat().st_size > 0


_RECORDERS = """import json, threading, time
from composer_lab import Callback
ticks, held = [], []
class Tick(Callback):
    def batch_end(self, state, logger):
        ticks.append((time.time(), state.timestamp.batch))
        time.sleep(0.002)
trainer.state.callbacks.append(Tick())
lab.control.on_change(lambda kind: held.append((time.time(), trainer.state.timestamp.batch)))
"""


def test_a_toggle_during_a_run_holds_from_the_next_batch_and_a_refused_start_is_a_notice(jupyter, tmp_path):
    """The latency from the click to the batch the change holds from is measured and saved
    (toggle_latency.json in the test's tmp dir), not asserted: the machine may be loaded."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser, page, kernel = _open_lab(p, jupyter)
        kernel(_RECORDERS)
        _start(page, "100000ba")
        _wait_text(page, ".cl-run-status", "training for 100000ba")
        checkbox = ".cl-algorithm-LabelSmoothing input[type=checkbox]"
        clicks = []
        for _ in range(4):
            time.sleep(1.0)
            clicks.append(time.time())
            page.click(checkbox)
        for _ in range(100):
            state = json.loads(kernel("print(json.dumps({'held': held, 'ticks': ticks}))"))
            if len(state["held"]) == len(clicks):
                break
            time.sleep(0.1)
        page.click(".cl-run-stop")
        _wait_text(page, ".cl-run-status", "stopped: ")
        calls = json.loads(kernel(
            "inv = trainer.trace.invocations\n"
            "ls = inv[(inv['name'] == 'LabelSmoothing') & (inv['event'] == 'before_loss') & inv['matched']]\n"
            "print(json.dumps(sorted(set(int(b) for b in ls['batch']))))"))
        end = int(kernel("print(trainer.state.timestamp.batch)"))

        assert len(state["held"]) == len(clicks), "every click reached the engine while the run trained"
        latencies = []
        ticks = state["ticks"]
        for clicked, (held_at, batch) in zip(clicks, state["held"]):
            before = max((b for t, b in ticks if t <= clicked), default=0)
            latencies.append({"seconds": round(held_at - clicked, 3), "batches": batch - before})
        switches = [batch for _, batch in state["held"]]  # off, on, off, on: from these batches on
        trained = set(range(end))
        expected = {b for b in trained if b < switches[0] or switches[1] <= b < switches[2] or b >= switches[3]}
        assert set(calls) == expected, "each change holds exactly from the batch boundary it was noted at"
        (tmp_path / "toggle_latency.json").write_text(json.dumps(latencies, indent=1))
        print(f"toggle latency, click to the batch it holds from: {latencies}")

        kernel("worker = threading.Thread(target=trainer.fit, args=('300ba',), name='worker'); worker.start()")
        _wait_text(page, ".cl-run-status", "training in thread 'worker' (a fit() outside the panel)")
        _start(page, "")
        notice = _wait_text(page, ".cl-run-notice", "Start refused at")
        assert "is already training (fit started in thread 'worker'" in notice
        total = end + 300
        _wait_text(page, ".cl-run-status", f"done: {total} batches trained (a fit() outside the panel, in thread "
                                           f"'worker')")
        length = int(kernel("print(trainer.state.max_duration.value)"))  # a fit within the run keeps its length
        assert page.inner_text(".cl-run-label").strip() == f"{total} / {length} batches"
        assert page.is_enabled(".cl-run-start") and not page.is_enabled(".cl-run-stop")
        shot = tmp_path / "refused_start.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")
        browser.close()


_IMAGES = """() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedImage img')]
  .map((img) => [img.naturalWidth, img.naturalHeight])"""


def test_every_figure_of_the_bundled_notebooks_renders_and_is_saved_for_a_reader(bundled, tmp_path):
    """Each stored figure, as JupyterLab shows it, saved one file per figure (figures/ in the
    test's tmp dir) so a person can look at them all; none is empty or taller than wide by far."""
    import json as json_

    from playwright.sync_api import sync_playwright

    shots = tmp_path / "figures"
    shots.mkdir()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for notebook in sorted(NOTEBOOKS.glob("*.ipynb")):
            stored = sum("image/png" in o.get("data", {}) for c in json_.loads(notebook.read_text())["cells"]
                         for o in c.get("outputs", []))
            page.goto(f"{bundled}/lab/tree/{notebook.name}?reset")
            page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell", timeout=120_000)
            images = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedImage img")
            for i in range(stored):  # the notebook renders cells as they scroll into view
                images.nth(i).scroll_into_view_if_needed(timeout=60_000)
                images.nth(i).screenshot(path=str(shots / f"{notebook.stem}-{i}.png"))
            sizes = page.evaluate(_IMAGES)
            assert len(sizes) == stored, f"{notebook.name}: {len(sizes)} of {stored} figures shown"
            assert all(w > 0 and h < 3 * w for w, h in sizes), f"{notebook.name}: a figure is empty or a sliver"
        browser.close()
    print(f"figures: {shots}")
