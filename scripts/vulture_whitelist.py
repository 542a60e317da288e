"""Names only a framework uses, for `make lint`'s dead-code pass (vulture; its paths and
confidence are pyproject.toml's [tool.vulture]). vulture reads this file and never runs it; it
matches names, not objects, so each line below marks one name used everywhere, with who uses it.

Everything else vulture reports is code nothing in rlkit, the notebooks, benchmarks or scripts
calls (the tests are not scanned: code only tests use counts as dead).
"""

# skyrl-gym's env contract (`BaseTextEnv`): SkyRL's generator and its metric aggregation call them
_.get_metrics
_.aggregate_metrics

# SkyRL's generator calls `agent_loop` with its full signature (rlkit.cluster.skyrl.generator
# overrides it; `max_tokens` is in that signature, and SkyRL's own VLM loop leaves it unread too)
_.agent_loop
max_tokens

# SkyRL's `BasePPOExp` builds its parts through these hooks (rlkit.cluster.skyrl.experiment)
_.get_tracker
_.get_train_dataset
_.get_eval_dataset
_.get_trainer

# SkyRL's config field, set on the sampled eval's copy and read by SkyRL's `evaluate`
# (rlkit.cluster.skyrl.experiment.sampled_eval_cfg)
_.eval_n_samples_per_prompt

# Ray's `worker_process_setup_hook`, named by path (rlkit.cluster.skyrl.fixes.setup)
setup

# vLLM: `--logits-processors rlkit.model.vllm_rows:NoTokenRows` and its LogitsProcessor methods
NoTokenRows
_.is_argmax_invariant
_.update_state
_.apply
is_pin_memory  # arguments of vLLM's signatures
batch_update

# CPU stand-ins with the signatures of the SkyRL functions they replace (rlkit.cluster.skyrl.cpu_seam)
device_type
loaded_sd
__getattr__  # PEP 562: vLLM's worker imports cpu_seam.CpuWorkerExtension by path
_._sync_non_persistent_buffers  # patched onto SkyRL's fsdp_utils module
_.__spec__  # a stub flash_attn package for importlib.util.find_spec
_.__path__
_.bert_padding

# torch.nn.Module.__call__ calls forward; a loaded module's class is swapped in place
_.forward
_.__class__

# Hugging Face objects configured by attribute (tokenizers' backend, transformers' config)
_.padding_side
_.pre_tokenizer
_.decoder
_.post_processor
_.use_cache

# IPython's display protocol; ipywidgets traitlets and tqdm's bar, set for the front end to read
_._repr_html_
_._repr_png_
_.disabled
_.children
_.display
_.last_print_n

# A description field filled positionally in each registry entry (MazeSet, Generator)
_.doc

# The suite's Qwen3-VL fixture checkpoint, cached per machine (tests/conftest.py); its builder is
# `rlkit model qwen-fixture`'s, so both live in rlkit.model.qwen_fixture
qwen_fixture

# rlkit.stats' flat Wilson interval: the too-narrow baseline docs/statistics.md measures the
# clustered interval against (tests/test_stats.py)
wilson

# Public API a researcher calls from a notebook, documented where named; only tests call it here
_.with_changes  # rlkit.recipe.Recipe: switches by name, strings coerced (the module's docstring)
apply_recipe  # rlkit.train.config: the local twin of get_preset(recipe=...) (docs/recipes.md)
rescore  # rlkit.train.rescore: the learning check on any run's captures (docs/tests.md)
_.learned
read_eval_episodes  # rlkit.run.skyrl_dumps: every episode of one SkyRL eval dump dir
_.maze_hash  # rlkit.run.skyrl_dumps.EvalEpisode: a dumped episode's record, read in notebooks
_.stop_reason
