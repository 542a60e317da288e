"""SkyRL's side on Qwen3-VL's real ids (`qwen_ckpt`: Qwen's vocabulary, chat template and image
processor, tiny random weights).

- The probe point of SkyRL's capture (`rlkit.model.action_tag.probe_point`/`move_choices`, what
  `EngineProbe` asks the engine at): with Qwen's BPE `.<`, ` <`, `:<` and `>.` are single
  tokens, so where the move word starts depends on what precedes the tag.
- rlkit's generator (`RlkitVLMGenerator`, SkyRL's VLM loop with the observation slice fixed)
  with a scripted engine answering the same text as differently drawn ids: canonical, one token
  per character, spaces split off their words, one byte-level token per UTF-8 byte, and a drawn
  `<|image_pad|>`. No sample may desync (every image-pad run matches its image, the checkpoint's
  own forward runs on it) and the observations are the canonical run's, token for token.
"""

from __future__ import annotations

import pytest
import scripted_engine as se
import torch
from skyrl.train.dataset import PromptDataset
from test_generator import forward, pads_match, play, preset_config, session_of, split
from transformers import AutoProcessor, Qwen3VLForConditionalGeneration

from rlkit.cli.main import main as rlkit_main
from rlkit.cluster.skyrl.generator import DESYNC_METRIC, RlkitVLMGenerator
from rlkit.maze.core import Action
from rlkit.model.action_tag import move_choices, probe_point
from rlkit.model.chat import ChatEncoder

IM_END, ENDOFTEXT, IMAGE_PAD = 151645, 151643, 151655


@pytest.fixture(scope="module")
def qwen_processor(qwen_ckpt):
    return AutoProcessor.from_pretrained(qwen_ckpt)


@pytest.fixture(scope="module")
def qwen_tok(qwen_processor):
    tok = qwen_processor.tokenizer
    assert len(tok) == 151_669 and tok.eos_token_id == IM_END
    assert tok.convert_tokens_to_ids("<|image_pad|>") == IMAGE_PAD
    if tok.chat_template is None:  # Qwen's VL repos keep it beside the processor only
        tok.chat_template = qwen_processor.chat_template  # SkyRL's dataset renders with it
    return tok


# --- the capture's probe point


def test_probe_points_on_qwen_ids(qwen_tok):
    tok = qwen_tok

    def ids(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False)

    def pieces(text: str) -> list[str]:
        return tok.convert_ids_to_tokens(ids(text))

    # the tag's `<` merges with what precedes it; its `>` stands alone before the move word
    assert pieces("I go <action>up</action>") == [
        *("I", "Ġgo", "Ġ<", "action", ">", "up", "</", "action", ">")
    ]
    assert pieces(".<action>")[0] == ".<" and pieces(":<action>")[0] == ":<"
    assert pieces("</action>.<action>left")[2:4] == [">.", "<"]
    words = tuple(tok.convert_tokens_to_ids(a.word) for a in Action)
    assert words == (454, 2923, 2359, 1291)  # up down left right: one token each
    assert move_choices(tok, "") == words

    eos = [IM_END]
    assert probe_point(tok, ids("I go <action>up</action>") + eos) == (5, "")
    assert probe_point(tok, ids(".<action>down</action>") + eos) == (3, "")
    assert probe_point(tok, ids("ok:<action>left</action>") + eos) == (4, "")
    assert probe_point(tok, ids(":<action>")) == (3, "")  # the answer stops at the tag
    # the last tag (the one the relaxed parser obeys), after `>.` took the full stop
    two = ids("<action>up</action>.<action>left</action>")
    assert probe_point(tok, two) == (len(ids("<action>up</action>.<action>")), "")
    assert tok.decode(two[: probe_point(tok, two)[0]]).endswith(".<action>")
    # the same text drawn as other ids: the point is where the tag ends in each
    text = "\u2191 I go <action>up</action>"
    for tokenize in (se.canonical, se.spelled, se.split_space, se.byte_spelled):
        drawn = tokenize(tok, text, 0) + eos
        k, tail = probe_point(tok, drawn)
        assert tail == "" and tok.decode(drawn[:k]) == "\u2191 I go <action>", tokenize.__name__
        assert "up</action>".startswith(tok.decode(drawn[k : k + 1])), tokenize.__name__
    # `>` merged with what follows (`>,`): the candidates would all be `>`, so no probe
    assert probe_point(tok, ids("<action") + ids(">,")) == (2, ">")
    assert move_choices(tok, ">") is None
    assert probe_point(tok, ids("up, I think")) is None


# --- rlkit's generator on drawn ids that are not the text's canonical ones


@pytest.fixture(scope="module")
def qwen_encoder(qwen_processor) -> ChatEncoder:
    return ChatEncoder(qwen_processor)


