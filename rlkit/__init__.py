"""rlkit: a Jupyter-first workbench for GRPO post-training of vision-language models on mazes.

Packages by layer, bottom to top; a package imports only from packages below it (and the base
modules), and `scripts/check_layers.py` (part of `make lint`) enforces it:

    errors, fsio, stats   base: import nothing of rlkit but each other
    settings  base: typed `--set` values, one coercion for every config
    recipe    base: the GRPO recipe vocabulary both backends map (torch-free)
    maze      the game: mazes, pinned sets, rules, rendering, answer parsing
    env       skyrl-gym env (`rlkit-maze`) and SkyRL dataset rows
    episodes  policies, batched rollouts, evaluation, failure taxonomy
    run       one run, either backend: open_run (config, metrics, evals, episodes,
              checkpoints); the run dir's writers (RunDir, manifest, metrics logger)  (ray)
    model     Qwen3-VL: build, load, encode, batch, policy, vLLM policy   (torch; vllm)
    train     config, GRPO math, step + update, trainer, warm start, TensorBoard   (torch)
    cluster   Ray: connect, jobs, launch, watch, preflight, rayjob; skyrl/
              presets, entry, bridge, experiment    (ray; torch in skyrl/ but its presets)
    notebook  workbench steps, widgets, plots, demo          (ipywidgets, matplotlib)
    cli       the `rlkit` command
"""

__version__ = "0.1.0"
