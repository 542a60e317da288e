"""A real browser check: JupyterLab shows the replay widget of an executed notebook 05.

The notebook is executed headless (papermill stores the widget state in its metadata), trusted,
and opened in JupyterLab on 127.0.0.1 by headless Chromium, driven over the DevTools protocol:
the test waits until the widget's maze image is in the page, then saves a screenshot
(RLKIT_SCREENSHOT_DIR, else the test's tmp dir) and checks it is not blank.

Chromium comes from Debian's `chromium` package; when missing it is installed with apt-get if
the tests run as root, else the test is skipped with the reason.
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

REPLAY_IMAGE_JS = (
    "Array.from(document.querySelectorAll('.jp-OutputArea-output .widget-image'))"
    ".filter(img => img.naturalWidth > 0).length"
)


def _chromium() -> str:
    found = shutil.which("chromium")
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("chromium is not installed and apt-get needs root: apt-get install chromium")
    try:
        subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True, timeout=300)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "chromium"],
            check=True,
            capture_output=True,
            timeout=900,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    except (subprocess.SubprocessError, OSError) as e:
        pytest.skip(f"could not install chromium with apt-get ({e})")
    return shutil.which("chromium") or pytest.skip("apt-get installed no chromium binary")


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


@pytest.fixture(scope="module")
def executed_replay_notebook(tmp_path_factory) -> Path:
    from rlkit.cluster.launch import plan_training
    from rlkit.notebook.demo import ensure_kernel, execute
    from rlkit.train.config import preset
    from rlkit.train.trainer import train

    out = tmp_path_factory.mktemp("browser")
    train(preset("smoke"), plan_training("smoke", out).run_dir, progress=False)
    params = {"out_dir": str(out), "preset": "smoke"}
    return execute("05_replay_and_failures", out, params, kernel=ensure_kernel())


def test_jupyterlab_renders_the_replay_widget_in_chromium(executed_replay_notebook, tmp_path, port):
    from PIL import Image, ImageStat

    chromium = _chromium()
    nb = executed_replay_notebook
    state = json.loads(nb.read_text())["metadata"]["widgets"]
    assert state["application/vnd.jupyter.widget-state+json"]["state"], "no widget state stored"
    env = {
        **os.environ,
        # A private Jupyter home: the trust database, workspaces and settings of this test only.
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
    }
    jupyter = Path(sys.executable).parent / "jupyter"
    # Widget views render only in trusted notebooks (their renderer is not "safe").
    subprocess.run([str(jupyter), "trust", str(nb)], check=True, env=env, capture_output=True)
    token = secrets.token_hex(16)
    lab = subprocess.Popen(
        [
            *(str(jupyter), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}"),
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={nb.parent}",
            "--ServerApp.port_retries=0",
            "--allow-root",  # CI containers run as root; the server listens on 127.0.0.1 only
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "lab.log", "w"),  # noqa: SIM115 - closed with the process
    )
    browser = None
    try:
        _wait_http(f"http://127.0.0.1:{port}/api/status?token={token}", 120)
        profile = tmp_path / "chromium-profile"
        browser = subprocess.Popen(
            [
                chromium,
                *("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic"),
                *("--no-first-run", "--disable-background-networking"),
                *("--disable-component-update", "--disable-sync"),
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                "--window-size=1400,1800",
                f"http://127.0.0.1:{port}/lab/tree/{nb.name}?token={token}",
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
        page = DevTools(pages[0]["webSocketDebuggerUrl"])
        deadline = time.monotonic() + 180
        while not page.evaluate(REPLAY_IMAGE_JS):
            assert time.monotonic() < deadline, "no rendered widget image after 180 s"
            time.sleep(1)
        time.sleep(2)  # let the remaining outputs finish their layout
        shot = base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"])
    finally:
        if browser is not None:
            _stop(browser)
        _stop(lab)
    out_dir = Path(os.environ.get("RLKIT_SCREENSHOT_DIR", tmp_path))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "05_replay_and_failures.png"
    path.write_bytes(shot)
    image = Image.open(io.BytesIO(shot)).convert("RGB")
    assert image.size[0] >= 800 and image.size[1] >= 600
    assert len(image.getcolors(maxcolors=1 << 20) or []) > 50, f"blank screenshot: {path}"
    assert max(ImageStat.Stat(image).stddev) > 10, f"blank screenshot: {path}"
