"""The live experience, as a student gets it: JupyterLab in a real headless Chromium, driven by Playwright.

nbval and papermill have no frontend, so display updates, widgets and buttons are tested here only.
One JupyterLab server (127.0.0.1, a random token) serves copies of two notebooks written to build/browser/:

* notebook 05 on nbval's test parameters (tests/nbval_params.yaml, by papermill's parameter injection) plus one
  extra cell that watches a long job with ``await monitor.watch_async(...)``: Run All Cells from the menu; the
  live figure must change while the job runs, the final state must be shown, the extra cell's Cancel button is
  clicked and must end in CANCELLED; its ``# NBVAL_CHECK_OUTPUT`` cells are checked as nbval checks them, since
  ``make test`` leaves 05 to this test where it runs (tests/notebook_checks.py, ``BROWSER_NOTEBOOK``);
* the first cells of notebook 04, up to its LR-schedule sliders (its training sweeps are left to nbval):
  moving each slider must redraw the figure, and the slider labels must not be cut.

No error output, no console error, and a request without the token is refused. Every wait is for an event (a
cell's prompt, a job's state, a new image, the saved file) under one generous ceiling, never for a measured
duration. Screenshots for a person to look at go to build/browser/*.png. Needs Debian's ``chromium`` (apt-get
install chromium) and the ``playwright`` package (pip install -e '.[test]'; no browser download: it drives
/usr/bin/chromium). Skipped, naming what is missing, when they are absent, except in CI where ``.ci/run`` sets
TUTORIAL_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest
from notebook_checks import (
    BROWSER_NOTEBOOK,
    CHROMIUM,
    REQUIRE_BROWSER_ENV,
    browser_missing,
    check_marked_outputs,
    load_test_parameters,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT = REPO_ROOT / "build" / "browser"

# A ceiling for every wait below: each ends at its event (seconds on a quiet machine); reaching it is a failure.
CEILING_S = 600
KERNELS_SETTLED_S = 5  # a page is ready once the server's kernels have not changed for this long
RUN_ALL_LOST_S = 5  # the parameters cell ran and no other cell is queued for this long: Run All again
# nbval's small 05, its main job kept at 2 epochs of 8 steps: it must run through several redraws of the live
# figure (refresh 2 s) on a quiet machine too. Watched up to the ceiling.
PARAMS_05 = {**load_test_parameters()[BROWSER_NOTEBOOK], "max_steps_per_epoch": 8,
             "output_root": "build/browser/runs", "watch_timeout": CEILING_S}
CANCEL_CELL = """\
# Added by tests/test_browser.py: a long job watched with its Cancel button (the test clicks it).
import dataclasses
template = plan["05-cancel-me"]  # the notebook's own long job: same resources, another name
button_job = jobs.submit(dataclasses.replace(template.config, name="05-cancel-button"), nodes=template.nodes,
                         ranks_per_node=template.ranks_per_node, backend=chosen, fresh=True, **template.options)
button_table = await monitor.watch_async(button_job, timeout=watch_timeout)
print(f"watch_async ended: {button_job.name} {button_table.loc[0, 'state']}")"""
INTERRUPT_CELL = """\
# Added by tests/test_browser.py: a blocking watch that the test stops with Kernel > Interrupt, then cancels.
stuck_job = jobs.submit(dataclasses.replace(template.config, name="05-interrupt-me"), nodes=template.nodes,
                        ranks_per_node=template.ranks_per_node, backend=chosen, fresh=True, **template.options)
