"""The GRPO recipe (`Recipe`): every algorithm switch under SkyRL 0.4.0's own key, value and default,
shared by both backends; a switch a backend cannot honour is refused in one line (`refusals`).
Each switch's paper, SkyRL key and refusals: docs/recipes.md#the-switches."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from rlkit.errors import UsageError
from rlkit.settings import coerce_text

ADVANTAGE_ESTIMATORS = ("grpo", "gae", "rloo", "reinforce++", "maxrl")
"""SkyRL's `AdvantageEstimatorRegistry` (a test compares it with SkyRL's)."""
RLKIT_ADVANTAGE_ESTIMATORS = ("gigpo",)
"""rlkit's own estimators beside SkyRL's (`gigpo`: step-level credit, `rlkit.train.grpo`)."""
POLICY_LOSSES = (
    "regular",
    "dual_clip",
    "gspo",
    "cispo",
    "rollout_is",
    "clip_cov",
    "kl_cov",
    "sapo",
    "cross_entropy",
    "importance_sampling",
    "dppo",
)
"""SkyRL's `PolicyLossRegistry` (a test compares it with SkyRL's)."""
LOSS_REDUCTIONS = (
    "token_mean",
    "sequence_mean",
    "seq_mean_token_sum_norm",
    "prompt_mean",
    "token_mean_legacy",
)
"""SkyRL's loss reductions (`apply_loss_reduction_to_advantages_minibatch`)."""
KL_ESTIMATORS = ("k1", "k2", "k3", "abs")
"""Schulman, "Approximating KL divergence" (2020); SkyRL's `compute_approx_kl` names."""
KL_PLACEMENTS = ("loss", "reward")
TIS_TYPES = ("token", "sequence", None)
DYNAMIC_SAMPLING = ("filter", "replace", None)

LOCAL_ADVANTAGE_ESTIMATORS = ("grpo", "gigpo")
"""What `rlkit.train.grpo.ESTIMATORS` implements (a test ties the two)."""
LOCAL_POLICY_LOSSES = ("regular", "dual_clip", "gspo")
"""What `rlkit.train.policy_losses.POLICY_LOSSES` implements (a test ties the two)."""
LOCAL_REDUCTIONS = ("token_mean", "sequence_mean", "seq_mean_token_sum_norm")
"""What `rlkit.train.grpo.REDUCTIONS` implements (a test ties the two)."""


