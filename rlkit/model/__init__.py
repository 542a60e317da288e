"""Qwen3-VL: the tiny offline model, one loader for any checkpoint, env messages -> model inputs,
padded batches with logprobs, the model policy and its vLLM twin (`vllm_engine`, `vllm_rows`,
`vllm_policy`: the only modules that import vllm). Torch lives here (`config` excepted)."""
