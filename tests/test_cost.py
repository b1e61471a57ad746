"""training/cost.py's FLOP count of an update against torch's own count (FlopCounterMode) of one forward and
backward on the CPU, for every objective and the ViT, with the attention run by SDPA's math backend (whose
products FlopCounterMode sees; the CPU's fused kernel it does not count)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from attention_geometry.training.batches import make_batch, mask_keys, n_loss_tokens
from attention_geometry.training.cost import expected_predicted, measured_cpu_peak, update_flops
from attention_geometry.training.hyper import resolve_hyper
from attention_geometry.training.models import build_model, lm_loss
from attention_geometry.training.vit import build_vit, classification_loss

SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


def _torch_count(fn) -> int:
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        fn().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("objective", ["encoder", "decoder", "decoder-paper"])
@pytest.mark.parametrize("shape", [(2, 32, 2, 64, 97, 24, 4), (3, 48, 4, 80, 131, 40, 3)])
def test_the_update_flops_are_torchs_count(objective, shape):
    layers, d, heads, inter, vocab, n, batch = shape
    h = resolve_hyper(
        "tiny",
        dict(num_layers=layers, hidden_size=d, num_heads=heads, intermediate_size=inter, vocab_size=vocab),
    )
    model = build_model("tiny", objective, "standard", 0, special_tokens=SPECIAL, _hyper=h).train()
    blocks = np.random.default_rng(1).integers(5, vocab, size=(batch, n))
    blocks[:, 0], blocks[:, -1] = SPECIAL["cls"], SPECIAL["sep"]
    inp, lab = make_batch(blocks, objective, mask_keys(0, 1, np.arange(batch)), h, SPECIAL, vocab)
    counted = _torch_count(lambda: lm_loss(model, torch.from_numpy(inp), torch.from_numpy(lab), objective))
    predicted = n_loss_tokens(lab, objective)
    assert update_flops(h, objective, n, predicted, sequences=batch) == counted
    # by hand for the first shape: 3 x (layers: 96 positions x 2 x (4 x 32^2 + 2 x 32 x 64), attention: 96 x 4 x 24 x
    # 32, head: predicted x 2 x (32^2 + 32 x 97)) x 2 layers
    if shape[0] == 2:
        hand = 3 * (2 * 96 * (2 * (4 * 1024 + 2 * 32 * 64) + 4 * 24 * 32) + predicted * 2 * (1024 + 32 * 97))
        assert update_flops(h, objective, n, predicted, sequences=batch) == hand


def test_the_vit_update_flops_are_torchs_count():
    h = resolve_hyper("vit-tiny", {})
    labels = [str(i) for i in range(10)]
    model = build_vit("vit-tiny", "standard", 0, image_size=8, num_channels=1, class_names=labels, _hyper=h).train()
    x, y = torch.full((3, 1, 8, 8), 0.3), torch.tensor([1, 2, 3])
    counted = _torch_count(lambda: classification_loss(model, x, y))
    n = (8 // h.patch_size) ** 2 + 1
    assert update_flops(h, "classifier", n, 3, sequences=3, num_channels=1, num_labels=10) == counted


def test_the_expected_positions_through_the_head():
    h = resolve_hyper("tiny", {"mlm_probability": 0.15})
    assert expected_predicted(h, "encoder", 66) == pytest.approx(0.15 * 64)
    assert expected_predicted(h, "decoder", 66) == 65
    assert expected_predicted(h, "classifier", 17) == 1


def test_the_cpu_peak_is_a_measured_rate_that_draws_no_random_number():
    torch.manual_seed(5)
    before = torch.get_rng_state()
    rate = measured_cpu_peak(1, size=64, seconds=0.01)
    assert torch.equal(torch.get_rng_state(), before)
    assert 1e8 < rate < 1e13  # 0.1 GFLOP/s to 10 TFLOP/s on one thread