@dataclass(frozen=True)
class Recipe:
    """The algorithm switches of a GRPO run; names and values are SkyRL's."""

    KEY_NOUN = "recipe switch"  # what `rlkit.settings.resolve_key` calls an unknown one

    advantage_estimator: str = "grpo"
    """How episode rewards become advantages: `ADVANTAGE_ESTIMATORS` or rlkit's `gigpo`."""
    gigpo_step_weight: float = 1.0
    """GiGPO's omega: a turn's advantage is its episode's plus this times its step advantage."""
    gigpo_gamma: float = 0.95
    """GiGPO's discount: turn t of T returns gamma**(T-1-t) * reward."""
    grpo_norm_by_std: bool = True
    """Divide each group's centred rewards by their std (textbook GRPO); False: Dr. GRPO."""
    eps_clip_low: float = 0.2
    """The ratio's lower clip bound is 1 - this (PPO)."""
    eps_clip_high: float = 0.2
    """The ratio's upper clip bound is 1 + this (above eps_clip_low: DAPO's clip-higher)."""
    policy_loss_type: str = "regular"
    """`regular` (PPO's per-token clip), `dual_clip`, `gspo`, or SkyRL's others (SkyRL only)."""
    clip_ratio_c: float = 3.0
    """Dual-clip's cap (`dual_clip` only)."""
    loss_reduction: str = "token_mean"
    """How token losses become one number: `token_mean`, `sequence_mean`, `seq_mean_token_sum_norm`."""
    max_seq_len: int | None = None
    """Tokens an episode's sum is divided by under `seq_mean_token_sum_norm` (required there)."""
    kl_loss_coef: float = 0.001
    """Weight of the KL penalty to the reference policy (0: off, no reference kept)."""
    kl_estimator_type: str = "k3"
    """KL estimator from sampled-token logprobs: k1, k2, k3 (unbiased, >= 0) or abs."""
    kl_placement: str = "loss"
    """`loss` adds kl_loss_coef * KL to the loss (GRPO); `reward` subtracts it from the reward."""
    entropy_loss_coef: float = 0.0
    """Subtract this times the policy's token-mean entropy from the loss (0: off)."""
    tis_ratio_type: str | None = None
    """Truncated importance sampling on the rollout engine's logprobs: token, sequence or None."""
    token_tis_ratio_clip_high: float = 2.0
    """Cap on the token TIS weight."""
    sequence_tis_ratio_clip_high: float = 5.0
    """Cap on the sequence TIS weight."""
    dynamic_sampling_type: str | None = None
    """`filter` (DAPO: redraw groups whose rewards all agree), `replace` (POLARIS) or None."""
    max_sample_batches: int = 30
    """Most batches a `filter` step draws."""
    zero_variance_filter: bool = False
    """Mask out groups whose episodes all got the same reward (a SkyRL preset refuses it)."""
    apply_overlong_filtering: bool = False
    """An episode whose last reply was cut (no end-of-turn token) leaves the loss (DAPO)."""
    fail_advantage: float | None = None
    """rlkit's own: the (negative) advantage of every episode of a group nobody solved (local)."""

    curriculum_steps: int | None = None
    """Steps of rlkit's difficulty curriculum (docs/recipes.md#difficulty-curriculum); None: off."""
    curriculum_start: float = 0.25
    """Share of each training maze's shortest path kept at the first step (at least one move)."""

    def __post_init__(self) -> None:
        for name, allowed in (
            ("advantage_estimator", ADVANTAGE_ESTIMATORS + RLKIT_ADVANTAGE_ESTIMATORS),
            ("policy_loss_type", POLICY_LOSSES),
            ("loss_reduction", LOSS_REDUCTIONS),
            ("kl_estimator_type", KL_ESTIMATORS),
            ("kl_placement", KL_PLACEMENTS),
            ("tis_ratio_type", TIS_TYPES),
            ("dynamic_sampling_type", DYNAMIC_SAMPLING),
        ):
            if getattr(self, name) not in allowed:
                names = ["none" if a is None else a for a in allowed]
                raise UsageError(
                    f"recipe.{name} {getattr(self, name)!r} must be "
                    f"{', '.join(names[:-1])} or {names[-1]}"
                )
        if not (0 <= self.eps_clip_low < 1 and self.eps_clip_high >= 0):
            raise UsageError(
                f"recipe.eps_clip_low ({self.eps_clip_low}) must be in [0, 1) and eps_clip_high "
                f"({self.eps_clip_high}) >= 0: they bound the ratio to [1-low, 1+high]"
            )
        for name in ("kl_loss_coef", "entropy_loss_coef"):
            if not getattr(self, name) >= 0:
                raise UsageError(f"recipe.{name} ({getattr(self, name)}) must be >= 0 (0: off)")
        if self.clip_ratio_c <= 1:
            raise UsageError(f"recipe.clip_ratio_c ({self.clip_ratio_c}) must be > 1")
        if self.max_seq_len is not None and self.max_seq_len < 1:
            raise UsageError(f"recipe.max_seq_len ({self.max_seq_len}) must be >= 1 or none")
        if self.loss_reduction == "seq_mean_token_sum_norm" and self.max_seq_len is None:
            raise UsageError(
                "recipe.loss_reduction=seq_mean_token_sum_norm needs recipe.max_seq_len: the "
                "constant per-episode token budget it divides by"
            )
        if self.max_sample_batches < 1:
            raise UsageError(f"recipe.max_sample_batches ({self.max_sample_batches}) must be >= 1")
        if self.fail_advantage is not None and not self.fail_advantage < 0:
            raise UsageError(
                f"recipe.fail_advantage ({self.fail_advantage}) must be < 0 (it pushes down the "
                "moves of groups that all failed) or none"
            )
        for name in ("token_tis_ratio_clip_high", "sequence_tis_ratio_clip_high"):
            if not getattr(self, name) > 0:
                raise UsageError(f"recipe.{name} ({getattr(self, name)}) must be > 0")
        if not self.gigpo_step_weight >= 0 or not 0 < self.gigpo_gamma <= 1:
            raise UsageError(
                f"recipe.gigpo_step_weight ({self.gigpo_step_weight}) must be >= 0 and "
                f"gigpo_gamma ({self.gigpo_gamma}) in (0, 1]"
            )
        if self.curriculum_steps is not None and self.curriculum_steps < 1:
            raise UsageError(
                f"recipe.curriculum_steps ({self.curriculum_steps}) must be >= 1 or none (off)"
            )
        if not 0 < self.curriculum_start <= 1:
            raise UsageError(
                f"recipe.curriculum_start ({self.curriculum_start}) must be in (0, 1]: the "
                "share of each maze's shortest path played at the first step"
            )

    # values -------------------------------------------------------------------------------
    @property
    def kl_in_loss(self) -> float:
        """The KL term's weight in the loss (0 when off or placed in the reward)."""
        return self.kl_loss_coef if self.kl_placement == "loss" else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def changes(self, base: Recipe | None = None) -> dict[str, Any]:
        """The switches that differ from `base` (default: SkyRL's defaults, `Recipe()`)."""
        base = base or Recipe()
        return {
            f.name: v for f in fields(self) if (v := getattr(self, f.name)) != getattr(base, f.name)
        }

    def with_changes(self, changes: Mapping[str, Any]) -> Recipe:
        """A new recipe with `changes` (switch -> value, `recipe.` optional, text coerced)."""
        return replace(self, **coerce_switches(self, changes))

    # backends -------------------------------------------------------------------------------
    def refusals(self, backend: str) -> list[str]:
        """One line per switch `backend` ("local" or "skyrl") cannot honour with these values."""
        if backend not in ("local", "skyrl"):
            raise UsageError(f"backend {backend!r}: use local or skyrl")
        return (_local_refusals if backend == "local" else _skyrl_refusals)(self)

    def check_local(self) -> None:
        """UsageError (the first refusal) unless the local trainer honours every switch."""
        if refusals := self.refusals("local"):
            raise UsageError(refusals[0])

    def check_skyrl(self) -> None:
        """UsageError (the first refusal) unless SkyRL honours every switch."""
        if refusals := self.refusals("skyrl"):
            raise UsageError(refusals[0])

    def skyrl_overrides(self) -> list[str]:
        """SkyRL `key=value` overrides setting every switch (after `check_skyrl`)."""
        self.check_skyrl()
        a, opc = "trainer.algorithm", "trainer.algorithm.off_policy_correction"
        out = [
            f"{a}.advantage_estimator={self.advantage_estimator}",
            f"{a}.grpo_norm_by_std={_b(self.grpo_norm_by_std)}",
            f"{a}.eps_clip_low={self.eps_clip_low}",
            f"{a}.eps_clip_high={self.eps_clip_high}",
            f"{a}.policy_loss_type={self.policy_loss_type}",
            f"{a}.clip_ratio_c={self.clip_ratio_c}",
            f"{a}.loss_reduction={self.loss_reduction}",
            f"{a}.use_kl_loss={_b(self.kl_loss_coef > 0 and self.kl_placement == 'loss')}",
            f"{a}.use_kl_in_reward={_b(self.kl_loss_coef > 0 and self.kl_placement == 'reward')}",
            f"{a}.kl_loss_coef={self.kl_loss_coef}",
            f"{a}.kl_estimator_type={self.kl_estimator_type}",
            f"{a}.use_entropy_loss={_b(self.entropy_loss_coef > 0)}",
            f"{opc}.tis_ratio_type={_none(self.tis_ratio_type)}",
            f"{opc}.token_tis_ratio_clip_high={self.token_tis_ratio_clip_high}",
            f"{opc}.sequence_tis_ratio_clip_high={self.sequence_tis_ratio_clip_high}",
            f"{a}.dynamic_sampling.type={_none(self.dynamic_sampling_type)}",
            f"{a}.dynamic_sampling.max_sample_batches={self.max_sample_batches}",
            f"{a}.zero_variance_filter={_b(self.zero_variance_filter)}",
            f"generator.apply_overlong_filtering={_b(self.apply_overlong_filtering)}",
        ]
        if self.entropy_loss_coef > 0:  # off, SkyRL's unused coefficient stays its own
            out.append(f"{a}.entropy_loss_coef={self.entropy_loss_coef}")
        if self.max_seq_len is not None:
            out.append(f"{a}.max_seq_len={self.max_seq_len}")
        if self.tis_ratio_type is not None:  # TIS divides by the rollout's logprobs
            out.append("generator.sampling_params.logprobs=1")
        return out


