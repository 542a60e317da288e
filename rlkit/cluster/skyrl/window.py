"""A history window in rlkit's SkyRL generator (`WindowedLoop`): every turn a row of its own, the
episode's reward on its last row: docs/skyrl-integration.md#the-generator-generatorpy-renderpy."""

from __future__ import annotations

import copy
import time
from dataclasses import asdict
from typing import Any

import skyrl_gym
from skyrl.train.generators.base import GeneratorOutput
from skyrl.train.generators.skyrl_gym_generator import StepWiseOutput, TrajectoryOutput

from rlkit.cluster.skyrl.render import EpisodePrompt
from rlkit.run.skyrl_dumps import NEXT_TURN

STATES_KEY = "rlkit_states"
"""The generator output's (and training input metadata's) list of each row's (row, col)."""


def row_turns(env_extras: dict, limit: int) -> int:
    """An episode's turn budget: its row's own (`extra_info.max_turns`) up to `limit`."""
    own = (env_extras.get("extra_info") or {}).get("max_turns")
    return limit if own is None else min(int(own), limit)


class WindowedLoop:
    """`RlkitVLMGenerator`'s episodes under a history window (uses its attributes)."""

    def attach_step_rows(self, out: GeneratorOutput) -> None:
        """Each row's pixels, grid and square as `windowed_loop` recorded them (SkyRL's step-wise
        `generate` gives a VLM's rows no pixels; the square is GiGPO's anchor)."""
        ids = out["trajectory_ids"]
        rows = [self._step_rows[f"{t.instance_id}_{t.repetition_id}"].pop(0) for t in ids]
        out["pixel_values"] = [pixels for pixels, _, _ in rows]
        out["image_grid_thw"] = [grid for _, grid, _ in rows]
        out[STATES_KEY] = [square for _, _, square in rows]

    async def start_env(
        self, prompt, env_class: str, env_extras: dict[str, Any], sampling_params: dict | None
    ) -> tuple[Any, list[dict], dict[str, Any]]:
        """(env, conversation, sampling params) of a new episode with its row's turn budget."""
        env_extras["max_turns"] = row_turns(env_extras, self.max_turns)
        env_config = getattr(self.skyrl_gym_cfg, env_class, dict())
        env = skyrl_gym.make(env_class, env_config=env_config, extras=env_extras)
        conversation, _ = await self._run_in_executor_if_available(env.init, copy.deepcopy(prompt))
        if sampling_params is None:
            sampling_params = asdict(self.generator_cfg.sampling_params)
        return env, conversation, sampling_params

    async def play_turn(
        self,
        env,
        episode: EpisodePrompt,
        conversation: list[dict],
        session_id: str,
        params: dict,
        cache_salt: str | None,
    ) -> tuple[str, list[int], list | None, bool, dict]:
        """One turn answered, captured, played in `env` and appended to `conversation`; (stop
        reason, sampled ids, their logprobs, whether an end of turn was appended, the env's step)."""
        t = time.monotonic()
        engine_output = await self.engine_turn(episode, session_id, params, cache_salt)
        self._timed("engine", t)
        self._turns += 1
        text, ids, logprobs, added_eos = self._answer_of(engine_output, params)
        if self._capture is not None:  # a captured episode's turn (others: ignored)
            self._capture.turn(session_id, text, episode.ids, ids, episode.features(), cache_salt)
        t = time.monotonic()
        step = await self._run_in_executor_if_available(env.step, text)
        self._timed("env", t)
        conversation.append({"role": "assistant", "content": text})
        return engine_output["stop_reasons"][0], ids, logprobs, added_eos, step

    async def windowed_loop(
        self,
        prompt,
        env_class: str,
        env_extras: dict[str, Any],
        max_input_length: int,
        sampling_params: dict[str, Any] | None,
        session_id: str,
        cache_salt: str | None,
    ) -> StepWiseOutput:
        """`agent_loop` under a history window: each turn a row (the window sent, the answer);
        the reward on the last row's last token."""
        start_time = time.monotonic()
        try:
            env, conversation, params = await self.start_env(
                prompt, env_class, env_extras, sampling_params
            )
            cache = EpisodePrompt(ids=[])  # the episode's pictures, rendered once each
            steps: list[TrajectoryOutput] = []
            rows: list[tuple] = []  # each step's (pixels, grid, square)
            total, done = 0.0, False
            while not done:
                t = time.monotonic()
                episode = await self.renderer.window(cache, conversation, self.history, session_id)
                self._timed("render", t)
                if len(episode.ids) > max_input_length:
                    if not steps:  # SkyRL needs a row: an empty turn that trains nothing
                        steps.append(self._step(episode, [self.filler_id], None, "length", 0))
                        steps[-1].loss_mask[0] = 0
                        rows.append((*episode.pixels(), list(env.state.pos)))
                    steps[-1].stop_reason = "length"
                    break
                square = list(env.state.pos)  # the square the answer is given on
                stop, gen_ids, gen_logprobs, added_eos, step = await self.play_turn(
                    env, episode, conversation, session_id, params, cache_salt
                )
                done = step["done"]
                total += float(step["reward"])
                if not done:
                    conversation.extend(step["observations"])
                steps.append(self._step(episode, gen_ids, gen_logprobs, stop, added_eos))
                rows.append((*episode.pixels(), square))
            for row in steps[:-1]:  # how a dump's reader finds an episode's rows
                row.stop_reason = NEXT_TURN
            steps[-1].reward[-1] = total
            steps[-1].env_metrics = env.get_metrics()  # one episode's, once
            self._step_rows[session_id] = rows
            await self._run_in_executor_if_available(env.close)
            return StepWiseOutput(steps, e2e_time=time.monotonic() - start_time)
        finally:
            await self.inference_engine_client.finish_session(session_id)

    @staticmethod
    def _step(
        episode: EpisodePrompt, ids: list[int], logprobs: list | None, stop: str, added_eos: bool
    ) -> TrajectoryOutput:
        """One turn's row: the window's ids as prompt, the answer as response, no reward yet."""
        return TrajectoryOutput(
            response_ids=list(ids),
            reward=[0.0] * len(ids),
            stop_reason=stop,
            loss_mask=[1] * (len(ids) - added_eos) + [0] * added_eos,
            prompt_ids=list(episode.ids),
            rollout_logprobs=list(logprobs) if logprobs else [0.0] * len(ids),
            env_metrics={},
        )


def last_steps(out: GeneratorOutput) -> dict[str, list]:
    """A step-wise output seen one row (the last) an episode."""
    keep = [i for i, last in enumerate(out["is_last_step"]) if last]
    return {k: [v[i] for i in keep] for k, v in out.items() if isinstance(v, list)}
