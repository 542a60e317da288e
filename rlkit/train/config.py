"""Configuration of the local GRPO trainer: one dataclass per concern, `TrainConfig()` the
`local-tiny` preset. How each default was found: docs/local-trainer.md."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from rlkit.env.maze_env import EnvConfig, env_for_set
from rlkit.env.visgym_text import read_prompt_file
from rlkit.errors import UsageError
from rlkit.maze.sets import MazeSpec, pinned_spec
from rlkit.model.config import TinyConfig, Tuning
from rlkit.recipe import Recipe
from rlkit.settings import CaptureConfig, apply_settings

RESUME_MAY_CHANGE: tuple[str, ...] = (
    "schedule.steps",
    "schedule.eval_every",
    "schedule.ckpt_every",
    "schedule.keep",
    "schedule.threads",
    "schedule.eval_before_train",
    "schedule.capture_groups",
    "schedule.capture_keep",
)
"""The fields a resume may change (run.json's `config_changes`); the rest is the recipe."""


@dataclass(frozen=True)
class TaskConfig:
    """What the agent plays."""

    spec: MazeSpec = field(default_factory=lambda: pinned_spec("test"))
    """Training maze family (default: the `test` set's, disjoint seeds)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """Turn budget, observation and parser: the same env the eval uses."""
    eval_set: str = "test"
    """Pinned 64-maze set for every checkpoint's evaluation."""
    eval_sets: str | None = None
    """Other pinned sets every eval also plays, comma-separated, each on its own turn budget."""
    history: int | None = 1
    """Turns of history the model sees: 1 = Markov (the picture shows the trail), None = all."""
    prompt_file: str | None = None
    """Squares game: a text file whose text replaces rlkit's rules (`env.rules`)."""
    prompt_sha256: str | None = None
    """The prompt file's sha256, set from it."""

    @property
    def other_eval_sets(self) -> tuple[str, ...]:
        """The sets of `eval_sets` besides `eval_set`, in order."""
        named = [n.strip() for n in (self.eval_sets or "").split(",") if n.strip()]
        return tuple(n for n in dict.fromkeys(named) if n != self.eval_set)

    def __post_init__(self) -> None:
        game = env_for_set(self.eval_set).parser.startswith("visgym")
        for name in self.other_eval_sets:
            if env_for_set(name).parser.startswith("visgym") != game:
                raise UsageError(
                    f"task.eval_sets: {name} is another game than task.eval_set "
                    f"{self.eval_set}: evaluate sets of the game the run trains on"
                )
        if self.prompt_file is not None and self.prompt_sha256 is None:
            # a config read back from run.json keeps the text it recorded
            text, digest = read_prompt_file(self.prompt_file)
            object.__setattr__(self, "env", replace(self.env, rules=text))
            object.__setattr__(self, "prompt_sha256", digest)


@dataclass(frozen=True)
class ModelConfig(Tuning):
    """The policy model; `Tuning`'s fields say which weights the GRPO phase trains."""

    init: str = "tiny"
    """`tiny` builds the offline tiny Qwen3-VL (seeded) in RUN/init_model; else a checkpoint dir."""
    tiny: TinyConfig = field(default_factory=TinyConfig)
    """Shape of the tiny model when `init` is `tiny`."""
    temperature: float = 1.0
    """Sampling temperature for rollouts; logprobs use the same one (on-policy ratios)."""
    constrained: bool = True
    """Sample only among the four move words: the tiny model never learns free-form tags."""


@dataclass(frozen=True)
class WarmStartConfig:
    """Behaviour cloning on BFS-oracle moves before GRPO (a random-init VLM is flat under GRPO)."""

    enabled: bool = True
    batch: int = 128
    """States per BC step (oracle move as the target)."""
    lr: float = 1e-3
    max_steps: int = 400
    """Upper bound on BC steps, whatever the validation solve rate."""
    stop_at: float = 0.40
    """Stop once the sampled validation solve rate reaches this (partial skill for GRPO)."""
    check_every: int = 5
    """BC steps between validation checks (before the fine phase)."""
    fine_from: float | None = 0.30
    """From this validation solve rate on, BC runs at `fine_lr` and validates every step."""
    fine_lr: float = 2.5e-4
    """BC learning rate of the fine phase."""
    warmup_steps: int = 0
    """BC steps over which the rate rises linearly to `lr` (0: none)."""
    val_samples: int = 4
    """Episodes per validation maze (64 validation mazes)."""
    random_steps: int = 5
    """States are reached by up to this many random moves from the start (varied trails)."""
    states: str = "path"
    """Squares game: `path` (the oracle's path, then random moves) or `open` (any floor square)."""
    per_maze: int = 8
    """`open` states: squares drawn from each maze."""
    curriculum_steps: int | None = None
    """`open` states: BC steps over which their distance to the target grows from 2 (None: off)."""
    aux_weight: float = 0.0
    """Weight of the per-square auxiliary loss (`rlkit.train.square_head`); 0: off."""
    tower_steps: int = 0
    """Warm-start steps of the per-square loss alone (needs `aux_weight`) before BC starts."""

    def __post_init__(self) -> None:
        if self.states not in BC_STATES:
            raise UsageError(f"warm_start.states {self.states!r}: use {' or '.join(BC_STATES)}")
        if self.per_maze < 1 or (self.curriculum_steps is not None and self.curriculum_steps < 1):
            raise UsageError(
                f"warm_start.per_maze ({self.per_maze}) and curriculum_steps "
                f"({self.curriculum_steps}) must be >= 1 (curriculum_steps none: no curriculum)"
            )
        if self.aux_weight < 0:
            raise UsageError(f"warm_start.aux_weight ({self.aux_weight}) must be >= 0 (0: off)")
        if self.tower_steps < 0 or (self.tower_steps and not self.aux_weight):
            raise UsageError(
                f"warm_start.tower_steps ({self.tower_steps}) trains the per-square loss alone: "
                "set warm_start.aux_weight > 0 with it, or tower_steps 0"
            )


BC_STATES = ("path", "open")


@dataclass(frozen=True)
class GRPOConfig:
    mazes_per_step: int = 64
    """Distinct mazes per step (groups)."""
    group_size: int = 8
    """Episodes per maze; GRPO compares them with each other instead of using a critic."""
    epochs: int = 2
    """Passes over each rollout batch (importance ratios keep later passes honest)."""
    minibatch: int = 512
    """Turns per optimizer step, as many whole episodes as fit (a longer episode alone)."""
    lr: float = 3e-4
    lr_late: float | None = 1e-4
    """Rate from step `lr_late_from` on (None: constant)."""
    lr_late_from: int = 50
    """GRPO step at which `lr_late` takes over."""
    lr_end: float | None = 1e-6
    """From `lr_late_from` on, a half cosine down to this at the last GRPO step (None: constant)."""
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    turn_slack: int | None = 0
    """Rollout turn budget: shortest path + this, at most `env.max_turns` (None: `max_turns`)."""
    tight_fraction: float = 0.5
    """Share of each step's mazes played on the `turn_slack` budget; the others get `max_turns`."""
    solvable_only: bool = True
    """Pass over training mazes whose shortest way takes more turns than the env allows."""
    hard_share: float = 0.0
    """Share of each step's mazes whose shortest path has >= `hard_min_path` moves (0: off)."""
    hard_min_path: int = 14
    """Shortest-path moves a maze needs for a `hard_share` slot."""
    aux_weight: float = 0.0
    """Weight of the per-square loss on the vision tower after each GRPO step (0: off)."""
    aux_steps: int = 1
    """Steps of the per-square loss after each GRPO step, each on a fresh warm-start batch."""


@dataclass(frozen=True)
class ScheduleConfig:
    steps: int = 160
    """GRPO steps (warm-start steps come before and are counted separately)."""
    eval_every: int = 10
    eval_samples: int = 4
    """Episodes per test maze at each eval (k for pass@k)."""
    eval_greedy: bool = False
    """Greedy (argmax) instead of sampled evaluation."""
    eval_before_train: bool = True
    ckpt_every: int = 10
    keep: int | None = 3
    """Complete checkpoints kept (the newest; the marker's one is never deleted)."""
    seed: int = 0
    threads: int | None = None
    """torch threads (None: every core this process may use)."""
    capture_groups: int = CaptureConfig.groups
    """`rlkit.settings.CaptureConfig.groups`."""
    capture_keep: int | None = CaptureConfig.keep
    """`rlkit.settings.CaptureConfig.keep`."""

    def __post_init__(self) -> None:
        CaptureConfig(self.capture_groups, self.capture_keep)


LOCAL_TINY_RECIPE = Recipe(
    kl_loss_coef=0.05,
    zero_variance_filter=True,
    fail_advantage=-1.0,
)
"""SkyRL's defaults but KL 0.05, zero-variance filter, fail_advantage -1 (docs/recipes.md)."""


@dataclass(frozen=True)
class TrainConfig:
    name: str = "local-tiny"
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    recipe: Recipe = LOCAL_TINY_RECIPE
    """The algorithm switches (`rlkit.recipe`, SkyRL's names), shared with SkyRL presets."""
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)

    def __post_init__(self) -> None:
        g, s = self.grpo, self.schedule
        if self.task.env.parser == "visgym-sft" and self.model.constrained:
            raise UsageError(
                "task.env.parser=visgym-sft needs model.constrained=false: a constrained answer "
                "is an action tag, not VisGym's tuple"
            )
        if g.group_size < 2:
            raise UsageError(
                f"group_size ({g.group_size}) must be >= 2: GRPO compares episodes within a group"
            )
        if g.mazes_per_step < 1 or g.epochs < 1 or g.minibatch < 1:
            raise UsageError("mazes_per_step, epochs and minibatch must all be >= 1")
        if not g.lr > 0 or (g.lr_late is not None and not g.lr_late > 0):
            raise UsageError(f"lr ({g.lr}) and lr_late ({g.lr_late}) must be > 0")
        if g.lr_end is not None and not g.lr_end >= 0:
            raise UsageError(f"grpo.lr_end ({g.lr_end}) must be >= 0 or none")
        if g.turn_slack is not None and g.turn_slack < 0:
            raise UsageError(
                f"grpo.turn_slack ({g.turn_slack}) must be >= 0 (spare turns beyond the "
                "shortest path) or none (the env's max_turns)"
            )
        if not 0.0 <= g.tight_fraction <= 1.0:
            raise UsageError(f"grpo.tight_fraction ({g.tight_fraction}) must be in [0, 1]")
        if not 0.0 <= g.hard_share <= 1.0 or g.hard_min_path < 1:
            raise UsageError(
                f"grpo.hard_share ({g.hard_share}) must be in [0, 1] and grpo.hard_min_path "
                f"({g.hard_min_path}) >= 1"
            )
        if g.aux_weight < 0 or g.aux_steps < 1:
            raise UsageError(
                f"grpo.aux_weight ({g.aux_weight}) must be >= 0 (0: off) and grpo.aux_steps "
                f"({g.aux_steps}) >= 1"
            )
        if g.aux_weight > 0 and (self.model.lora_rank > 0 or self.model.freeze_vision != "none"):
            raise UsageError(
                "grpo.aux_weight trains the vision tower, which LoRA or freeze_vision keep "
                "fixed: set grpo.aux_weight 0, or model.lora_rank 0 and freeze_vision none"
            )
        self.recipe.check_local()
        w = self.warm_start
        if not (w.lr > 0 and w.fine_lr > 0):
            raise UsageError(f"warm_start.lr ({w.lr}) and fine_lr ({w.fine_lr}) must be > 0")
        if w.fine_from is not None and not 0.0 <= w.fine_from <= 1.0:
            raise UsageError(f"warm_start.fine_from ({w.fine_from}) must be in [0, 1] or none")
        if s.steps < 0:
            raise UsageError(f"schedule.steps ({s.steps}) must be >= 0")
        if s.seed < 0:
            raise UsageError(f"schedule.seed ({s.seed}) must be >= 0: it keys numpy SeedSequences")
        for name in ("eval_every", "ckpt_every", "eval_samples"):
            if getattr(s, name) < 1:
                raise UsageError(f"schedule.{name} ({getattr(s, name)}) must be >= 1")
        if not self.model.constrained and self.warm_start.enabled:
            raise UsageError("warm start clones move words: it needs model.constrained=True")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def with_overrides(self, overrides: Mapping[str, Any]) -> TrainConfig:
        """`{"grpo.lr": 1e-4, "steps": 8}` -> a new config (CLI `--set`: dotted or unique names)."""
        return apply_settings(self, overrides)


def apply_recipe(cfg: TrainConfig, changes: Mapping[str, Any] | Recipe) -> TrainConfig:
    """`cfg` with recipe `changes` (switch -> value, strings coerced; or a whole Recipe)."""
    if isinstance(changes, Recipe):
        return apply_settings(cfg, {"recipe": changes})
    return apply_settings(
        cfg, {f"recipe.{k.removeprefix('recipe.')}": v for k, v in changes.items()}
    )
