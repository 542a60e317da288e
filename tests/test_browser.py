"""Real browser checks of the replay player, in headless Chromium over DevTools.

- A page, and the same player set as innerHTML (what `ipywidgets.HTML` does: no <script> runs):
  it steps, its slider reaches the end, and a checkpoint diff's shorter episode holds its end.
- Executed notebook 05 (as `make demo` writes it), in JupyterLab: with every kernel shut down,
  the player steps to the next frame on a click, and its move-probability bars follow each frame.
- Source (notebooks/05 as a user opens it, its default `out_dir` resolved against RLKIT_HOME):
  run top to bottom in JupyterLab's own kernel, the player's Play button changes the frame.

Screenshots go to RLKIT_SCREENSHOT_DIR, else runs/screenshots/ of the project (CI keeps them).

Chromium comes from Debian's `chromium` package, which `.ci/run` installs; without it the tests
skip, saying how to install it (no test installs anything on the host).
"""

import base64
import io
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _chromium() -> str:
    """Debian's Chromium, which `.ci/run` installs: the suite never touches the host."""
    found = shutil.which("chromium")
    if not found:
        pytest.skip("chromium is not installed: apt-get install chromium (.ci/run does)")
    return found


def _wait_http(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout_s:.0f} s")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


class DevTools:
    """The few Chrome DevTools protocol calls this test needs, over one page's websocket."""

    def __init__(self, ws_url: str):
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.next_id = 0

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)[
            "result"
        ].get("value")


SCREENSHOTS = Path(
    os.environ.get("RLKIT_SCREENSHOT_DIR")
    or Path(__file__).resolve().parents[1] / "runs/screenshots"
)
PLAYER_JS = "document.querySelectorAll('.rlkit-player img.rlkit-frame').length"
FIRST_PLAYER = "document.querySelector('.rlkit-player')"
SESSION = "window.jupyterapp?.shell.currentWidget?.sessionContext"
BARS = (  # what the first player's four bars show now
    f"(() => {{ const p = {FIRST_PLAYER}; return {{"
    "pct: Array.from(p.querySelectorAll('.rlkit-bar-pct')).map(e => e.textContent),"
    "width: Array.from(p.querySelectorAll('.rlkit-bar-fill')).map(e => e.style.width),"
    "note: p.querySelector('.rlkit-bar-note').textContent}; })()"
)
BARS_DATA = f"JSON.parse({FIRST_PLAYER}.querySelector('script.rlkit-data').textContent)[0].bars"


PANES_SHOW = (  # the frame each pane of the first player shows now: its caption's, -1 if
    # the picture is not that frame's
    f"(() => {{ const p = {FIRST_PLAYER};"
    " const d = JSON.parse(p.querySelector('script.rlkit-data').textContent);"
    " const imgs = p.querySelectorAll('img.rlkit-frame');"
    " return Array.from(p.querySelectorAll('.rlkit-info')).map((e, k) => {"
    " const i = d[k].info.indexOf(e.textContent);"
    " return imgs[k].src.endsWith(',' + d[k].frames[i]) ? i : -1; }); })()"
)


