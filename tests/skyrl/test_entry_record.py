"""rlkit's SkyRL entry records the run's own config in RUN/run.json before SkyRL starts (backend
"skyrl": the one rule then knows the run for what it is), read back by `open_run`; a resume
with other overrides records what changed."""

import json

import pytest
from skyrl.train.config import SkyRLTrainConfig

from rlkit.cluster.skyrl.entry import parse_args, record_run
from rlkit.run import open_run


def test_the_entry_records_skyrls_config_and_a_resume_records_its_changes(tmp_path):
    run_dir = tmp_path / "run"
    argv = ["--preset", "skyrl-tiny-cpu", "--", f"trainer.ckpt_path={run_dir}"]
    args, overrides = parse_args(argv + ["trainer.algorithm.eps_clip_high=0.28"])
    record_run(SkyRLTrainConfig.from_cli_overrides(overrides), args, overrides)
    run = open_run(run_dir)
    assert run.backend == "skyrl" and run.preset == "skyrl-tiny-cpu"
    config = run.config()
    assert config["overrides"]["trainer.algorithm.eps_clip_high"] == "0.28"
    assert config["skyrl"]["trainer"]["algorithm"]["eps_clip_high"] == 0.28
    assert config["entry"]["layout"]["device"] == "cpu" and "config_changes" not in run.info()
    # a resume with the same command records nothing; with another clip, the change
    record_run(SkyRLTrainConfig.from_cli_overrides(overrides), args, overrides)
    assert "config_changes" not in run.info()
    args, overrides = parse_args(argv + ["trainer.algorithm.eps_clip_high=0.3"])
    record_run(SkyRLTrainConfig.from_cli_overrides(overrides), args, overrides)
    (change,) = json.loads((run_dir / "run.json").read_text())["config_changes"]
    assert change["changed"] == {"trainer.algorithm.eps_clip_high": ["0.28", "0.3"]}
    assert run.config()["skyrl"]["trainer"]["algorithm"]["eps_clip_high"] == 0.3


def test_a_damaged_dataset_a_run_would_reuse_is_refused_in_one_line(tmp_path):
    """A resumed run reuses RUN/data; a file there that is no dataset stops the entry with the
    reader's one-line error (what was wrong, what to do) before SkyRL loads it."""
    from rlkit.cluster.skyrl.entry import ensure_datasets
    from rlkit.errors import UsageError

    train, evals = ensure_datasets(str(tmp_path), 4, "test", 4)
    assert ensure_datasets(str(tmp_path), 4, "test", 4) == (train, evals)  # reused as written
    evals.write_bytes(b"not parquet")
    with pytest.raises(UsageError, match="is not a readable parquet file") as err:
        ensure_datasets(str(tmp_path), 4, "test", 4)
    assert "\n" not in str(err.value) and "rlkit data" in str(err.value)
