"""Text encoders and decoders."""

from ..extract import Family, Stack, register

register(Family("bert", "encoder-only", "text", (
    Stack("encoder", "encoder.layer.{i}.attention.self.query.weight", "encoder.layer.{i}.attention.self.key.weight"),
)))