@pytest.mark.parametrize("as_widget", [False, True], ids=["page", "innerHTML"])
def test_a_checkpoint_diff_plays_and_its_shorter_episode_holds_its_end(tmp_path, as_widget):
    """Set as innerHTML, what `ipywidgets.HTML` does with its value (no <script> runs there),
    the player plays as it does in a page."""
    from rlkit.episodes.policies import Response, scripted_policy
    from rlkit.episodes.rollout import run_episodes
    from rlkit.maze.generation import generate
    from rlkit.notebook.player import checkpoint_diff

    class Lost:
        name = "lost"

        def act(self, states, messages, rngs):
            return [Response("no idea") for _ in states]

    maze = generate(4, 4, seed=3)
    lost = run_episodes(Lost(), [maze])[0]
    solved = run_episodes(scripted_policy("oracle"), [maze])[0]
    html = checkpoint_diff(lost, solved, ("step 0", "step 40")).to_html()
    n, short = len(lost.turns) + 1, len(solved.turns) + 1
    assert n > short
    if as_widget:
        value = json.dumps(html).replace("</", "<\\/")  # "</script>" would end this script
        html = (
            f"<div id='w'></div><script>document.querySelector('#w').innerHTML = {value};</script>"
        )
    (tmp_path / "diff.html").write_text(f"<!doctype html><html><body>{html}</body></html>")
    browser, page = chromium_on((tmp_path / "diff.html").as_uri(), tmp_path / "profile")
    try:
        wait_for(page, f"{FIRST_PLAYER}?.rlkitReady", "the player's script started", 60)
        counter = f"{FIRST_PLAYER}.querySelector('.rlkit-counter').textContent"
        assert page.evaluate(counter) == f"frame 1/{n}" and page.evaluate(PANES_SHOW) == [0, 0]
        page.evaluate(f"{FIRST_PLAYER}.querySelector('.rlkit-next').click()")
        assert page.evaluate(counter) == f"frame 2/{n}" and page.evaluate(PANES_SHOW) == [1, 1]
        slider = f"{FIRST_PLAYER}.querySelector('.rlkit-slider')"
        page.evaluate(f"{slider}.value = {n - 1}; {slider}.dispatchEvent(new Event('input'))")
        assert page.evaluate(counter) == f"frame {n}/{n}"
        assert page.evaluate(PANES_SHOW) == [n - 1, short - 1]  # the solved one holds its end
        infos = (
            f"Array.from({FIRST_PLAYER}.querySelectorAll('.rlkit-info')).map(e => e.textContent)"
        )
        ended = page.evaluate(infos)
        assert "FAILED" in ended[0] and "SOLVED" in ended[1], ended
        page.evaluate(f"{FIRST_PLAYER}.querySelector('.rlkit-play').click()")
        assert page.evaluate(counter) == f"frame 1/{n}"  # Play at the end starts over
        wait_for(page, f"{counter} !== 'frame 1/{n}'", "Play stepping on", 10)
    finally:
        _stop(browser)


@pytest.fixture(scope="module")
def trained_home(tmp_path_factory) -> Path:
    """RLKIT_HOME with a smoke run where notebook 05's defaults look (runs/demo/local-tiny)."""
    from rlkit.train.presets import preset
    from rlkit.train.trainer import train

    home = tmp_path_factory.mktemp("home")
    train(preset("smoke"), home / "runs" / "demo" / "local-tiny", progress=False)
    return home


