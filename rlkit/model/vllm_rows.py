"""A vLLM logits processor that never lets a row without a token be drawn (imports vLLM):
docs/models-and-engines.md#rows-without-a-token-modelvllm_rowspy."""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

LOGITS_PROCESSOR = "rlkit.model.vllm_rows:NoTokenRows"
"""The processor as vLLM's `logits_processors` names it (module:class), for any executor."""
FIRST_ROW_KEY = "rlkit_first_row_without_token"
"""`additional_config` key: the first row with no token (the tokenizer's length)."""


class NoTokenRows(LogitsProcessor):
    """-inf on the logits of every row the tokenizer has no token for (see the module)."""

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        extra = vllm_config.additional_config
        if isinstance(extra, dict) and extra.get(FIRST_ROW_KEY) is not None:
            self.first = int(extra[FIRST_ROW_KEY])
            return
        from transformers import AutoTokenizer

        model = vllm_config.model_config
        tok = AutoTokenizer.from_pretrained(
            model.tokenizer, trust_remote_code=model.trust_remote_code
        )
        self.first = len(tok)

    def is_argmax_invariant(self) -> bool:
        return False  # a padding row may hold the largest logit: greedy requests need it too

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        pass  # the same rows for every request

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.first < logits.shape[-1]:
            logits[:, self.first :] = float("-inf")
        return logits