monitor.watch(stuck_job, timeout=watch_timeout)"""
# JupyterLab settings of a fresh user, minus what needs the internet or hides cells from the page.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
    # autoStartDefaultKernel: the notebook's own kernel starts without the "Select Kernel" dialog, which a loaded
    # machine opened at any moment and which took clicks meant for the menu (as if a student had ticked its
    # "Always start the preferred kernel")
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none",
                                                                    "autoStartDefaultKernel": True},
}

# In-page: per code cell, its input text, prompt, and outputs (image sources, text, buttons).
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"  # the notebook in the visible tab
CELLS_JS = f"""() => [...document.querySelectorAll('{NOTEBOOK} .jp-CodeCell')].map(cell => ({{
  input: cell.querySelector('.jp-InputArea-editor')?.innerText ?? '',
  prompt: cell.querySelector('.jp-InputArea-prompt')?.innerText ?? '',
  images: [...cell.querySelectorAll('.jp-OutputArea-output img')].map(img => img.src),
  text: cell.querySelector('.jp-OutputArea')?.innerText ?? '',
  buttons: [...cell.querySelectorAll('.jp-OutputArea button')].map(b => ({{text: b.innerText.trim(),
                                                                          disabled: b.disabled}})),
}}))"""


@pytest.fixture(scope="module")
def browser():
    missing = browser_missing()
    if missing:
        if os.environ.get(REQUIRE_BROWSER_ENV) == "1":
            pytest.fail(f"{REQUIRE_BROWSER_ENV}=1 but {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        chromium.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str, token: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except urllib.error.URLError:  # not listening (yet)
        return 0


def _kernel_ids(base: str, token: str) -> frozenset | None:
    """The ids of the kernels the server runs now (None when it does not answer)."""
    request = urllib.request.Request(f"{base}/api/kernels", headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return frozenset(kernel["id"] for kernel in json.loads(response.read()))
    except (urllib.error.URLError, OSError, ValueError):
        return None


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 at the repository root, with a token and a fresh user's settings."""
    home = tmp_path_factory.mktemp("lab")
    for name, values in LAB_SETTINGS.items():
        path = home / "settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    port, token = _free_port(), secrets.token_hex(24)
    # The kernels inherit this environment: nothing may say "batch run", as in a student's JupyterLab.
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PAPERMILL", "PYTEST_XDIST")) and key not in ("PYTEST_CURRENT_TEST",
                                                                                 "TUTORIAL_MONITOR_CONTROLS",
                                                                                 "MPLBACKEND")}
    env.update(PYTHONPATH=str(REPO_ROOT), JUPYTER_CONFIG_DIR=str(home / "config"),
               JUPYTERLAB_SETTINGS_DIR=str(home / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"))
    log = (home / "lab.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
                               f"--port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
                               f"--ServerApp.root_dir={REPO_ROOT}", "--LabApp.extension_manager=readonly"]
                              + (["--allow-root"] if os.geteuid() == 0 else []),  # CI runs as root
                              cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + CEILING_S
        while _get(f"{base}/api/status", token) != 200:
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not start: {(home / 'lab.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def _write_notebooks() -> dict[str, Path]:
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    if OUT.exists():
        shutil.rmtree(OUT)  # only this test writes here: screenshots, notebooks and runs of the last run
    OUT.mkdir(parents=True)
    nb05 = parameterize_notebook(load_notebook_node(str(REPO_ROOT / "notebooks" / f"{BROWSER_NOTEBOOK}.ipynb")),
                                 PARAMS_05)
    nb05.cells += [nbformat.v4.new_code_cell(CANCEL_CELL), nbformat.v4.new_code_cell(INTERRUPT_CELL)]
    paths = {"05": OUT / f"{BROWSER_NOTEBOOK}.ipynb", "04": OUT / "04_sliders.ipynb"}
    for key, nb in (("05", nb05), ("04", _sliders_notebook())):
        nbformat.write(nb, paths[key])
    return paths


def _sliders_notebook():
    """04 up to its lr_explorer cell, with no outputs (a saved copy's widget outputs name models of a kernel that
    is gone: "widget model not found" in the console on a rerun)."""
    nb04 = nbformat.read(REPO_ROOT / "notebooks" / "04_large_batches.ipynb", 4)
    end = next(i for i, cell in enumerate(nb04.cells) if "lr_explorer(" in cell.source)
    nb04.cells = nb04.cells[:end + 1]
    return nb04


class Page:
    """One notebook open in JupyterLab, with the console errors the page logged."""

    def __init__(self, browser, base: str, token: str, path: Path):
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.errors: list[str] = []
        self.page.on("console", lambda msg: self.errors.append(msg.text) if msg.type == "error" else None)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.path = path
        # The kernel first, through the REST API: JupyterLab then joins this session instead of racing to
        # start one (seen on a loaded machine: two kernels for one notebook, the cells' requests lost).
        request = urllib.request.Request(
            f"{base}/api/sessions", method="POST", headers={"Authorization": f"token {token}"},
            data=json.dumps({"path": str(path.relative_to(REPO_ROOT)), "type": "notebook", "name": path.name,
                             "kernel": {"name": "python3"}}).encode())
        urllib.request.urlopen(request, timeout=60).close()
        self.page.goto(f"{base}/lab/tree/{path.relative_to(REPO_ROOT)}?reset&token={token}")  # only this tab
        code_cells = sum(cell.cell_type == "code" for cell in nbformat.read(path, 4).cells)
        self.page.wait_for_function(  # every cell rendered, its code shown
            f"n => {{ const e = [...document.querySelectorAll('{NOTEBOOK} .jp-CodeCell .jp-InputArea-editor')];"
            " return e.length === n && e.every(x => x.innerText.trim()); }", arg=code_cells, timeout=CEILING_S * 1000)
        deadline, kernels, settled_at = time.monotonic() + CEILING_S, None, time.monotonic()
        # Idle, and the server's kernels unchanged for KERNELS_SETTLED_S: JupyterLab may still replace the
        # session's kernel after the page first shows idle (seen in CI: a second kernel started, the first shut
        # down 0.2 s after the page connected to it, and the cells Run All had sent to it were lost)
        while not (self.page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").count()
                   and time.monotonic() - settled_at >= KERNELS_SETTLED_S):
            # JupyterLab asks for a kernel when it cannot decide in time (slow kernelspecs): answer as a student
            # would, with the proposed one (the notebook's own, python3)
            self.accept_kernel_dialog()
            now = _kernel_ids(base, token)
            if now != kernels:
                kernels, settled_at = now, time.monotonic()
            if time.monotonic() > deadline:
                self.page.screenshot(path=str(OUT / f"{path.stem}_no_kernel.png"))
                pytest.fail(f"the kernel of {path.name} did not become idle in {CEILING_S} s")
            time.sleep(0.5)

    def accept_kernel_dialog(self) -> None:
        """Answer JupyterLab's "Select Kernel" dialog, if it is open, with the proposed kernel (as a student would)."""
        select = self.page.locator(".jp-Dialog .jp-mod-accept")
        if select.count() and "Select Kernel" in self.page.locator(".jp-Dialog").inner_text():
            select.click()

    def click_menu(self, menu: str, item: str) -> None:
        """Click ``menu`` > ``item`` in the menu bar. The "Select Kernel" dialog can open at any moment after the
        kernel went idle (seen on a loaded machine, between the check and the click): a click it intercepts is
        retried after answering it, until the ceiling."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        deadline = time.monotonic() + CEILING_S
        while True:
            self.accept_kernel_dialog()
            try:
                self.page.locator(".lm-MenuBar-itemLabel", has_text=menu).first.click(timeout=5000)
                self.page.locator(".lm-Menu-itemLabel", has_text=item).first.click(timeout=5000)
                return
            except PlaywrightTimeout:
                if time.monotonic() > deadline:
                    raise
                if not self.page.locator(".jp-Dialog").count():  # Escape would reject the dialog: answered above
                    self.page.keyboard.press("Escape")  # close a menu left open by a half-done click

    def run_all(self) -> None:
        """Run > Run All Cells, from the menu bar; returns once the first cell has started."""
        for _ in range(3):  # a click while the page is still settling can be lost: check, try again
            self.click_menu("Run", "Run All Cells")
            clicked_at, unqueued_since = time.monotonic(), None
            while time.monotonic() < clicked_at + CEILING_S:
                prompts = [cell["prompt"].strip() for cell in self.cells()]
                if prompts[0][1:-2].isdigit():  # the parameters cell: done at once when it runs
                    if len(prompts) == 1 or any(prompt not in ("[ ]:", "") for prompt in prompts[1:]):
                        return  # the others are queued ("[*]:") or ran
                    # the others' requests were lost (their kernel replaced under them): Run All again, as a
                    # student would; the parameters cell may run twice
                    unqueued_since = unqueued_since or time.monotonic()
                    if time.monotonic() - unqueued_since > RUN_ALL_LOST_S:
                        break
                elif all(prompt in ("[ ]:", "") for prompt in prompts) and time.monotonic() > clicked_at + 60:
                    break  # no cell queued ("[*]:", shown by the page itself, at once) a minute after the click
                time.sleep(0.5)
        pytest.fail("Run > Run All Cells did not start the notebook")

    @contextlib.contextmanager
    def screenshot_on_failure(self, name: str):
        """On a failure, save the whole page (what a person would have seen) before reporting it."""
        try:
            yield
        except BaseException:
            self.page.screenshot(path=str(OUT / name))
            raise

    def cells(self) -> list[dict]:
        return self.page.evaluate(CELLS_JS)

    def cell(self, marker: str) -> dict:
        cells = self.cells()
        found = [c for c in cells if marker in c["input"]]
        assert found, f"no cell with {marker!r} among {[c['input'][:60] for c in cells]}"
        return found[0]

    def locator(self, marker: str):
        return self.page.locator(f"{NOTEBOOK} .jp-CodeCell", has=self.page.locator(".jp-InputArea-editor",
                                                                                     has_text=marker))

    def last_output(self) -> str:
        """The output of the last cell that ran (the one that failed, when Run All stopped early)."""
        ran = [c for c in self.cells() if c["prompt"].strip()[1:-2].isdigit()]
        return ran[-1]["text"][-3000:] if ran else "(no cell ran)"

    def wait_all_done(self) -> list[dict]:
        deadline = time.monotonic() + CEILING_S
        while time.monotonic() < deadline:
            cells = self.cells()
            if all(c["prompt"].strip() not in ("[*]:", "[ ]:", "") for c in cells):
                return cells
            time.sleep(0.5)
        pytest.fail("cells still running: " + ", ".join(c["input"][:40] for c in self.cells()
                                                         if c["prompt"].strip() in ("[*]:", "[ ]:", "")))

    def save_and_read(self):
        """Save from the keyboard; return the notebook once the file on disk is the saved one."""
        before = self.path.stat().st_mtime_ns
        self.page.keyboard.press("Control+s")
        deadline = time.monotonic() + CEILING_S
        while time.monotonic() < deadline:
            if self.path.stat().st_mtime_ns != before:
                with contextlib.suppress(ValueError):  # caught while it is being written: read again
                    return nbformat.read(self.path, 4)
            time.sleep(0.2)
        pytest.fail(f"Control+S did not save {self.path.name}")

    def shoot(self, marker: str | None, name: str) -> Path:
        path = OUT / name
        if marker is None:
            self.page.screenshot(path=str(path))
            return path
        target = self.locator(marker).first
        target.scroll_into_view_if_needed()
        time.sleep(0.5)  # JupyterLab may still be scrolling to the running cell
        target.screenshot(path=str(path))
        return path


def _error_outputs(nb) -> list[str]:
    return [f"{output.ename}: {output.evalue}" for cell in nb.cells if cell.cell_type == "code"
            for output in cell.outputs if output.output_type == "error"]


def test_token_is_required(lab):
    base, token = lab
    assert _get(f"{base}/api/kernels", token) == 200
    assert _get(f"{base}/api/kernels") == 403
    assert _get(f"{base}/api/kernels", "not-the-token") == 403
    assert _get(f"{base}/api/contents/notebooks") == 403


def test_notebook_05_live_figure_and_cancel_button(browser, lab):
    base, token = lab
    paths = _write_notebooks()
    page = Page(browser, base, token, paths["05"])
    with page.screenshot_on_failure("05_failure.png"):
        page.run_all()
        watch, seen, mid_run = "monitor.watch(job, timeout", [], None
        clock = QueueClock(["05-multinode-preflight", "05-multinode"])
        while True:  # the live figure, while the watch cell runs
            clock.check("the watch cell still ran")
            cell = page.cell(watch)
            if cell["prompt"].strip() == "[ ]:":  # Run All queued it ([*]); back at [ ]: an earlier cell failed
                pytest.fail(f"the watch cell never ran: an earlier cell failed: {page.last_output()}")
            if cell["prompt"].strip() not in ("[*]:", ""):
                break
            if cell["images"] and (not seen or cell["images"][-1] != seen[-1]):
                seen.append(cell["images"][-1])
                # for a person: a frame of the running job, preferably with some but not all epochs done
                if len(seen) >= 3 and _job_state("05-multinode") == "RUNNING" and (
                        mid_run is None or 0 < _epochs_logged("05-multinode") < PARAMS_05["epochs"]):
                    mid_run = page.shoot(watch, "05_live_figure_mid_run.png")
            time.sleep(0.25)
        cell = page.cell(watch)
        assert len(seen) >= 3, f"the live figure changed {len(seen) - 1} time(s) while the job ran"
        assert mid_run is not None and len(cell["images"]) == 1  # one figure, updated in place
        assert "05-multinode" in cell["text"] and "COMPLETED" in cell["text"], cell["text"]  # the returned job table
        assert {"text": "05-multinode: COMPLETED", "disabled": True} in cell["buttons"], cell["buttons"]
        page.shoot(watch, "05_live_figure_final.png")

        button_cell, clicked = "watch_async(button_job", False
        clock = QueueClock(["05-cancel-me", "05-cancel-button"])
        while True:  # the Cancel button of watch_async, once the job really runs
            clock.check("the watch_async cell still ran")
            cell = page.cell(button_cell)
            if cell["prompt"].strip() not in ("[*]:", "[ ]:", ""):
                break
            button = page.locator(button_cell).get_by_role("button", name="Cancel 05-cancel-button")
            if not clicked and _job_state("05-cancel-button") == "RUNNING" and button.is_enabled():
                page.shoot(button_cell, "05_cancel_button_running.png")
                button.click()
                clicked = True
            time.sleep(0.5)
        assert clicked, "no enabled Cancel button while the job ran"
        _interrupt_then_cancel(page)
        cells = page.wait_all_done()
        cell = page.cell(button_cell)
        assert "watch_async ended: 05-cancel-button CANCELLED" in cell["text"], cell["text"]
        assert {"text": "05-cancel-button: CANCELLED", "disabled": True} in cell["buttons"], cell["buttons"]
        page.shoot(button_cell, "05_cancel_button_cancelled.png")
        page.shoot(None, "05_page_end.png")
        nb = page.save_and_read()
        assert not _error_outputs(nb)
        assert not check_marked_outputs(nb, f"{BROWSER_NOTEBOOK}.ipynb")  # nbval leaves this notebook to this test
        assert all(c["prompt"].strip().startswith("[") for c in cells)
        assert not page.errors, page.errors
        page.page.close()


def _interrupt_then_cancel(page: Page) -> None:
    """Kernel > Interrupt stops a blocking watch; its Cancel button then cancels the job and the output follows."""
    stuck, name = "monitor.watch(stuck_job", "05-interrupt-me"
    clock = QueueClock([name])
    while not (_job_state(name) == "RUNNING" and {"text": f"Cancel {name}", "disabled": True}
               in page.cell(stuck)["buttons"]):
        clock.check(f"{name} was not running and watched")
        time.sleep(0.5)
    page.click_menu("Kernel", "Interrupt Kernel")
    page.wait_all_done()
    cell = page.cell(stuck)
    assert f"watch: interrupted; still running: {name}" in cell["text"], cell["text"]
    assert _job_state(name) == "RUNNING"  # interrupting stops the watching, not the job
    before = cell["images"]
    page.locator(stuck).get_by_role("button", name=f"Cancel {name}").click()
    deadline = time.monotonic() + CEILING_S
    while time.monotonic() < deadline:
        cell = page.cell(stuck)
        if {"text": f"{name}: CANCELLED", "disabled": True} in cell["buttons"] and cell["images"] != before:
            break
        time.sleep(0.5)
    assert {"text": f"{name}: CANCELLED", "disabled": True} in cell["buttons"], cell["buttons"]  # not "cancelling"
    assert cell["images"] != before and len(cell["images"]) == 1  # the figure was redrawn after the click
    assert _job_state_once_final(name) == "CANCELLED" and f"cancel requested for {name}" in cell["text"]
    page.shoot(stuck, "05_interrupt_then_cancel.png")


class QueueClock:
    """The ceiling of a wait that includes the notebook's Slurm jobs: time they spend PENDING in the queue (what
    else the cluster runs decides it) is not counted, up to one more ceiling of it."""

    def __init__(self, names: list[str]):
        self.names, self.deadline, self.queued = names, time.monotonic() + CEILING_S, 0.0
        self.last = time.monotonic()

    def check(self, what: str) -> None:
        now = time.monotonic()
        if any(_job_state(name) == "PENDING" for name in self.names) and self.queued < CEILING_S:
            self.queued += now - self.last
            self.deadline += now - self.last
        self.last = now
        assert now < self.deadline, f"{what} after {CEILING_S} s, besides {self.queued:.0f} s of its jobs in the queue"


def _job_state(name: str) -> str:
    """The state of the notebook's job ``name`` (its scheduler's answer), "" before it is submitted."""
    from tutorial_lib.jobs import attach

    run_dir = REPO_ROOT / PARAMS_05["output_root"] / name
    return attach(run_dir).state if (run_dir / "job.json").exists() else ""


def _job_state_once_final(name: str) -> str:
    """The state of job ``name`` once this process's watcher has seen it end (or after CEILING_S): under Slurm its
    last answer can be up to 10 s older than the kernel's, which has already seen the cancel."""
    from tutorial_lib.jobs import attach
    from tutorial_lib.jobs.watch import watcher

    job = attach(REPO_ROOT / PARAMS_05["output_root"] / name)
    watcher().refresh(job)
    return job.wait(timeout=CEILING_S, poll=0.5, check=False)


def _epochs_logged(name: str) -> int:
    from tutorial_lib.jobs import attach

    return len(attach(REPO_ROOT / PARAMS_05["output_root"] / name).metrics("epoch"))


def test_notebook_04_sliders_redraw_the_figure(browser, lab):
    base, token = lab
    path = OUT / "04_sliders.ipynb"
    OUT.mkdir(parents=True, exist_ok=True)
    nbformat.write(_sliders_notebook(), path)  # fresh on every run, next to the 05 test's screenshots
    page = Page(browser, base, token, path)
    with page.screenshot_on_failure("04_failure.png"):
        page.run_all()
        page.wait_all_done()
        explorer = "lr_explorer("
        cell = page.locator(explorer).first
        cell.locator(".widget-slider").first.wait_for(timeout=CEILING_S * 1000)
        labels = cell.locator(".widget-label").evaluate_all(
            "labels => labels.map(l => ({text: l.innerText, cut: l.scrollWidth > l.clientWidth}))")
        assert {"text": "global batch", "cut": False} in labels and {"text": "warmup epochs", "cut": False} in labels
        before = page.cell(explorer)["images"]
        assert len(before) == 1
        handles = cell.locator(".noUi-handle")
        handles.nth(0).focus()  # the batch slider, from the keyboard
        page.page.keyboard.press("ArrowLeft")
        _wait_new_image(page, explorer, before[0])
        after_key = page.cell(explorer)["images"][0]
        box = handles.nth(1).bounding_box()  # the warmup slider, with the mouse: 2 steps of 0.5 epoch to the right
        track = cell.locator(".noUi-target").nth(1).bounding_box()
        step_px = track["width"] / 40  # 0..20 epochs in steps of 0.5
        page.page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.page.mouse.down()
        page.page.mouse.move(box["x"] + box["width"] / 2 + 2 * step_px, box["y"] + box["height"] / 2, steps=5)
        page.page.mouse.up()
        _wait_new_image(page, explorer, after_key)
        readouts = cell.locator(".widget-readout").all_inner_texts()
        assert float(readouts[1]) == 6.0, readouts  # 5 epochs + 2 x 0.5: each half epoch is reachable by mouse
        page.shoot(explorer, "04_sliders_moved.png")
        assert not _error_outputs(page.save_and_read())
        assert not page.errors, page.errors


def _wait_new_image(page: Page, marker: str, old: str) -> None:
    deadline = time.monotonic() + CEILING_S
    while time.monotonic() < deadline:
        images = page.cell(marker)["images"]
        if images and images[0] != old:
            return
        time.sleep(0.2)
    pytest.fail("the slider move did not redraw the figure")