def local_set_args(changes: Mapping[str, Any]) -> list[str]:
    """`rlkit train` `--set` arguments for recipe `changes`: `["recipe.eps_clip_high=0.28"]`."""
    coerce_switches(Recipe(), changes)
    return [f"recipe.{k.removeprefix('recipe.')}={_none(v)}" for k, v in changes.items()]


def coerce_switches(recipe: Recipe, changes: Mapping[str, Any]) -> dict[str, Any]:
    """`changes` as switch -> value, text coerced; an unknown switch is a one-line UsageError."""
    known = {f.name: f for f in fields(Recipe)}
    out: dict[str, Any] = {}
    for key, value in changes.items():
        name = key.removeprefix("recipe.")
        if name not in known:
            raise UsageError(
                f"unknown recipe switch {key!r}: the switches are {', '.join(sorted(known))}"
            )
        out[name] = coerce_text(value, f"recipe.{name}", known[name].type)
    return out


def _local_refusals(r: Recipe) -> list[str]:
    out = [
        f"recipe.{name}={getattr(r, name)}: the local trainer has {', '.join(allowed)} only "
        "(SkyRL runs it)"
        for name, allowed in (
            ("advantage_estimator", LOCAL_ADVANTAGE_ESTIMATORS),
            ("policy_loss_type", LOCAL_POLICY_LOSSES),
            ("loss_reduction", LOCAL_REDUCTIONS),
        )
        if getattr(r, name) not in allowed
    ]
    if r.kl_loss_coef > 0 and r.kl_placement == "reward":
        out.append(
            "recipe.kl_placement=reward: the local trainer puts KL in the loss only "
            "(kl_placement=loss); SkyRL runs use_kl_in_reward"
        )
    if r.tis_ratio_type is not None:
        out.append(
            f"recipe.tis_ratio_type={r.tis_ratio_type}: the local trainer samples and trains "
            "with one model and its rollout logprobs are the old ones, so there is no "
            "rollout/trainer gap to correct (SkyRL's vLLM rollouts have one)"
        )
    if r.dynamic_sampling_type == "replace":
        out.append(
            "recipe.dynamic_sampling_type=replace: the local trainer has filter only "
            "(SkyRL runs replace)"
        )
    return out


