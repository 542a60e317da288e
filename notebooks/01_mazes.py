# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: rlkit
#     language: python
#     name: rlkit
# ---

# %% [markdown]
# # 01 · Mazes
#
# The pinned 64-maze test set (3x3 cells, random start and exit, 12-turn budget) with each maze's
# difficulty: shortest path length (L), junctions (J) and turns (T) on the path. Then an
# interactive browser over sizes, seeds and generators, and the two views a model can get:
# the image and the ASCII grid.
#
# In every picture the agent is red, the exit green, walls black; the trail of visited cells
# is grey. The model sees the maze this way, one picture per turn.

# %% tags=["parameters"]
out_dir = "runs/demo"  # where pictures go (OUT/plots)
test_set_name = "test"  # a pinned set from rlkit.maze.sets
gallery_size = 64  # mazes drawn in the gallery
browser_size = 5  # the browser's starting size (cells per side)

# %% [markdown]
# The cell above is tagged `parameters`: every setting of this notebook, with its default.
# `make demo` runs the notebooks with papermill, which adds a cell headed `# Parameters` right
# after it holding the demo's values; those are the ones that count in an executed notebook.
# Relative paths (`out_dir="runs/demo"`) mean the project root (or `$RLKIT_HOME`), wherever
# the notebook runs from.

# %%
from collections import Counter

from IPython.display import Image

from rlkit.maze.core import difficulty
from rlkit.maze.sets import pinned_set
from rlkit.notebook import plots, visgym, workbench
from rlkit.notebook.paths import home_path
from rlkit.notebook.widgets import MazeBrowser, maze_view

out_dir = home_path(out_dir)  # relative: against the project root, as `make demo` runs

mazes = pinned_set(test_set_name)
fig = plots.maze_gallery(mazes[:gallery_size], title=f"Test set '{test_set_name}'")
workbench.save_png(fig, out_dir, "test_mazes")
fig

# %% [markdown]
# *Figure: the test mazes, each titled with its difficulty (L: shortest-path length, J:
# junctions, T: turns on that path; [glossary](../docs/glossary.md)). What a usable test set
# looks like: a spread of path lengths (the count below), so a solve rate says something about
# short and long mazes alike, and no maze the turn budget cannot cover.*

# %% [markdown]
# How many test mazes have each shortest-path length (the main difficulty axis: a maze whose exit
# is 6 moves away leaves less slack in a 12-turn budget than one 2 moves away):

# %%
sorted(Counter(difficulty(m).path_length for m in mazes).items())

# %% [markdown]
# The maze browser: generate any maze the library can (size, seed, generator, where start and
# exit go) and see it as the model would.

# %%
MazeBrowser(size=browser_size)

# %% [markdown]
# ASCII vs image: the same maze as text and as pixels.

# %%
maze, png, ascii_grid, stats = maze_view(browser_size, seed=3)
print(stats)
print(ascii_grid)
Image(png)

# %% [markdown]
# ## The seed's own task: VisGym's maze_2d beside rlkit's mazes
#
# The seed's reference run (43.75% -> over 95%) played VisGym's `maze_2d/easy`, pinned here as
# `visgym-easy` (VisGym's own mazes for seeds 0..63). It is another game: walls are whole grey
# squares, the agent a blue disc, the target a red square; one action moves one square, and
# only `stop` on the target wins. Row 2 is VisGym's picture, row 3 the same mazes as the tiny
# model's `local-tiny-visgym` preset shows them (8 px a square, one vision patch each).

# %%
fig = visgym.side_by_side(4)
workbench.save_png(fig, out_dir, "visgym_beside_rlkit")
fig

# %% [markdown]
# *Figure: rlkit's `test` mazes (top) and VisGym's (below) at their start. What to check: the
# two lower rows show the same maze, position and target; only the scale differs.*
#
# The sets side by side (shortest paths in moves; a VisGym episode also needs its `stop`):

# %%
visgym.set_facts()

# %% [markdown]
# **Next:** 02 scores the baselines on the test set, the floor and ceiling any trained model
# must be read against.
