"""The denoiser, sampler and decoder of the built-in reference text2video model.

A real (small) latent video diffusion model whose "pretrained" weights are drawn from a fixed
seed instead of learned. Its data prior (see :mod:`reference_t2v_prior`) is hierarchical: a
composition code drawn from the seed and the prompt give a mean ``mu``, around which the latent is
Gaussian with a covariance that is diagonal in a Laplacian pyramid (coarse bands vary a lot, fine
ones barely). For that prior the optimal denoiser is known in closed form: ``mu`` plus a per-band
Wiener filter of the residual, which the network computes with 3D convolutions (the pyramid) and
timestep-dependent per-band gains (a FiLM on the noise level and the text). Sampling is DDIM on a
zero-terminal-SNR schedule with classifier-free guidance: the seed sets the composition and the
noise's coarse structure, the prompt sets palette and motion.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from workers.adapters.reference.t2v_prior import (
    LATENT_CHANNELS,
    PYRAMID_LEVELS,
    RGB_FLOOR,
    RGB_RANGE,
    SceneShape,
    TextPrior,
)

DECODER_SEED = 0x0DEC_0DE5
VAE_SCALE = 8  # decoder upsampling factor, as in image/video VAEs
TRAIN_TIMESTEPS = 1000
GUIDANCE_RESCALE = 0.7  # Lin et al. 2023: keeps high guidance scales from over-saturating


@dataclass
class BranchPrior:
    """The prior of one guidance branch (prompt or negative/empty prompt) on one latent grid."""

    mean: torch.Tensor  # [C, T, h, w]
    variance: torch.Tensor  # [levels+1] per-band variance around the mean


class ReferenceT2VModel:
    """Weights and forward passes of the reference text2video model (inference only)."""

    def __init__(self, device: torch.device) -> None:
        g = torch.Generator().manual_seed(DECODER_SEED)
        self.device = device
        c = LATENT_CHANNELS
        self.decoder_w = (torch.randn(3, c, generator=g) * 1.2 / math.sqrt(c)).to(device)
        self.decoder_b = (torch.randn(3, generator=g) * 0.2).to(device)
        self.prior = TextPrior(device, self.decoder_w, self.decoder_b)
        # Analysis filter of the pyramid: a separable binomial low-pass, one per latent channel.
        k1 = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0]) / 16.0
        k3 = k1[:, None, None] * k1[None, :, None] * k1[None, None, :]
        self.lowpass = k3.expand(c, 1, 5, 5, 5).contiguous().to(device)
        self.alphas_cumprod = zero_terminal_snr_schedule()  # host float64: schedule scalars

    def branch(self, text: str, code: torch.Tensor, shape: SceneShape) -> BranchPrior:
        """Encode a prompt and lay out its prior on the latent grid (once per run and branch)."""
        cond = self.prior.encode(text)
        return BranchPrior(self.prior.composition(cond, code, shape), self.prior.variance(cond))

    # -- denoiser -----------------------------------------------------------------------------------
    def down(self, x: torch.Tensor) -> torch.Tensor:
        """One pyramid level: binomial low-pass (a depthwise 3D convolution) with stride 2."""
        padded = F.pad(x, (2, 2, 2, 2, 2, 2), mode="replicate")
        return F.conv3d(padded, self.lowpass, stride=2, groups=LATENT_CHANNELS)

    def pyramid(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Laplacian-pyramid bands of ``x`` [B, C, T, h, w], finest first; they sum back to ``x``."""
        size = x.shape[2:]
        levels = [x]
        for _ in range(PYRAMID_LEVELS):
            levels.append(self.down(levels[-1]))
        upsampled = [x] + [
            F.interpolate(lv, size=size, mode="trilinear", align_corners=False) for lv in levels[1:]
        ]
        return [upsampled[k] - upsampled[k + 1] for k in range(PYRAMID_LEVELS)] + [upsampled[-1]]

    def noise_energy(self, noise: torch.Tensor) -> torch.Tensor:
        """Variance of unit white noise per band on this latent grid (the Wiener filter's noise term)."""
        return torch.stack([band.pow(2).mean() for band in self.pyramid(noise)])

    def predict_x0(
        self, x_t: torch.Tensor, mu: torch.Tensor, variance: torch.Tensor, band_energy: torch.Tensor, a: float
    ) -> torch.Tensor:
        """Denoise a batch [B, C, T, h, w]: per-band Wiener gains on the residual around ``mu``.

        ``gain_k = sqrt(a) * lambda_k / (a * lambda_k + (1 - a) * nu_k)``, the posterior-mean
        coefficient of band k for prior variance ``lambda_k`` and noise variance ``nu_k``.
        """
        gains = math.sqrt(a) * variance / (a * variance + (1.0 - a) * band_energy)  # [B, levels+1]
        gains = gains[:, :, None, None, None, None]
        # sum_k g_k (U_k - U_k+1) + g_K U_K = g_0 U_0 + sum_k>0 (g_k - g_k-1) U_k, with U_k level
        # k upsampled: accumulating level by level keeps only one full-size temporary alive.
        level = x_t - math.sqrt(a) * mu
        out = torch.addcmul(mu, gains[:, 0], level)
        for k in range(1, PYRAMID_LEVELS + 1):
            level = self.down(level)
            up = F.interpolate(level, size=x_t.shape[2:], mode="trilinear", align_corners=False)
            out.addcmul_(gains[:, k] - gains[:, k - 1], up)
        return out

    # -- sampler ------------------------------------------------------------------------------------
    def timesteps(self, steps: int) -> list[tuple[int, float]]:
        """DDIM schedule with "trailing" spacing: (timestep, cumulative alpha of the next one)."""
        ts = [round(TRAIN_TIMESTEPS - i * TRAIN_TIMESTEPS / steps) - 1 for i in range(steps)]
        nexts = [float(self.alphas_cumprod[t]) for t in ts[1:]] + [1.0]
        return list(zip(ts, nexts, strict=True))

    def guided_step(
        self,
        x_t: torch.Tensor,
        t: int,
        a_next: float,
        branches: tuple[BranchPrior, BranchPrior],
        band_energy: torch.Tensor,
        guidance_scale: float,
    ) -> torch.Tensor:
        """One DDIM step (eta 0) with classifier-free guidance; both branches in one batched forward.

        ``branches`` is (conditional, unconditional).
        """
        a = float(self.alphas_cumprod[t])
        mu = torch.stack([branches[0].mean, branches[1].mean])
        variance = torch.stack([branches[0].variance, branches[1].variance])
        x0 = self.predict_x0(x_t.expand(2, *x_t.shape[1:]), mu, variance, band_energy, a)
        x0_cond, x0_uncond = x0[0:1], x0[1:2]
        # Guidance on the x0 prediction: for a > 0 the same as mixing the noise predictions, and
        # still defined at the zero-SNR first step, where the noise prediction is x_t itself.
        x0_guided = x0_uncond + guidance_scale * (x0_cond - x0_uncond)
        if guidance_scale > 1.0:
            # Guidance rescale against over-saturation: match the spread of the conditional
            # prediction, then blend. Only extrapolating scales (> 1) need it.
            rescaled = x0_guided * (x0_cond.std() / x0_guided.std().clamp_min(1e-6))
            x0_guided = GUIDANCE_RESCALE * rescaled + (1.0 - GUIDANCE_RESCALE) * x0_guided
        eps_guided = (x_t - math.sqrt(a) * x0_guided) / math.sqrt(1.0 - a)
        return math.sqrt(a_next) * x0_guided + math.sqrt(1.0 - a_next) * eps_guided

    # -- decoder ------------------------------------------------------------------------------------
    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """Latent frames [n, C, h, w] -> RGB [n, 3, 8h, 8w] in [0.15, 0.95]."""
        z = F.conv2d(latent, self.decoder_w[:, :, None, None], self.decoder_b)
        rgb = RGB_FLOOR + RGB_RANGE * torch.sigmoid(z)
        # Bilinear weights are convex, so upsampling keeps the values inside [0.15, 0.95].
        return F.interpolate(rgb, scale_factor=VAE_SCALE, mode="bilinear", align_corners=False)


def zero_terminal_snr_schedule() -> torch.Tensor:
    """Cumulative alphas of the scaled-linear schedule, rescaled so the last step is pure noise.

    Lin et al. 2023 ("Common Diffusion Noise Schedules and Sample Steps are Flawed"): with the
    usual schedule the last timestep still holds some signal, so sampling from pure noise loses
    the prompt's low frequencies (its overall colour). Shifting and scaling sqrt(alpha_bar) so it
    ends at exactly 0 fixes that.
    """
    betas = torch.linspace(0.00085**0.5, 0.012**0.5, TRAIN_TIMESTEPS, dtype=torch.float64) ** 2
    root = torch.cumprod(1.0 - betas, dim=0).sqrt()
    first, last = root[0].clone(), root[-1].clone()
    return ((root - last) * first / (first - last)) ** 2
