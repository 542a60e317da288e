import torch

from rlkit.model.vision_attention import uniform_varlen_attention


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
