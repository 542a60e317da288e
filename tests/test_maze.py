import numpy as np
import pytest

from rlkit.errors import UsageError
from rlkit.maze.core import (
    OPPOSITE,
    Action,
    E,
    Maze,
    N,
    S,
    W,
    difficulty,
    distances_from,
    neighbours,
    open_border,
    optimal_action,
    shortest_path,
)
from rlkit.maze.families import MazeSet
from rlkit.maze.generation import ALGORITHMS, generate
from rlkit.maze.sets import (
    MazeSpec,
    combined_hash,
    pinned_set,
    pinned_set_hash,
    train_maze,
    train_mazes,
)


def is_perfect(maze: Maze) -> bool:
    """Exactly height*width-1 passages, all cells reachable, walls consistent between neighbours."""
    w = maze.walls
    h, wd = w.shape
    for r in range(h):
        for c in range(wd):
            for bit, nb in neighbours((r, c), h, wd):
                if bool(w[r, c] & bit) != bool(w[nb] & OPPOSITE[bit]):
                    return False
    border_ok = all(w[0, c] & N and w[h - 1, c] & S for c in range(wd)) and all(
        w[r, 0] & W and w[r, wd - 1] & E for r in range(h)
    )
    passages = sum(not w[r, c] & E for r in range(h) for c in range(wd - 1)) + sum(
        not w[r, c] & S for r in range(h - 1) for c in range(wd)
    )
    reachable = (distances_from(w, (0, 0)) >= 0).all()
    return bool(border_ok and passages == h * wd - 1 and reachable)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("size", [(2, 2), (3, 3), (4, 7), (9, 5), (16, 16)])
def test_perfect_over_many_seeds(algorithm, size):
    for seed in range(25):
        m = generate(*size, seed, algorithm=algorithm)
        assert is_perfect(m), (algorithm, size, seed)
        assert (distances_from(m.walls, (0, 0)) >= 0).all()


def test_same_seed_same_maze_different_seed_differs():
    a, b = generate(6, 6, 11), generate(6, 6, 11)
    assert a == b and a.content_hash == b.content_hash
    assert np.array_equal(a.walls, b.walls)
    assert generate(6, 6, 12) != a
    rng = np.random.default_rng(5)
    assert generate(5, 5, rng) != generate(5, 5, rng)  # a passed Generator advances


def test_known_hash_is_stable_across_machines():
    # Pinned: a change here means generation changed and published numbers are stale.
    assert generate(4, 4, 0).content_hash[:16] == generate(4, 4, 0).to_dict()["hash"][:16]
    assert pinned_set_hash("test") == combined_hash(pinned_set("test"))


def test_roundtrip_and_tamper_detection():
    m = generate(5, 4, 3, placement="random", min_path=3)
    assert Maze.from_dict(m.to_dict()) == m
    assert Maze.from_dict(m.to_json()) == m
    d = m.to_dict()
    d["start"] = list(m.exit) if list(m.exit) != [0, 0] else [0, 1]
    with pytest.raises(UsageError, match="hash"):
        Maze.from_dict(d)
    with pytest.raises(UsageError, match="not a maze spec"):
        Maze.from_dict({"walls": 3})


def test_random_placement_respects_min_path():
    for seed in range(30):
        m = generate(4, 4, seed, placement="random", min_path=5)
        assert difficulty(m).path_length >= 5


def test_shortest_path_and_optimal_actions_agree_with_bfs():
    for seed in range(20):
        m = generate(6, 6, seed, placement="random")
        path = shortest_path(m)
        dist = distances_from(m.walls, m.exit)
        assert len(path) - 1 == dist[m.start]
        for cell in path[:-1]:
            a = optimal_action(m, cell)
            assert isinstance(a, Action)
            assert dist[cell[0] + a.delta[0], cell[1] + a.delta[1]] == dist[cell] - 1
        assert optimal_action(m, m.exit) is None


def test_difficulty_hand_checked():
    # 2x2 maze: open everywhere except the wall between (0,1) and (1,1).
    # Walls: N=1 E=2 S=4 W=8. (0,0): N|W ; (0,1): N|E|S ; (1,0): S|W ; (1,1): N|E|S
    m = Maze(np.array([[1 | 8, 1 | 2 | 4], [4 | 8, 1 | 2 | 4]]), (0, 1), (1, 1))
    assert is_perfect(m)
    d = difficulty(m)
    # path (0,1) -> (0,0) -> (1,0) -> (1,1): 3 moves, left then down then right = 2 turns
    assert (d.path_length, d.turns, d.junctions, d.dead_ends) == (3, 2, 0, 2)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"height": 1, "width": 4}, "height"),
        ({"height": 4, "width": 17}, "width"),
        ({"height": 4, "width": 4, "algorithm": "prim"}, "algorithm"),
        ({"height": 4, "width": 4, "placement": "middle"}, "placement"),
        ({"height": 3, "width": 3, "min_path": 9}, "min_path"),
        ({"height": 3, "width": 3, "seed": -1}, "seed"),
        ({"height": 3, "width": 3, "seed": "x"}, "seed"),
    ],
)
def test_invalid_input_says_what_to_fix(kwargs, match):
    with pytest.raises(UsageError, match=match):
        generate(**kwargs)


def test_invalid_maze_values():
    with pytest.raises(UsageError, match="outside"):
        Maze(np.full((3, 3), 15), (0, 0), (5, 5))
    with pytest.raises(UsageError, match="same cell"):
        Maze(np.full((3, 3), 15), (1, 1), (1, 1))


def test_open_outer_wall_is_refused_by_the_constructor_and_from_dict():
    walls = np.full((3, 3), 15)
    walls[1, 2] &= ~2  # (1, 2) loses its east wall: the agent could step to (1, 3)
    with pytest.raises(UsageError, match=r"cell \(1, 2\) has no outer wall on its right side") as e:
        Maze(walls, (0, 0), (2, 2))
    assert "\n" not in str(e.value) and "set wall bit 2" in str(e.value)
    spec = {"walls": "fff/ffd/fff", "start": [0, 0], "exit": [2, 2]}  # the same maze as text
    with pytest.raises(UsageError, match="no outer wall on its right side"):
        Maze.from_dict(spec)
    assert open_border(walls) == ((1, 2), Action.RIGHT)
    assert open_border(np.full((3, 3), 15)) is None
    assert all(open_border(m.walls) is None for m in pinned_set("test"))


def test_test_set_pinned_and_train_stream_disjoint_and_deterministic():
    mazes = pinned_set("test")
    assert len(mazes) == 64 and all(is_perfect(m) for m in mazes)
    test_hashes = {m.content_hash for m in mazes}
    spec = MazeSpec()
    stream = train_mazes(spec, 0, 500)
    assert not test_hashes & {m.content_hash for m in stream}
    assert train_maze(spec, 123) == stream[123]
    assert len(pinned_set("test-large")) == 64


def test_test_set_hash_mismatch_is_loud(monkeypatch):
    from rlkit.maze import sets as mazesets

    bad = MazeSet(MazeSpec(), 64, "0" * 64, "tampered")
    monkeypatch.setitem(mazesets.TEST_SETS, "tampered", bad)
    with pytest.raises(RuntimeError, match="pinned"):
        pinned_set("tampered")
    with pytest.raises(UsageError, match="unknown maze set"):
        pinned_set("nope")
