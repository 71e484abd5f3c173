"""Text conditioning of the reference text2video model: the text encoder and the scene prior.

The prompt is split into lowercase words, each hashed into an embedding table; mean and
attention pooling plus a small MLP give the text embedding. The embedding parameterises the
model's data prior: a hierarchical one, where a composition code drawn from the seed and the
embedding give a latent field of travelling waves and orbiting blobs (palette, directions,
frequencies and speeds are projected from them), around which the latent varies as a Gaussian.
Weights are drawn once from a fixed seed, standing in for a trained checkpoint.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F

WEIGHTS_SEED = 0x5EED_7272  # fixed: the model's "checkpoint"
LATENT_CHANNELS = 8
VOCAB = 8192
EMBED_DIM = 64
HIDDEN_DIM = 128
MAX_TOKENS = 77
CODE_DIM = 16  # the composition code drawn from the seed
CODE_STRENGTH = 0.8
NUM_WAVES = 3
NUM_BLOBS = 2
WAVE_PARAMS = 6  # direction, spatial and temporal frequency, phase, brightness and palette amplitude
BLOB_PARAMS = 7  # centre x/y, orbit radius, orbit speed, phase, size, brightness
PYRAMID_LEVELS = 3
# Prior variance of x0 around a composition, per pyramid band from finest to coarsest.
BAND_VARIANCE = (0.002, 0.02, 0.08, 0.25)
RGB_FLOOR, RGB_RANGE = 0.15, 0.80  # decoded values stay in [0.15, 0.95]: never black

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
# A small built-in lexicon stands in for what a trained text encoder would know about colour
# and pace, so that "a red balloon" comes out red and "a storm" moves faster than "calm".
COLOUR_WORDS: dict[str, tuple[float, float, float]] = {
    "red": (0.85, 0.2, 0.2), "orange": (0.95, 0.55, 0.2), "yellow": (0.95, 0.85, 0.3),
    "green": (0.3, 0.75, 0.35), "forest": (0.2, 0.5, 0.25), "blue": (0.25, 0.4, 0.9),
    "ocean": (0.15, 0.45, 0.7), "sky": (0.5, 0.7, 0.95), "purple": (0.6, 0.3, 0.75),
    "pink": (0.95, 0.55, 0.75), "white": (0.92, 0.92, 0.92), "snow": (0.9, 0.93, 0.97),
    "grey": (0.55, 0.55, 0.55), "gray": (0.55, 0.55, 0.55), "night": (0.2, 0.22, 0.4),
    "sunset": (0.95, 0.5, 0.35), "fire": (0.95, 0.4, 0.1), "gold": (0.9, 0.75, 0.3),
    "desert": (0.85, 0.7, 0.45), "brown": (0.5, 0.35, 0.2),
}  # fmt: skip
PACE_WORDS: dict[str, float] = {
    "slow": 0.5, "calm": 0.5, "gentle": 0.6, "still": 0.5, "quiet": 0.6, "drifting": 0.7,
    "fast": 2.0, "quick": 1.8, "storm": 2.0, "racing": 2.2, "wild": 1.8, "rushing": 2.0,
}  # fmt: skip


def tokenize(text: str) -> list[str]:
    """Lowercase words, truncated to the encoder's context length."""
    return _WORD.findall(text.lower())[:MAX_TOKENS]


def token_ids(words: list[str]) -> list[int]:
    """Stable hash of each word into the embedding table; id 0 is the null (empty prompt) token."""
    digests = (hashlib.blake2b(w.encode(), digest_size=8).digest() for w in words)
    return [1 + int.from_bytes(d, "little") % (VOCAB - 1) for d in digests] or [0]


@dataclass
class TextCondition:
    """What the prior needs from one prompt: its embedding plus lexicon hints."""

    embedding: torch.Tensor  # [EMBED_DIM]
    colour: torch.Tensor | None  # [3] target RGB named by the prompt, if any
    pace: float  # multiplier of temporal frequencies
    null: bool  # the empty prompt: the unconditional model


