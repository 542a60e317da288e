"""A scripted inference client for SkyRL's VLM generator: the one thing faked in the skyrl group.

It has the surface SkyRL's `SkyRLVLMGymGenerator` calls on its `RemoteInferenceClient` (the
pattern of SkyRL's own `tests/train/generators/test_skyrl_vlm_generator.py`):

- `render_chat_completion({"json": {"messages": ...}})` -> `{"token_ids", "features"}`: the ids
  rlkit's `ChatEncoder` builds from the checkpoint's own processor and chat template (one
  `<|image_pad|>` per merged patch, as the HF processor and vLLM expand them), and features that
  carry the patches (read back by `decode_features`, patched in for SkyRL's `decode_mm_kwargs`).
- `generate(engine_input)` -> `{"responses", "response_ids", "stop_reasons", ...}`: the answer of
  a scripted player, keyed by SkyRL's session id (`<row uid>_<repetition>`), truncated at the
  request's `max_tokens` like a real engine (stop reason "length"). Its ids are the text's
  canonical tokenization unless a `Tokenize` says otherwise: a sampler may draw another token
  sequence for the same text (`spelled`, `split_space`, `byte_spelled`), or special tokens that
  vLLM leaves out of the text (`drawing`); `keeps_special` gives texts as SkyRL's own client
  decodes them. The answer ends with `<|im_end|>` unless its ids already end with a stop id.
- `finish_session(session_id)`.

Everything it was asked and answered is recorded, so a test can replay the same moves in rlkit's
own env and compare verdicts.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from rlkit.env.maze_env import EnvConfig, maze_from_extras
from rlkit.maze import rules
from rlkit.maze.core import STOP, Action, Maze, optimal_action, shortest_path
from rlkit.maze.parsing import format_action, parse_actions
from rlkit.model.chat import ChatEncoder

Player = Callable[[Maze, rules.State, int], str]
"""(maze, where the player believes it is, repetition id) -> answer text."""
Tokenize = Callable[[PreTrainedTokenizerBase, str, int], list[int]]
"""(tokenizer, answer text, repetition id) -> the ids the engine says it sampled for the text."""


def canonical(tok: PreTrainedTokenizerBase, text: str, rep: int) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def spelled(tok: PreTrainedTokenizerBase, text: str, rep: int) -> list[int]:
    """One token per character: the same text, longer than its canonical tokenization (a
    sampler's `Ġ` `Ġ` where the tokenizer writes `ĠĠ`, on every token)."""
    return [t for ch in text for t in tok.encode(ch, add_special_tokens=False)]


def split_space(tok: PreTrainedTokenizerBase, text: str, rep: int) -> list[int]:
    """Every canonical token that starts with a space and goes on drawn as the space, then the
    rest (Qwen: `Ġgo` as `Ġ` `go`, `Ġ<` as `Ġ` `<`): what a sampler may draw, the same text."""
    out = []
    for t in canonical(tok, text, rep):
        piece = tok.decode([t])
        if len(piece) > 1 and piece[0] == " ":
            out += canonical(tok, " ", rep) + canonical(tok, piece[1:], rep)
        else:
            out.append(t)
    return out


def byte_spelled(tok: PreTrainedTokenizerBase, text: str, rep: int) -> list[int]:
    """One byte-level token per UTF-8 byte of the text (a character of several bytes is several
    tokens, none of which decodes alone): needs a byte-level BPE, as Qwen's is."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    table = bytes_to_unicode()
    return [tok.convert_tokens_to_ids(table[b]) for b in text.encode()]


def drawing(token: str, reps: frozenset[int]) -> Tokenize:
    """The canonical ids after one special `token`, on repetitions `reps`: vLLM decodes with
    skip_special_tokens, so the text, and the conversation SkyRL re-renders, never shows it."""

    def tokenize(tok: PreTrainedTokenizerBase, text: str, rep: int) -> list[int]:
        ids = canonical(tok, text, rep)
        return [tok.convert_tokens_to_ids(token), *ids] if rep in reps else ids

    return tokenize


def oracle(maze: Maze, state: rules.State, rep: int) -> str:
    return format_action(optimal_action(maze, state.pos))


def verbose_oracle(maze: Maze, state: rules.State, rep: int) -> str:
    word = optimal_action(maze, state.pos).word
    return f"The exit is the green cell. Going {word} gets me closer. <action>{word}</action>"


def arrow_oracle(maze: Maze, state: rules.State, rep: int) -> str:
    """The oracle's answer after an arrow (three UTF-8 bytes: byte-level tokens of it that
    decode to nothing alone)."""
    action = optimal_action(maze, state.pos)
    return f"{ARROWS[action]} {format_action(action)}"


ARROWS = {Action.UP: "\u2191", Action.DOWN: "\u2193", Action.LEFT: "\u2190", Action.RIGHT: "\u2192"}


def stopping_oracle(maze: Maze, state: rules.State, rep: int) -> str:
    """VisGym's solver: the shortest path, then `stop` on the target (`rules.best_move`)."""
    return f"The red square is near. {format_action(rules.best_move(state))}"


def stop_early(maze: Maze, state: rules.State, rep: int) -> str:
    """The shortest path, but `stop` two squares short of the target: reward 0."""
    left = len(shortest_path(maze, state.pos)) - 1
    return format_action(STOP if left <= 2 else rules.best_move(state))


