"""The game: mazes (generation, BFS, hashes), the pinned test sets, the rules on a frozen state,
rendering and answer parsing. Pure: numpy and Pillow only."""
