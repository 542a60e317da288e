"""rlkit's vision-tower speedups compute what transformers' own code does: the batched
attention over same-sized images and the patch convolution as one matrix product."""

import copy

import torch

from rlkit.model.load import LinearPatchEmbed, uniform_varlen_attention, use_linear_patch_embed


def _reference(q, k, v, lengths):
    outs = []
    for qs, ks, vs in zip(*(torch.split(t, lengths, dim=2) for t in (q, k, v)), strict=True):
        att = torch.softmax(qs @ ks.transpose(-1, -2) / q.shape[-1] ** 0.5, -1)
        outs.append(att @ vs)
    return torch.cat(outs, dim=2).transpose(1, 2)


def test_uniform_and_mixed_lengths_match_per_image_attention():
    g = torch.Generator().manual_seed(0)
    for lengths in ([16, 16, 16, 16], [4, 9, 16]):
        total = sum(lengths)
        q, k, v = (torch.randn(1, 3, total, 8, generator=g) for _ in range(3))
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
        out, _ = uniform_varlen_attention(None, q, k, v, scaling=8**-0.5, cu_seq_lens_q=cu)
        assert out.shape == (1, total, 3, 8)
        torch.testing.assert_close(out, _reference(q, k, v, lengths), atol=1e-5, rtol=1e-5)


def test_loaded_model_uses_it_and_outputs_are_unchanged(tmp_path):
    from rlkit.env.maze_env import make_env
    from rlkit.maze.sets import pinned_set
    from rlkit.model.batching import build_batch
    from rlkit.model.build import build_tiny
    from rlkit.model.load import load

    lm = load(build_tiny(tmp_path / "m"))
    assert lm.model.config.vision_config._attn_implementation.startswith("rlkit_flash")
    batch = build_batch(lm, [lm.encoder.encode(make_env(m).init()[0]) for m in pinned_set()[:6]])
    with torch.no_grad():
        fast = lm.model.model(**batch.model_inputs()).last_hidden_state
        lm.model.config.vision_config._attn_implementation = "sdpa"
        slow = lm.model.model(**batch.model_inputs()).last_hidden_state
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)


def _embeds(seed: int = 0):
    """The tiny model's patch embedding, as transformers builds it and switched to linear."""
    from transformers import Qwen3VLVisionConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionPatchEmbed

    from rlkit.model.config import TinyConfig

    tiny = TinyConfig()
    cfg = Qwen3VLVisionConfig(
        hidden_size=tiny.vision_hidden, patch_size=tiny.patch_size, temporal_patch_size=2
    )
    torch.manual_seed(seed)
    conv = Qwen3VLVisionPatchEmbed(cfg)
    linear = copy.deepcopy(conv)
    use_linear_patch_embed(_Wrapper(linear))
    return conv, linear


class _Wrapper(torch.nn.Module):
    """The attribute path a Qwen3-VL model has to its patch embedding (model.visual.patch_embed)."""

    def __init__(self, embed):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.visual = torch.nn.Module()
        self.model.visual.patch_embed = embed


def test_linear_patch_embed_equals_the_conv_in_outputs_and_gradients():
    conv, linear = _embeds()
    assert isinstance(linear, LinearPatchEmbed) and not isinstance(conv, LinearPatchEmbed)
    x = torch.randn(300, conv.proj.weight[0].numel(), generator=torch.Generator().manual_seed(1))
    outs = [m(x) for m in (conv, linear)]
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-5)
    for out in outs:
        out.pow(2).sum().backward()
    for name in ("weight", "bias"):
        grads = [getattr(m.proj, name).grad for m in (conv, linear)]
        torch.testing.assert_close(grads[1], grads[0], atol=1e-4, rtol=1e-4)


def test_linear_patch_embed_keeps_the_state_dict_survives_deepcopy_and_is_idempotent():
    conv, linear = _embeds()
    assert conv.state_dict().keys() == linear.state_dict().keys()
    for k, v in conv.state_dict().items():
        assert torch.equal(v, linear.state_dict()[k])
    twin = copy.deepcopy(linear)  # the KL reference is a copy: it must stay linear, own weights
    assert type(twin) is LinearPatchEmbed and twin.proj.weight is not linear.proj.weight
    use_linear_patch_embed(_Wrapper(linear))
    assert type(linear) is LinearPatchEmbed


def test_every_model_rlkit_loads_computes_the_fast_way_and_saves_plain_checkpoints(tmp_path):
    from transformers import Qwen3VLForConditionalGeneration

    from rlkit.env.maze_env import make_env
    from rlkit.maze.sets import pinned_set
    from rlkit.model.batching import build_batch
    from rlkit.model.build import build_tiny
    from rlkit.model.load import load

    lm = load(build_tiny(tmp_path / "m"))
    assert type(lm.model.model.visual.patch_embed) is LinearPatchEmbed
    lm.model.save_pretrained(tmp_path / "saved")
    plain = Qwen3VLForConditionalGeneration.from_pretrained(tmp_path / "saved").eval()
    assert type(plain.model.visual.patch_embed) is not LinearPatchEmbed
    batch = build_batch(lm, [lm.encoder.encode(make_env(m).init()[0]) for m in pinned_set()[:4]])
    with torch.no_grad():
        fast = lm.model(**batch.model_inputs()).logits
        slow = plain(**batch.model_inputs()).logits
    torch.testing.assert_close(fast, slow, atol=1e-4, rtol=1e-4)