def chromium_on(url: str, profile: Path) -> tuple[subprocess.Popen, DevTools]:
    """Headless Chromium showing `url`, and its one page over DevTools."""
    browser = subprocess.Popen(
        [
            _chromium(),
            *("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic"),
            *("--no-first-run", "--disable-background-networking"),
            *("--disable-component-update", "--disable-sync"),
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "--window-size=1400,1800",
            url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    while not port_file.is_file() or not port_file.read_text().strip():
        assert time.monotonic() < deadline, "chromium did not open its DevTools port"
        time.sleep(0.3)
    devtools_port = int(port_file.read_text().split()[0])
    with urllib.request.urlopen(f"http://127.0.0.1:{devtools_port}/json/list") as r:
        pages = [t for t in json.load(r) if t["type"] == "page"]
    return browser, DevTools(pages[0]["webSocketDebuggerUrl"])


class Lab:
    """JupyterLab on 127.0.0.1 with a private Jupyter home, and headless Chromium on one page."""

    def __init__(self, root: Path, tmp: Path, port: int, extra_env: dict[str, str]):
        self.root, self.tmp, self.port = root, tmp, port
        self.token = secrets.token_hex(16)
        self.env = {
            **os.environ,
            **extra_env,
            # the trust database, workspaces and settings of this test only
            "JUPYTER_DATA_DIR": str(tmp / "data"),
            "JUPYTER_CONFIG_DIR": str(tmp / "config"),
            "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
            "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"),
        }
        self.jupyter = str(Path(sys.executable).parent / "jupyter")
        self.lab = self.browser = None
        news = tmp / "settings" / "@jupyterlab" / "apputils-extension"
        news.mkdir(parents=True, exist_ok=True)  # no "get notified about Jupyter news?" popup
        (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')

    def trust(self, nb: Path) -> None:
        subprocess.run(
            [self.jupyter, "trust", str(nb)], check=True, env=self.env, capture_output=True
        )

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/{path}?token={self.token}", method=method
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def open(self, rel: str) -> DevTools:
        self.lab = subprocess.Popen(
            [
                *(self.jupyter, "lab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}"),
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={self.root}",
                "--ServerApp.port_retries=0",
                "--allow-root",  # CI containers run as root; the server listens on 127.0.0.1 only
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: run cells by command
            ],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.tmp / "lab.log", "w"),  # noqa: SIM115 - closed with the process
        )
        _wait_http(f"http://127.0.0.1:{self.port}/api/status?token={self.token}", 120)
        url = f"http://127.0.0.1:{self.port}/lab/tree/{rel}?token={self.token}"
        self.browser, page = chromium_on(url, self.tmp / "chromium-profile")
        return page

    def close(self) -> None:
        for proc in (self.browser, self.lab):
            if proc is not None:
                _stop(proc)


def wait_for(page: DevTools, js: str, what: str, timeout_s: float = 180):
    deadline = time.monotonic() + timeout_s
    while not (value := page.evaluate(js)):
        if time.monotonic() > deadline:
            shot = base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"])
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            (SCREENSHOTS / "failed.png").write_bytes(shot)
            raise AssertionError(
                f"{what}: not seen after {timeout_s:.0f} s ({SCREENSHOTS}/failed.png)"
            )
        time.sleep(1)
    return value


def screenshot(page: DevTools, name: str) -> Path:
    from PIL import Image, ImageStat

    shot = base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"])
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    path.write_bytes(shot)
    image = Image.open(io.BytesIO(shot)).convert("RGB")
    assert image.size[0] >= 800 and image.size[1] >= 600
    assert len(image.getcolors(maxcolors=1 << 20) or []) > 50, f"blank screenshot: {path}"
    assert max(ImageStat.Stat(image).stddev) > 10, f"blank screenshot: {path}"
    return path


def test_an_executed_notebooks_replay_plays_with_no_kernel(trained_home, tmp_path, port):
    from nbformat import read
    from nbformat.sign import NotebookNotary

    from rlkit.notebook.demo import ensure_kernel, execute

    out = trained_home / "runs" / "demo"
    nb = execute("05_replay_and_failures", out, {"out_dir": str(out)}, kernel=ensure_kernel())
    assert NotebookNotary().check_signature(read(nb, as_version=4)), "execute() did not trust it"
    lab = Lab(nb.parent, tmp_path, port, {})
    lab.trust(nb)  # the same signature, in this test's private trust database
    try:
        page = lab.open(nb.name)
        wait_for(page, PLAYER_JS, "a kernel-free replay player")
        # JupyterLab starts a kernel on open. Wait until it is up, then shut the session down
        # through JupyterLab itself, so that it knows the notebook has none (a kernel deleted
        # behind its back, or before it had started, comes back).
        wait_for(page, f"{SESSION}?.session?.kernel?.status === 'idle'", "the kernel on open")
        page.call("Runtime.evaluate", expression=f"{SESSION}.shutdown()", awaitPromise=True)
        wait_for(page, f"!{SESSION}?.session", "the notebook with no session", 60)
        assert lab.api("kernels") == [] and lab.api("sessions") == []
        wait_for(page, f"{FIRST_PLAYER}.rlkitReady", "the player's script started", 60)
        frame = f"{FIRST_PLAYER}.querySelector('img.rlkit-frame').src"
        counter = f"{FIRST_PLAYER}.querySelector('.rlkit-counter').textContent"
        before, label = page.evaluate(frame), page.evaluate(counter)
        assert label.startswith("frame 1/"), label
        screenshot(page, "05_executed_frame1.png")
        page.evaluate(f"{FIRST_PLAYER}.querySelector('.rlkit-next').click()")
        time.sleep(0.5)
        assert page.evaluate(counter).startswith("frame 2/")
        assert page.evaluate(frame) != before, "the frame did not change"
        check_bars_follow_the_frames(page, counter)
        page.evaluate(f"{FIRST_PLAYER}.querySelector('.rlkit-play').click()")
        time.sleep(2)
        assert page.evaluate(counter) not in ("frame 1/", "frame 2/"), "Play did not advance"
        screenshot(page, "05_executed_after_click.png")
        assert lab.api("kernels") == [], "a kernel came back"
    finally:
        lab.close()


def check_bars_follow_the_frames(page: DevTools, counter: str) -> None:
    """From frame 2 to the end, one click at a time: the bars show each frame's recorded
    probabilities (the model's, from the run's eval), and they change as the player steps."""
    from rlkit.notebook.player import EPISODE_OVER, percent_text

    data = page.evaluate(BARS_DATA)
    assert data[0]["p"] is not None, "the model's eval recorded no move probabilities"
    seen = []
    for i in range(1, len(data)):
        assert page.evaluate(counter).startswith(f"frame {i + 1}/")
        shown, want = page.evaluate(BARS), data[i]
        pct = [percent_text(p) for p in want["p"]] if want["p"] else [""] * 4
        assert shown["pct"] == pct and shown["note"] == want["n"], (i, shown, want)
        seen.append(shown["width"])
        if i + 1 < len(data):
            page.evaluate(f"{FIRST_PLAYER}.querySelector('.rlkit-next').click()")
            time.sleep(0.2)
    assert data[-1]["n"] == EPISODE_OVER and seen[-1] == ["0%"] * 4
    for k in range(len(seen) - 1):  # seen[k] is frame k + 2's
        if data[k + 1]["p"] != data[k + 2]["p"]:
            assert seen[k] != seen[k + 1], f"the bars did not change from frame {k + 2}"
    screenshot(page, "05_executed_bars_last_frame.png")


def test_a_source_notebook_runs_in_jupyterlab_and_its_replays_play(trained_home, tmp_path, port):
    """notebooks/05 with its defaults, in JupyterLab's kernel started in the notebook's folder
    (a copy, so the source keeps no outputs); RLKIT_HOME points at the trained run."""
    from rlkit.notebook.demo import NOTEBOOK_DIR, ensure_kernel

    ensure_kernel()
    root = tmp_path / "project"
    shutil.copytree(NOTEBOOK_DIR, root / "notebooks", ignore=shutil.ignore_patterns("*.py"))
    lab = Lab(root, tmp_path, port, {"RLKIT_HOME": str(trained_home)})
    try:
        page = lab.open("notebooks/05_replay_and_failures.ipynb")
        kernel = f"{SESSION}?.session?.kernel"
        wait_for(page, f"{kernel}?.status === 'idle'", "an idle kernel for the notebook", 180)
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        text = "document.body.innerText"
        wait_for(page, f"{PLAYER_JS} > 0 || {text}.includes('Traceback')", "a replay player", 240)
        assert "Traceback" not in page.evaluate(text), page.evaluate(text)[-3000:]
        wait_for(page, f"{FIRST_PLAYER}.rlkitReady", "the player's script started", 60)
        frame = f"{FIRST_PLAYER}.querySelector('img.rlkit-frame').src"
        before = page.evaluate(frame)
        screenshot(page, "05_live_before_play.png")
        page.evaluate(f"{FIRST_PLAYER}.querySelector('.rlkit-play').click()")
        wait_for(page, f"{frame} !== {json.dumps(before)}", "a new frame after Play", 30)
        screenshot(page, "05_live_after_play.png")
    finally:
        lab.close()
