"""The tiny model's tokenizer: byte-level BPE trained offline on the env's own texts; the action
tags and move words are single tokens: docs/models-and-engines.md#the-tiny-models-tokenizer-modeltokenizerpy."""

from __future__ import annotations

from dataclasses import replace

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from rlkit.env.maze_env import EnvConfig, MazeEnv, observation_message, system_prompt
from rlkit.maze import rules
from rlkit.maze.core import Action
from rlkit.maze.generation import generate
from rlkit.maze.parsing import format_action
from rlkit.maze.render import to_ascii

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
"""Qwen2/3-VL's special tokens, in Qwen's order, so ids are assigned as a block after the BPE."""
ANSWER_TOKENS = ("<action>", "</action>", *(a.word for a in Action))
"""Added as whole tokens: the constrained sampler chooses among the move-word tokens only."""

# Qwen's template, reduced to what the env sends: string or content-part messages, images as
# OpenAI `image_url` parts or HF `image` parts, each becoming vision_start + image_pad + vision_end
# (the encoder expands the pad to the image's token count, as Qwen's processor does).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}"
    "{%- elif part['type'] in ('image', 'image_url') -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

_BAD_ANSWERS = (
    "",
    "hello",
    "<action></action>",
    "<action>jump</action>",
    "<action>up, left</action>",
    "<action>up</action><action>up</action>",
)


def corpus() -> list[str]:
    """Every text the env can show or expect, over its prompt styles and observation modes."""
    maze = generate(3, 3, 0)
    # Roles and answers recur every turn: weight them so each becomes one or two tokens.
    texts = [format_action(a) for a in Action] * 16 + ["system\n", "user\n", "assistant\n"] * 64
    for style in ("compact", "full"):
        for obs in ("image", "text", "both"):
            for moves in (1, 2, 3):
                for max_turns in (12, 18, 24):
                    cfg = EnvConfig(
                        max_turns=max_turns,
                        observation=obs,
                        moves_per_turn=moves,
                        prompt_style=style,
                    )
                    texts.append(system_prompt(cfg))
            cfg = EnvConfig(observation=obs, prompt_style=style)
            state = rules.initial(maze)
            for turn in range(cfg.max_turns):
                msg = observation_message(replace(state, turns=turn), cfg)
                texts += _texts_of(msg)
            for parser in ("strict", "relaxed"):
                env = MazeEnv(replace(cfg, parser=parser), {"maze": maze})
                env.init()
                for bad in _BAD_ANSWERS:
                    out = env.step(bad)
                    for m in out["observations"]:
                        texts += _texts_of(m)
    texts.append(to_ascii(rules.initial(generate(6, 6, 1))))
    return texts


def _texts_of(message: dict) -> list[str]:
    content = message["content"]
    if isinstance(content, str):
        return [content]
    return [p["text"] for p in content if p.get("type") == "text"]


def build_tokenizer(vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """Train the byte-level BPE (milliseconds) and wrap it as an HF fast tokenizer."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus() * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        padding_side="left",
        model_max_length=32768,
    )
    fast.add_tokens(list(ANSWER_TOKENS))
    for word in ANSWER_TOKENS:
        if len(fast(word)["input_ids"]) != 1:
            raise RuntimeError(f"tokenizer split {word!r}: the constrained answer needs it whole")
    return fast
