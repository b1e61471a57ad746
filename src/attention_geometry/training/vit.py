"""ViT image classifiers trained from scratch (objective `classifier`, docs/training.md "Vision"): the model,
the four self-attention initializations applied to its query/key/value layers, the image batches and the
classification loss, the held-out loss and accuracy, and the image processor saved with each snapshot.

The weights live in the stock transformers ViTForImageClassification (in memory its self-attention layers are
`vit.layers.{i}.attention.{q,k,v}_proj`; `save_pretrained` writes them under the checkpoint names
`vit.encoder.layer.{i}.attention.attention.{query,key,value}`, which the `vit` scoring family reads), so a
snapshot loads with AutoModelForImageClassification and AutoImageProcessor.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from attention_geometry.errors import UserError
from attention_geometry.training.hyper import INITS, Hyper, resolve_hyper
from attention_geometry.training.models import encoder_keywords, init_attention, seeded_quietly

__all__ = [
    "QKV_NAMES",
    "vit_config",
    "build_vit",
    "vit_attentions",
    "qk_layers",
    "pixel_batch",
    "classification_loss",
    "evaluate_images",
    "image_processor",
]

QKV_NAMES = ("q_proj", "k_proj", "v_proj")  # the ViT attention's query, key, value nn.Linear layers (in memory)


def vit_config(h: Hyper, image_size: int, num_channels: int, class_names: list[str]):
    """The ViTConfig of a run: its Hyper's shape and dropout on `image_size` x `image_size` images with
    `num_channels` channels, one class per name (id2label), SDPA attention, biased q/k/v (ViT's default)."""
    from transformers import ViTConfig

    if h.patch_size is None or image_size % h.patch_size:
        raise UserError(f"patch_size: {h.patch_size} does not divide the image size {image_size}")
    return ViTConfig(
        image_size=image_size,
        patch_size=h.patch_size,
        num_channels=num_channels,
        **encoder_keywords(h),
        qkv_bias=True,
        num_labels=len(class_names),
        id2label={i: str(n) for i, n in enumerate(class_names)},
        label2id={str(n): i for i, n in enumerate(class_names)},
        attn_implementation="sdpa",
    )


def vit_attentions(model) -> list:
    """The self-attention module of every layer (holding q_proj, k_proj, v_proj), in order."""
    return [layer.attention for layer in model.vit.layers]


def qk_layers(model) -> list[tuple]:
    """(query, key) nn.Linear layers of every layer, in order (for models.symmetry_penalty)."""
    return [(att.q_proj, att.k_proj) for att in vit_attentions(model)]


def build_vit(
    size: str = "vit-tiny",
    init: str = "standard",
    seed: int = 0,
    image_size: int = 8,
    num_channels: int = 1,
    class_names: list[str] | None = None,
    **overrides,
):
    """The initialized ViTForImageClassification of a run: the named size (training.hyper.IMAGE_SIZES) with
    `overrides` (Hyper fields), built under torch.manual_seed(seed), then `init` on every layer's query, key
    and value exactly as for the BERT models (models.apply_init: standard = the library's init, truncated
    normal(0, 0.02) weights and zero biases; symmetric = W_q := W_k; fresh = new nn.Linear layers with
    PyTorch's default init, drawn in the order q, k, v; symmetric-fresh = fresh, then W_q := W_k).
    Deterministic; the global torch RNG is restored afterwards."""
    if init not in INITS:
        raise UserError(f"init: unknown init {init!r} (known: {', '.join(INITS)})")
    h = overrides.pop("_hyper", None) or resolve_hyper(size, overrides)
    names = class_names if class_names is not None else [str(c) for c in range(10)]
    from transformers import ViTForImageClassification

    cfg = vit_config(h, image_size, num_channels, names)
    with seeded_quietly(seed):
        model = ViTForImageClassification(cfg)
        for att in vit_attentions(model):
            init_attention(att, init, QKV_NAMES)
    return model


def pixel_batch(images: np.ndarray, mean: list[float], std: list[float]) -> torch.Tensor:
    """float32 model input [n, C, H, W] of uint8 images: (x / 255 - mean) / std per channel (what the
    snapshot's image processor does: rescale by 1/255, then normalize)."""
    x = np.asarray(images, dtype=np.float32) * np.float32(1 / 255)
    m = np.asarray(mean, dtype=np.float32)[:, None, None]
    s = np.asarray(std, dtype=np.float32)[:, None, None]
    return torch.from_numpy((x - m) / s)


def classification_loss(model, pixel_values: torch.Tensor, labels: torch.Tensor, reduction: str = "sum"):
    """Summed (or mean) cross-entropy of the model's class logits (the stock forward) against `labels`."""
    logits = model(pixel_values=pixel_values).logits
    return F.cross_entropy(logits.float(), labels, reduction=reduction)


@torch.no_grad()
def evaluate_images(
    model, images: np.ndarray, labels: np.ndarray, n: int, mean, std, device, autocast, micro: int
) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) on the first n held-out images (the same fixed set for every run)."""
    was = model.training
    model.eval()
    total, correct = 0.0, 0
    for a in range(0, n, micro):
        x = pixel_batch(images[a : min(a + micro, n)], mean, std).to(device)
        y = torch.tensor(labels[a : min(a + micro, n)], dtype=torch.int64).to(device)  # a copy: labels may be read-only
        with autocast():
            logits = model(pixel_values=x).logits.float()
        total += float(F.cross_entropy(logits, y, reduction="sum"))
        correct += int((logits.argmax(-1) == y).sum())
    model.train(was)
    return total / max(n, 1), correct / max(n, 1)


def image_processor(image_size: int, mean: list[float], std: list[float]):
    """The ViTImageProcessor of a run's snapshots: no resizing (the images are image_size already), rescale
    by 1/255, normalize with the train split's per-channel mean and std (the run's normalization)."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    try:
        # without torchvision transformers serves its PIL backend under this name, with a warning (on import)
        hf_logging.set_verbosity_error()
        from transformers import ViTImageProcessor

        return ViTImageProcessor(
            do_resize=False,
            size={"height": image_size, "width": image_size},
            do_rescale=True,
            rescale_factor=1 / 255,
            do_normalize=True,
            image_mean=list(mean),
            image_std=list(std),
        )
    finally:
        hf_logging.set_verbosity(verbosity)
