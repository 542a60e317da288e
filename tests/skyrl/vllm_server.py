"""A real vLLM OpenAI-compatible server as a subprocess on 127.0.0.1, for tests on CPU.

`start_server(model_dir, log_path)` launches `python -m vllm.entrypoints.openai.api_server`
with the flags SkyRL's own server actor sets (see `SERVER_ARGS`), polls `/health` within a
bounded time, and on failure raises with the tail of the server's log. `stop()` ends the whole
process group (vLLM spawns an engine-core and a worker process). `make_client` connects SkyRL's
`RemoteInferenceClient` to it as SkyRL does for an external server; `run` drives one of its
coroutines on a fresh event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import (
    RemoteInferenceClient,
)

from rlkit.cluster.localhead import free_port
from rlkit.cluster.skyrl.presets import get_preset

SERVER_ARGS = (
    # float32 on CPU: logprob parity with rlkit's float32 trainer forward is then ~1e-6
    ("--dtype", "float32"),
    # no torch.compile or graph capture: they cost start-up time a test run cannot spare
    ("--enforce-eager",),
    ("--max-model-len", "2048"),
    # on CPU this is the share of RAM for the KV cache; 0.92 (the default) fails on 24 GB
    ("--gpu-memory-utilization", "0.1"),
    # the env adds one image per turn, so >= max_turns + 1 or vLLM answers HTTP 400
    ("--limit-mm-per-prompt", json.dumps({"image": 16})),
    # the render and /inference/v1/generate routes (403 without it); SkyRL's actor sets it too
    ("--enable-scale-out",),
    # as SkyRL's actor: sampling defaults are vLLM's, not the checkpoint's generation_config
    ("--generation-config", "vllm"),
    # as the CPU preset sets it (SkyRL's actor: 0): the engine keeps the pictures it has
    # received, so rlkit's generator sends each one's tensors once an episode
    ("--mm-processor-cache-gb", f"{get_preset('skyrl-tiny-cpu').layout.mm_cache_gb:g}"),
    # as the cluster presets set it (engine_init_kwargs.mm_device_do_normalize=false): vLLM
    # normalises pixels on the CPU and hands SkyRL normalised patches, not raw uint8
    ("--no-mm-device-do-normalize",),
)
"""Flags beyond model, host and port: the findings' measured command plus SkyRL's and the
presets' engine settings."""

SERVER_ENV = {
    # SkyRL's actor sets it: control-plane routes (/pause, /sleep, /get_world_size, ...)
    "VLLM_SERVER_DEV_MODE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


@dataclass
class VllmServer:
    """A running server: its base URL, the served model name and where its log goes."""

    url: str
    model: str
    proc: subprocess.Popen
    log_path: Path
    startup_s: float = 0.0

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the process group, SIGKILL what is left after `timeout_s`."""
        if self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def start_server(model_dir: str | Path, log_path: str | Path, *, timeout_s: float = 300.0):
    """Start vLLM serving `model_dir` and return a ready `VllmServer` (or raise with its log)."""
    port = free_port()
    log_path = Path(log_path)
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
    cmd += [a for pair in SERVER_ARGS for a in pair]
    cmd += ["--host", "127.0.0.1", "--port", str(port)]
    t0 = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **SERVER_ENV},
            start_new_session=True,  # its own process group, so stop() reaches the children
        )
    server = VllmServer(f"http://127.0.0.1:{port}", str(model_dir), proc, log_path)
    while not _healthy(server.url):
        waited = time.monotonic() - t0
        if proc.poll() is not None or waited > timeout_s:
            why = (
                f"exited with {proc.returncode}"
                if proc.poll() is not None
                else f"not healthy after {waited:.0f} s"
            )
            server.stop()
            raise RuntimeError(
                f"vLLM server {why}; command: {' '.join(cmd)}\n--- log tail ---\n"
                + server.log_tail()
            )
        time.sleep(0.5)
    server.startup_s = time.monotonic() - t0
    return server


def make_client(server: VllmServer, **kw) -> RemoteInferenceClient:
    """As SkyRL's `setup.py` builds it for an external server: proxy and control plane alike."""
    return RemoteInferenceClient(
        proxy_url=server.url,
        server_urls=[server.url],
        data_parallel_size=1,
        model_name=server.model,
        **kw,
    )


def run(client: RemoteInferenceClient, coro):
    """Run `coro` on a fresh event loop, then close the client's session bound to that loop."""

    async def go():
        try:
            return await coro
        finally:
            await client.aclose()

    return asyncio.run(go())