@pytest.fixture(scope="module")
def qwen_model(qwen_ckpt):
    return Qwen3VLForConditionalGeneration.from_pretrained(qwen_ckpt, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def qwen_rows(tmp_path_factory, qwen_tok):
    out = tmp_path_factory.mktemp("qwen-data")
    assert rlkit_main(["data", "--out", str(out), "--train", "4", "--set", "test"]) == 0
    return PromptDataset([str(out / "eval.parquet")], qwen_tok, 4096, num_workers=1)


MAZES, SAMPLES = range(3), 2


@pytest.fixture(scope="module")
def canonical_run(qwen_rows, qwen_encoder):
    """The canonical ids' run for answer texts without their end of turn (as vLLM decodes) or
    with it (as SkyRL's client decodes): what every other drawing must reproduce."""
    runs = {}

    def run(keeps_special: bool = False):
        if keeps_special not in runs:
            cfg = preset_config(max_input_length=32768)
            runs[keeps_special] = play(
                cfg,
                qwen_rows,
                qwen_encoder,
                se.arrow_oracle,
                MAZES,
                SAMPLES,
                RlkitVLMGenerator,
                se.canonical,
                keeps_special,
            )
        return runs[keeps_special]

    return run


def play_ours(rows, encoder, tokenize, keeps_special: bool = False):
    """rlkit's generator playing the arrow oracle with `tokenize`'s drawn ids (long inputs
    allowed: Qwen's per-character spellings run long)."""
    cfg = preset_config(max_input_length=32768)
    return play(
        cfg,
        rows,
        encoder,
        se.arrow_oracle,
        MAZES,
        SAMPLES,
        RlkitVLMGenerator,
        tokenize,
        keeps_special,
    )


@pytest.mark.parametrize("keeps_special", [False, True], ids=["vllm-text", "skyrl-client-text"])
@pytest.mark.parametrize(
    "tokenize",
    [se.canonical, se.spelled, se.split_space, se.byte_spelled],
    ids=lambda f: f.__name__,
)
def test_drawn_ids_keep_their_sample_and_the_observations(
    qwen_rows, qwen_encoder, qwen_model, canonical_run, tokenize, keeps_special
):
    _, canon, _ = canonical_run(keeps_special)
    batch, ours, engine = play_ours(qwen_rows, qwen_encoder, tokenize, keeps_special)
    assert ours["rollout_metrics"][DESYNC_METRIC] == 0
    for i in range(len(batch["prompts"])):
        assert pads_match(ours, i, qwen_encoder)
        sampled, observed = split(ours, i)
        assert sampled == sum(engine.sessions[session_of(batch, i)].ids, [])
        assert observed == split(canon, i)[1], "observations exactly as rendered"
        assert ours["prompt_token_ids"][i] == canon["prompt_token_ids"][i]
        assert sum(ours["rewards"][i]) == sum(canon["rewards"][i]) == 1.0
    assert torch.isfinite(forward(qwen_model, ours, len(batch["prompts"]) - 1)).all()


def test_a_drawn_image_pad_costs_its_sample_only(
    qwen_rows, qwen_encoder, qwen_model, canonical_run
):
    _, canon, _ = canonical_run()
    stray = se.drawing("<|image_pad|>", frozenset({0}))
    batch, ours, engine = play_ours(qwen_rows, qwen_encoder, stray)
    guarded = [i for i, t in enumerate(batch["trajectory_ids"]) if t.repetition_id == 0]
    assert ours["rollout_metrics"][DESYNC_METRIC] == len(guarded) == len(MAZES)
    for i in range(len(batch["prompts"])):
        assert pads_match(ours, i, qwen_encoder)
        if i in guarded:
            assert not any(ours["loss_masks"][i]) and sum(ours["rewards"][i]) == 1.0
            # every pad of the response became padding (the drawn ones and the later images',
            # whose pixels went); everything else is the canonical sample
            kept = [t for t in ours["response_ids"][i] if t != ENDOFTEXT]
            assert kept == [t for t in canon["response_ids"][i] if t != IMAGE_PAD]
        else:
            for key in ("response_ids", "loss_masks", "rewards"):
                assert ours[key][i] == canon[key][i], key
    assert torch.isfinite(forward(qwen_model, ours, guarded[0])).all()


@pytest.mark.parametrize("keeps_special", [False, True], ids=["vllm-text", "skyrl-client-text"])
def test_an_answer_ended_by_endoftext(
    qwen_rows, qwen_encoder, qwen_model, canonical_run, keeps_special
):
    """vLLM stops at every eos id of Qwen's generation config: an answer may end with
    `<|endoftext|>` instead of `<|im_end|>`. The template then closes the turn itself: that
    `<|im_end|>` is observation, where the canonical run's sampled one stood; whether the
    answer's text shows the `<|endoftext|>` or not, the rest is the canonical sample."""
    _, canon, _ = canonical_run(False)

    def ended_by_endoftext(tok, text, rep):
        return [*se.canonical(tok, text, rep), ENDOFTEXT]

    batch, ours, engine = play_ours(qwen_rows, qwen_encoder, ended_by_endoftext, keeps_special)
    assert ours["rollout_metrics"][DESYNC_METRIC] == 0
    for i in range(len(batch["prompts"])):
        assert pads_match(ours, i, qwen_encoder)
        drawn = engine.sessions[session_of(batch, i)].ids
        assert all(d[-1] == ENDOFTEXT for d in drawn)
        assert split(ours, i)[0] == sum(drawn, [])
        # the last answer ends the episode: no template turn end follows it
        assert [t for t in ours["response_ids"][i] if t != ENDOFTEXT] == canon["response_ids"][i][
            :-1
        ]
        assert split(ours, i)[1].count(IM_END) == split(canon, i)[1].count(IM_END) + len(drawn) - 1
        assert sum(ours["rewards"][i]) == 1.0
    assert torch.isfinite(forward(qwen_model, ours, 0)).all()