@dataclass
class SceneShape:
    """The latent grid of one clip."""

    frames: int
    height: int  # latent rows (pixels / VAE scale)
    width: int
    fps: float


class TextPrior:
    """Text encoder and scene prior weights, on one device."""

    def __init__(self, device: torch.device, decoder_w: torch.Tensor, decoder_b: torch.Tensor) -> None:
        g = torch.Generator().manual_seed(WEIGHTS_SEED)

        def param(*shape: int, scale: float = 1.0) -> torch.Tensor:
            return (torch.randn(*shape, generator=g) * scale).to(device)

        d, c = EMBED_DIM, LATENT_CHANNELS
        self.device = device
        self.embed = param(VOCAB, d)
        self.position = param(MAX_TOKENS, d, scale=0.2)
        self.query = param(d, scale=1.0 / math.sqrt(d))
        self.w1, self.b1 = param(2 * d, HIDDEN_DIM, scale=(2 * d) ** -0.5), param(HIDDEN_DIM, scale=0.1)
        self.w2, self.b2 = param(HIDDEN_DIM, d, scale=HIDDEN_DIM**-0.5), param(d, scale=0.1)
        self.code_proj = param(CODE_DIM, d, scale=CODE_STRENGTH / math.sqrt(CODE_DIM))
        n_scene = 2 * c + NUM_WAVES * WAVE_PARAMS + NUM_BLOBS * BLOB_PARAMS + PYRAMID_LEVELS + 1
        self.scene_head = param(d, n_scene, scale=d**-0.5)
        # The decoder's colour map, so named colours can be turned into latents.
        self.decoder_b = decoder_b
        self.decoder_pinv = torch.linalg.pinv(decoder_w.cpu()).to(device)

    def encode(self, text: str) -> TextCondition:
        """Embed a prompt: token + position embeddings, mean and attention pooling, an MLP, LayerNorm."""
        words = tokenize(text)
        ids = torch.tensor(token_ids(words), device=self.device)
        tokens = self.embed[ids] + self.position[: len(ids)]
        mean = tokens.mean(dim=0)
        attention = torch.softmax(tokens @ self.query, dim=0)
        pooled = torch.cat([mean, attention @ tokens])
        hidden = F.silu(pooled @ self.w1 + self.b1) @ self.w2 + self.b2
        embedding = F.layer_norm(hidden + mean, (EMBED_DIM,))
        colours = [COLOUR_WORDS[w] for w in words if w in COLOUR_WORDS]
        colour = torch.tensor(colours, device=self.device).mean(dim=0) if colours else None
        paces = [PACE_WORDS[w] for w in words if w in PACE_WORDS]
        pace = math.exp(sum(math.log(p) for p in paces) / len(paces)) if paces else 1.0
        return TextCondition(embedding, colour, pace, null=not words)

    def latent_of_rgb(self, rgb: torch.Tensor) -> torch.Tensor:
        """The least-norm latent that decodes to the colour ``rgb`` (values in 0..1)."""
        target = ((rgb - RGB_FLOOR) / RGB_RANGE).clamp(0.05, 0.95)
        return self.decoder_pinv @ (torch.logit(target) - self.decoder_b)

    def variance(self, cond: TextCondition) -> torch.Tensor:
        """Per-band prior variance [levels+1]; a prompt can ask for more or less texture."""
        base = torch.tensor(BAND_VARIANCE, device=self.device)
        if cond.null:
            return base
        band_raw = (cond.embedding @ self.scene_head)[-(PYRAMID_LEVELS + 1) :]
        return base * torch.exp(0.3 * torch.tanh(band_raw))

    def composition(self, cond: TextCondition, code: torch.Tensor, shape: SceneShape) -> torch.Tensor:
        """The prior mean [C, T, h, w] for a prompt and a composition code (drawn from the seed).

        The code is the prior's top-level latent: it moves the layout, phases and directions
        around what the prompt asks for, so different seeds give different compositions. The
        empty prompt is the unconditional model, whose mean is the data mean (the zero latent).
        """
        if cond.null:
            return torch.zeros(LATENT_CHANNELS, shape.frames, shape.height, shape.width, device=self.device)
        return self.scene(cond, cond.embedding + code.to(self.device) @ self.code_proj, shape)

    def scene(self, cond: TextCondition, embedding: torch.Tensor, shape: SceneShape) -> torch.Tensor:
        """One composition [C, T, h, w]: a palette, travelling waves and orbiting blobs."""
        c, dims = LATENT_CHANNELS, (LATENT_CHANNELS, shape.frames, shape.height, shape.width)
        raw = embedding @ self.scene_head
        primary_raw, accent_raw, raw = raw[:c], raw[c : 2 * c], raw[2 * c :]
        waves = raw[: NUM_WAVES * WAVE_PARAMS].view(NUM_WAVES, WAVE_PARAMS)
        blobs = raw[NUM_WAVES * WAVE_PARAMS :][: NUM_BLOBS * BLOB_PARAMS].view(NUM_BLOBS, BLOB_PARAMS)

        # A two-colour palette: the primary (the named colour when the prompt has one) and an accent.
        primary = 0.7 * torch.tanh(primary_raw)
        if cond.colour is not None:
            primary = self.latent_of_rgb(cond.colour) + 0.2 * torch.tanh(primary_raw)
        accent = primary + 0.8 * torch.tanh(accent_raw)
        grey = torch.ones(3, device=self.device)
        brighten = self.latent_of_rgb(0.75 * grey) - self.latent_of_rgb(0.45 * grey)

        t = torch.arange(shape.frames, device=self.device, dtype=torch.float32)[:, None, None] / shape.fps
        y = ((torch.arange(shape.height, device=self.device) + 0.5) / shape.height)[None, :, None]
        x = ((torch.arange(shape.width, device=self.device) + 0.5) / shape.height)[None, None, :]
        mu = primary[:, None, None, None].expand(dims).clone()
        for w in waves:
            # Travelling waves: brightness ripples and palette shifts, moving at the prompt's pace.
            angle = math.pi * torch.tanh(w[0])
            spatial = 0.5 + 2.0 * torch.sigmoid(w[1])  # cycles per frame height
            temporal = cond.pace * (0.1 + 0.4 * torch.sigmoid(w[2]))  # Hz
            along = torch.cos(angle) * x + torch.sin(angle) * y
            field = torch.sin(2 * math.pi * (spatial * along - temporal * t) + math.pi * torch.tanh(w[3]))
            amplitude = 0.25 * torch.tanh(w[4]) * brighten + 0.35 * torch.tanh(w[5]) * (accent - primary)
            mu += field[None] * amplitude[:, None, None, None]
        aspect = shape.width / shape.height
        for b in blobs:
            # Soft blobs of the accent colour orbiting around a point of the frame.
            cx, cy = aspect * (0.25 + 0.5 * torch.sigmoid(b[0])), 0.25 + 0.5 * torch.sigmoid(b[1])
            orbit = 0.1 + 0.2 * torch.sigmoid(b[2])
            speed = cond.pace * (0.08 + 0.25 * torch.sigmoid(b[3])) * torch.sign(b[3] + 1e-6)
            angle = 2 * math.pi * speed * t + math.pi * torch.tanh(b[4])
            size = 0.1 + 0.15 * torch.sigmoid(b[5])
            bx, by = cx + orbit * torch.cos(angle), cy + orbit * torch.sin(angle)
            blob = torch.exp(-((x - bx) ** 2 + (y - by) ** 2) / (2 * size**2))
            mu += (
                blob[None] * 0.7 * (accent - primary + 0.5 * torch.tanh(b[6]) * brighten)[:, None, None, None]
            )
        return mu