def _skyrl_refusals(r: Recipe) -> list[str]:
    out = []
    if r.zero_variance_filter:
        out.append(
            "recipe.zero_variance_filter=true: SkyRL applies it to response-level rewards only "
            "and its VLM generator returns per-token ones, so it would be silently skipped "
            "(skyrl/train/trainer.py); use dynamic_sampling_type=filter to drop such groups"
        )
    if r.fail_advantage is not None:
        out.append(
            f"recipe.fail_advantage={r.fail_advantage}: SkyRL has no advantage for groups "
            "that all failed (they get 0); set it to none for a SkyRL preset"
        )
    if r.advantage_estimator in RLKIT_ADVANTAGE_ESTIMATORS and r.dynamic_sampling_type:
        out.append(
            f"recipe.advantage_estimator={r.advantage_estimator} with dynamic_sampling_type: "
            "the rows SkyRL's dynamic sampling drops or replaces would lose their squares; "
            "set dynamic_sampling_type to none"
        )
    if r.curriculum_steps is not None and r.dynamic_sampling_type is not None:
        out.append(
            "recipe.curriculum_steps with dynamic_sampling_type: SkyRL's curriculum is the "
            "training rows' order, and the extra batches dynamic sampling draws would run it "
            "ahead of the steps; set one of them to none"
        )
    return out


def check_capture(groups: int, estimator: str) -> None:
    """Refuse capture (`groups` > 0) under an estimator whose advantages rlkit does not compute."""
    if groups and estimator not in LOCAL_ADVANTAGE_ESTIMATORS:
        raise UsageError(
            f"captured rollouts need advantage_estimator "
            f"{' or '.join(LOCAL_ADVANTAGE_ESTIMATORS)} (the advantages rlkit computes), "
            f"not {estimator}; set capture_groups=0"
        )


def _b(flag: bool) -> str:
    return "true" if flag else "false"


def _none(value: Any) -> str:
    return "null" if value is None else str(value)
