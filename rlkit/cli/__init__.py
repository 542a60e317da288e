"""The `rlkit` command (`main`) and its cluster subcommands (`cluster`)."""
