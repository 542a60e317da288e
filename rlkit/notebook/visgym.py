"""VisGym's maze_2d (the seed's own task) beside rlkit's mazes: pictures for notebook 01 and the
seed's protocol for notebook 02, so each number names its task and protocol.

    fig = visgym.side_by_side(4)             # rlkit's test | VisGym as VisGym draws it | tiny view
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from rlkit.env.maze_env import env_for_set
from rlkit.episodes.evaluate import evaluate
from rlkit.episodes.policies import scripted_policy
from rlkit.maze import rules
from rlkit.maze.core import difficulty
from rlkit.maze.render import render, render_maze
from rlkit.maze.sets import pinned_set
from rlkit.notebook.plots import GALLERY_STYLE, PlotFigure, figure_header
from rlkit.train.presets import preset as train_preset

SEED_TASK = (
    "The seed's 43.75% is 28 of 64 mazes: Qwen3-VL-8B-Instruct before GRPO on VisGym's "
    "maze_2d/easy (9x9 squares; rlkit's `visgym-easy` is VisGym's reset(seed=i) for i in "
    "0..63), 18 turns, reward only for `stop` on the target, greedy decoding (SkyRL's default "
    "eval), one sample a maze, so its 95% interval is the exact binomial [31.4%, 56.7%]. "
    "`rlkit eval --policy POLICY --set visgym-easy --protocol seed` reports any policy that way; rlkit's own "
    "protocol (k sampled episodes a maze, interval clustered by maze) is a different number."
)
"""What the seed's starting point was measured on (notebook 02 prints it)."""


def side_by_side(
    n: int = 4, *, test_set: str = "test", preset: str = "local-tiny-visgym"
) -> Figure:
    """Rows of `n` mazes: rlkit's `test_set`, VisGym's maze_2d/easy, and those as `preset` shows."""
    cells, squares = pinned_set(test_set)[:n], pinned_set("visgym-easy")[:n]
    visgym_style = env_for_set("visgym-easy").style
    tiny_style = train_preset(preset).task.env.style
    rows = [
        (f"rlkit '{test_set}'", [render_maze(m, GALLERY_STYLE) for m in cells]),
        ("VisGym maze_2d/easy", [render(rules.initial(m), visgym_style) for m in squares]),
        (f"{preset} view", [render(rules.initial(m), tiny_style) for m in squares]),
    ]
    fig = PlotFigure(figsize=(2.0 * n, 6.8))
    axes = fig.subplots(3, n, squeeze=False)
    for r, (label, images) in enumerate(rows):
        for c, img in enumerate(images):
            ax = axes[r, c]
            ax.imshow(img, interpolation="nearest")
            ax.set(xticks=[], yticks=[])
            ax.set_title(f"#{c} {img.width}x{img.height}px", fontsize=7)
        axes[r, 0].set_ylabel(label, fontsize=8)
    detail = "the first mazes of each set; above each, the picture's size in pixels"
    figure_header(fig, "rlkit's mazes beside VisGym's maze_2d", None, detail)
    return fig


def set_facts(names: tuple[str, ...] = ("test", "visgym-easy", "visgym-hard")) -> list[dict]:
    """Per pinned set: game, maze size, turn budget, shortest-path range, actions, win rule."""
    out = []
    for name in names:
        mazes, env = pinned_set(name), env_for_set(name)
        lengths = [difficulty(m).path_length for m in mazes]
        game = mazes[0].game
        out.append(
            {
                "set": name,
                "game": game,
                "size": f"{mazes[0].height}x{mazes[0].width}",
                "turns": env.max_turns,
                "shortest_path": f"{min(lengths)}-{max(lengths)}",
                "actions": " ".join(a.word for a in rules.game_moves(mazes[0])),
                "win": "stop on the target" if game == "squares" else "reach the exit",
            }
        )
    return out


def seed_protocol_lines(out_dir: str | Path, preset: str = "local-tiny-visgym") -> str:
    """The oracle and `preset`'s untrained model under the seed's protocol on `visgym-easy`
    (greedy, one sample a maze, the exact interval) in `preset`'s env, one line each."""
    from rlkit.notebook.workbench import base_model, model_policy

    cfg = train_preset(preset)
    base = model_policy(base_model(preset, out_dir), cfg, greedy=True)
    lines = []
    for name, policy in (("oracle", scripted_policy("oracle")), ("base (untrained)", base)):
        result, _ = evaluate(
            policy,
            set_name="visgym-easy",
            samples=1,
            cfg=cfg.task.env,
            history=cfg.task.history,
            mode="greedy",
            protocol="seed",
        )
        result.policy = name
        lines.append(result.summary())
    return "\n".join(lines)
