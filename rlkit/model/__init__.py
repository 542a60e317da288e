"""Qwen3-VL: the tiny offline model, one loader for any checkpoint, env messages -> model inputs,
batched vision attention, padded batches with logprobs, and the model policy. Torch lives here
(`rlkit.model.config` excepted)."""