def never_stop(maze: Maze, state: rules.State, rep: int) -> str:
    """Reaches the target, then steps off and back on it: the turn budget ends it, reward 0."""
    move = optimal_action(maze, state.pos)
    if move is None:  # on the target: step to an open neighbour instead of stopping
        move = next(a for a in Action if maze.can_move(state.pos, a))
    return format_action(move)


def wall_bumper(maze: Maze, state: rules.State, rep: int) -> str:
    """Walks into a wall whenever its cell has one (in a perfect maze nearly every cell does)."""
    blocked = [a for a in Action if not maze.can_move(state.pos, a)]
    return format_action(blocked[0] if blocked else Action.UP)


def garbage(maze: Maze, state: rules.State, rep: int) -> str:
    return "the quick brown fox jumps over the lazy dog"


def rambler(maze: Maze, state: rules.State, rep: int) -> str:
    """Thinks aloud far past any answer budget: the engine cuts it at max_tokens."""
    return "hmm, left or right or up or down? " * 200


def mixed(maze: Maze, state: rules.State, rep: int) -> str:
    """Solves every other sample of some mazes and none of the rest: pass@k lies strictly
    between the solve rate and 1."""
    solver = maze.content_hash[-1].isdigit() and rep % 2 == 0
    return oracle(maze, state, rep) if solver else wall_bumper(maze, state, rep)


@dataclass
class Session:
    maze: Maze
    cfg: EnvConfig
    state: rules.State
    texts: list[str] = field(default_factory=list)
    ids: list[list[int]] = field(default_factory=list)
    stop_reasons: list[str] = field(default_factory=list)


class ScriptedEngine:
    model_name = "rlkit-tiny"

    def __init__(
        self,
        encoder: ChatEncoder,
        rows: list[dict],
        player: Player,
        tokenize: Tokenize = canonical,
        keeps_special: bool = False,
    ) -> None:
        """`keeps_special`: answer texts as SkyRL's RemoteInferenceClient detokenizes them
        (`batch_decode`: special tokens, the end of turn too, stay in the text, and so in the
        conversation SkyRL re-renders); otherwise the player's text, as vLLM's own decodes."""
        self.encoder = encoder
        self.tokenizer = encoder.tokenizer
        self.rows = rows
        self.player = player
        self.tokenize = tokenize
        self.keeps_special = keeps_special
        self.sessions: dict[str, Session] = {}
        self.rendered: list[list[dict]] = []
        self.finished: list[str] = []
        self.requests: defaultdict[str, list[dict]] = defaultdict(list)
        # where a real engine stops: the end of turn, and Qwen's generation config's other eos
        ends = ("<|im_end|>", "<|endoftext|>")
        found = self.tokenizer.convert_tokens_to_ids(list(ends))
        self.stops = {i for i in found if i not in (None, self.tokenizer.unk_token_id)}

    async def render_chat_completion(self, request: dict) -> dict:
        messages = request["json"]["messages"]
        self.rendered.append(messages)
        enc = self.encoder.encode(messages)
        features = {"pixel_values": enc.pixel_values, "image_grid_thw": enc.image_grid_thw}
        return {"token_ids": list(enc.prompt_ids), "features": {"kwargs_data": features}}

    def _session(self, session_id: str) -> Session:
        if session_id not in self.sessions:
            uid, _, _ = session_id.rpartition("_")
            row = self.rows[int(uid)]
            extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
            maze = maze_from_extras(extras)
            info = row["extra_info"]
            cfg = EnvConfig.from_mapping(json.loads(info["env"]))
            self.sessions[session_id] = Session(maze, cfg, rules.initial(maze))
        return self.sessions[session_id]

    async def generate(self, engine_input: dict, model: str | None = None) -> dict:
        (session_id,) = engine_input["session_ids"]
        self.requests[session_id].append(engine_input)
        s = self._session(session_id)
        rep = int(session_id.rpartition("_")[2])
        text = self.player(s.maze, s.state, rep)
        ids = self.tokenize(self.tokenizer, text, rep)
        max_tokens = engine_input["sampling_params"].get("max_tokens")
        if max_tokens is not None and len(ids) >= max_tokens:
            ids, stop = ids[:max_tokens], "length"
            text = self.tokenizer.decode(ids, skip_special_tokens=True)  # as vLLM decodes
        elif not (ids and ids[-1] in self.stops):  # a tokenize may end the answer itself
            ids, stop = [*ids, self.tokenizer.convert_tokens_to_ids("<|im_end|>")], "stop"
        else:
            stop = "stop"
        if self.keeps_special:
            text = self.tokenizer.decode(ids)
        moves, _ = parse_actions(text, s.cfg.parser, s.cfg.moves_per_turn)
        s.state = rules.transition(s.state, moves)
        s.texts.append(text)
        s.ids.append(ids)
        s.stop_reasons.append(stop)
        return {
            "responses": [text],
            "response_ids": [list(ids)],
            "stop_reasons": [stop],
            "response_logprobs": None,
        }

    async def finish_session(self, session_id: str) -> None:
        self.finished.append(session_id)


def decode_features(kwargs_data: dict | None) -> dict:
    """Stands in for SkyRL's `decode_mm_kwargs` (vLLM's serialised tensors) on our features."""
    if kwargs_data is None:
        return {"pixel_values": None, "image_grid_thw": None}
    return {
        "pixel_values": torch.from_numpy(np.ascontiguousarray(kwargs_data["pixel_values"])),
        "image_grid_thw": torch.from_numpy(kwargs_data["image_grid_thw"]),
    }
