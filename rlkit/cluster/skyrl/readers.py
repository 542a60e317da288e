"""What a SkyRL run wrote, read as rlkit types: the names SkyRL's glue and its tests import.

The code lives in the run package, which neither backend owns (`rlkit.run.skyrl_layout`: run
dir, checkpoints, exports; `rlkit.run.skyrl_dumps`: eval dumps as EvalResults and
Trajectories); `rlkit.run.open_run` reads a whole SkyRL run as it reads a local one.
"""

from rlkit.run.skyrl_dumps import (
    BadRecordsWarning,
    EvalDump,
    EvalEpisode,
    dump_trajectories,
    episodes_to_result,
    read_eval_dump,
    read_eval_dumps,
    read_eval_episodes,
    read_step_dir,
    split_turns,
    to_trajectory,
)
from rlkit.run.skyrl_layout import (
    LATEST_MARKER,
    Checkpoint,
    SkyRLRun,
    find_skyrl_run,
    is_skyrl_run,
    latest_step,
    list_checkpoints,
)

__all__ = [
    "LATEST_MARKER",
    "BadRecordsWarning",
    "Checkpoint",
    "EvalDump",
    "EvalEpisode",
    "SkyRLRun",
    "dump_trajectories",
    "episodes_to_result",
    "find_skyrl_run",
    "is_skyrl_run",
    "latest_step",
    "list_checkpoints",
    "read_eval_dump",
    "read_eval_dumps",
    "read_eval_episodes",
    "read_step_dir",
    "split_turns",
    "to_trajectory",
]
