"""Rendering of the reference talking head: warps and overlays of the portrait, on a device.

Each output pixel looks up where it comes from in the portrait (one ``grid_sample`` per frame):
the head region follows a small rotation/shift/scale about the neck, the chest rises with the
breath, and the jaw drops with the mouth's openness, stretching the lips apart. The opening is
then filled with a dark mouth interior (with a hint of teeth), and the eyelids are drawn shut in
skin colour during blinks. Overlays are computed in head-local coordinates so they move with the
head, and only inside the small regions around the mouth and the eyes.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from workers.adapters.reference.face import FaceLayout
from workers.adapters.reference.talking_head_motion import MotionState

JAW_HALF_WIDTH = 0.5  # of the face width: how far either side of the mouth the jaw moves
MAX_JAW_DROP = 0.10  # of the face height: more would fold the warp
JAW_DROP = 0.085  # at openness 1 and mouth_scale 1
BREATH_AMPLITUDE = 0.012  # chest rise, face heights
HEAD_BREATH = 0.5  # share of the chest rise the head follows
MOUTH_COLOUR = (0.27, 0.07, 0.09)
TEETH_COLOUR = (0.93, 0.91, 0.86)
LASH_COLOUR = (0.20, 0.12, 0.10)


def smoothstep(edge0: float, edge1: float, x: torch.Tensor) -> torch.Tensor:
    """0 below edge0, 1 above edge1, a smooth cubic between."""
    t = ((x - edge0) / (edge1 - edge0)).clamp(0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


class PortraitRenderer:
    """Per-job renderer: the portrait, its face layout, and the grids and masks that do not change."""

    def __init__(
        self, image: torch.Tensor, layout: FaceLayout, mouth_scale: float, motion_scale: float
    ) -> None:
        """``image``: [3, H, W] floats in 0..1 on the device that renders."""
        self.device = image.device
        self.image = image[None]
        self.layout = layout
        self.mouth_scale = mouth_scale
        _, self.height, self.width = image.shape
        box = layout.box
        ys, xs = torch.meshgrid(
            torch.arange(self.height, device=self.device, dtype=torch.float32),
            torch.arange(self.width, device=self.device, dtype=torch.float32),
            indexing="ij",
        )
        # Soft masks: the head (face and hair) turns; everything below the chin breathes.
        cx, cy = box.x + box.w / 2, box.y + 0.42 * box.h
        r = (((xs - cx) / (0.78 * box.w)) ** 2 + ((ys - cy) / (0.95 * box.h)) ** 2).sqrt()
        head = 1.0 - smoothstep(0.85, 1.3, r)
        body = smoothstep(layout.chin_y, layout.chin_y + 0.6 * box.h, ys)
        # Every frame's sampling grid is one matrix product of this per-pixel basis with a small
        # per-frame matrix: the head's affine warp (masked), the chest's rise, and the identity.
        gx, gy = (2.0 * xs + 1.0) / self.width - 1.0, (2.0 * ys + 1.0) / self.height - 1.0
        self.basis = torch.stack([head * xs, head * ys, head, body, gx, gy], dim=-1).view(-1, 6)
        self.skin = self._skin_colour()
        mx, my = layout.mouth
        (lx, ey), (rx_, _) = layout.eyes
        erx, ery = layout.eye_radii
        # Boxes (in portrait pixels) where the jaw warp and the overlays act; grown per chunk by
        # how far the head actually moves, so the work stays small.
        self.mouth_box = (
            mx - JAW_HALF_WIDTH * box.w,
            my - 0.05 * box.h,
            mx + JAW_HALF_WIDTH * box.w,
            layout.chin_y + 0.3 * box.h,
        )
        self.eye_box = (lx - 1.5 * erx, ey - 2 * ery, rx_ + 1.5 * erx, ey + 2 * ery)

    def _roi(self, bounds: tuple[float, float, float, float], margin: float) -> tuple[slice, slice]:
        """Row and column slices of a pixel box grown by ``margin``, clipped to the frame."""
        x0, y0, x1, y1 = bounds

        def clip(v: float, size: int) -> int:
            return min(size, max(0, int(v)))

        rows = slice(clip(y0 - margin, self.height), clip(math.ceil(y1 + margin), self.height))
        cols = slice(clip(x0 - margin, self.width), clip(math.ceil(x1 + margin), self.width))
        return rows, cols

    def _skin_colour(self) -> torch.Tensor:
        """Median colour of the cheeks (under the eyes, beside the nose), for eyelids."""
        box = self.layout.box
        patches = []
        for fx in (0.28, 0.72):
            x0, y0 = int(box.x + (fx - 0.06) * box.w), int(box.y + 0.55 * box.h)
            x1, y1 = int(box.x + (fx + 0.06) * box.w) + 1, int(box.y + 0.65 * box.h) + 1
            patch = self.image[0, :, max(0, y0) : max(1, y1), max(0, x0) : max(1, x1)].reshape(3, -1)
            if patch.numel():
                patches.append(patch)
        pixels = torch.cat(patches, dim=1) if patches else self.image[0].reshape(3, -1)
        return pixels.median(dim=1).values

    def _per_frame(self, values: list[float]) -> torch.Tensor:
        return torch.tensor(values, device=self.device, dtype=torch.float32)

    def render(self, states: list[MotionState]) -> torch.Tensor:
        """Frames [N, 3, H, W] in 0..1 for the given motion states."""
        n, box = len(states), self.layout.box
        breath_px = self._per_frame([BREATH_AMPLITUDE * box.h * s.breath for s in states])
        drop = self._per_frame(
            [min(MAX_JAW_DROP, JAW_DROP * self.mouth_scale * s.mouth) * box.h for s in states]
        )
        grid = self._head_grid(states, breath_px)

        # How far any point of the face moves this chunk bounds where the features can be.
        reach = math.hypot(box.w, box.h)
        margin = (
            3.0
            + max(
                abs(s.tx) * box.w + abs(s.ty) * box.h + (abs(s.roll) + abs(s.scale)) * reach for s in states
            )
            + float(breath_px.abs().max())
        )
        mouth_roi, eye_roi = self._roi(self.mouth_box, margin), self._roi(self.eye_box, margin)
        qx, qy = self._drop_jaw(grid, mouth_roi, drop)

        frames = F.grid_sample(
            self.image.expand(n, -1, -1, -1),
            grid,
            mode="bilinear",
            padding_mode="border",
            align_corners=False,
        )
        self._draw_mouth(frames, mouth_roi, qx, qy, drop)
        blink = [s.blink for s in states]
        if max(blink) > 0.0:
            ey_, ex_ = eye_roi
            ex = ((grid[:, ey_, ex_, 0] + 1.0) * self.width - 1.0) / 2.0
            ey = ((grid[:, ey_, ex_, 1] + 1.0) * self.height - 1.0) / 2.0
            self._draw_eyelids(frames, eye_roi, ex, ey, self._per_frame(blink))
        return frames

    def _head_grid(self, states: list[MotionState], breath_px: torch.Tensor) -> torch.Tensor:
        """The sampling grid [N, H, W, 2] of the head's pose and the chest's breathing."""
        n, box, (px, py) = len(states), self.layout.box, self.layout.pivot
        roll = self._per_frame([s.roll for s in states])
        scale = self._per_frame([1.0 + s.scale for s in states])
        tx = self._per_frame([s.tx * box.w for s in states])
        ty = self._per_frame([s.ty * box.h for s in states]) - HEAD_BREATH * breath_px
        # Inverse head transform (output pixel -> portrait pixel) q = A p + b about the pivot; the
        # grid stores the displacement q - p = (A - I) p + b in normalised units.
        cos, sin = torch.cos(roll) / scale, torch.sin(roll) / scale
        bx = px - (cos * (px + tx) + sin * (py + ty))
        by = py - (-sin * (px + tx) + cos * (py + ty))
        zero, one = torch.zeros_like(cos), torch.ones_like(cos)
        rows = [(cos - 1.0, -sin), (sin, cos - 1.0), (bx, by), (zero, breath_px)]  # head x, y, 1; chest
        to_unit = torch.tensor([2.0 / self.width, 2.0 / self.height], device=self.device)
        warp = torch.stack(
            [torch.stack(r, -1) * to_unit for r in rows]
            + [torch.stack((one, zero), -1), torch.stack((zero, one), -1)],
            dim=1,
        )
        # One GEMM for all frames: [H*W, 6] @ [6, N*2] -> [N, H, W, 2].
        grid = (self.basis @ warp.permute(1, 0, 2).reshape(6, n * 2)).view(self.height, self.width, n, 2)
        return grid.permute(2, 0, 1, 3).contiguous()

    def _drop_jaw(
        self, grid: torch.Tensor, mouth_roi: tuple[slice, slice], drop: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Jaw drop around the mouth (rows below the lips sample from higher up, moving down), in place.

        Returns the portrait coordinates the mouth region samples, for drawing the mouth.
        """
        box = self.layout.box
        my_, mx_ = mouth_roi
        mx, my = self.layout.mouth
        qx = ((grid[:, my_, mx_, 0] + 1.0) * self.width - 1.0) / 2.0
        qy = ((grid[:, my_, mx_, 1] + 1.0) * self.height - 1.0) / 2.0
        across = 1.0 - smoothstep(0.45 * JAW_HALF_WIDTH * box.w, JAW_HALF_WIDTH * box.w, (qx - mx).abs())
        below = smoothstep(my - 0.02 * box.h, my + 0.16 * box.h, qy)
        above_chin = 1.0 - smoothstep(
            self.layout.chin_y - 0.02 * box.h, self.layout.chin_y + 0.28 * box.h, qy
        )
        jaw = drop[:, None, None] * across * below * above_chin
        grid[:, my_, mx_, 1] -= jaw * (2.0 / self.height)
        return qx, qy

    def _draw_mouth(
        self,
        frames: torch.Tensor,
        roi: tuple[slice, slice],
        qx: torch.Tensor,
        qy: torch.Tensor,
        drop: torch.Tensor,
    ) -> None:
        """Dark interior (and upper teeth when wide open) in the gap the jaw drop opened."""
        my_, mx_ = roi
        mx, my = self.layout.mouth
        d = drop[:, None, None]
        centre_y = my + 0.42 * d
        half_w = 0.42 * self.layout.mouth_width
        half_h = 0.45 * d + 0.5
        e = ((qx - mx) / half_w) ** 2 + ((qy - centre_y) / half_h) ** 2
        alpha = ((1.0 - e) / 0.35).clamp(0.0, 1.0) * (d / 3.0).clamp(0.0, 1.0)
        teeth = smoothstep(0.0, 1.0, (centre_y - 0.45 * half_h - qy) / 1.5) * ((d - 5.0) / 6.0).clamp(
            0.0, 0.8
        )
        dark = torch.tensor(MOUTH_COLOUR, device=self.device)[None, :, None, None]
        white = torch.tensor(TEETH_COLOUR, device=self.device)[None, :, None, None]
        colour = dark + teeth[:, None] * (white - dark)
        region = frames[:, :, my_, mx_]
        frames[:, :, my_, mx_] = region + alpha[:, None] * (colour - region)

    def _draw_eyelids(
        self,
        frames: torch.Tensor,
        roi: tuple[slice, slice],
        ex: torch.Tensor,
        ey: torch.Tensor,
        blink: torch.Tensor,
    ) -> None:
        """Lids coming down over the eyes in skin colour, with a lash line at their edge."""
        ey_, ex_ = roi
        erx, ery = self.layout.eye_radii
        b = blink[:, None, None]
        alpha = torch.zeros_like(ex)
        lash = torch.zeros_like(ex)
        lash_width = 0.012 * self.layout.box.w + 0.7
        for cx, cy in self.layout.eyes:
            inside = ((1.0 - ((ex - cx) / (1.1 * erx)) ** 2 - ((ey - cy) / (1.4 * ery)) ** 2) / 0.2).clamp(
                0.0, 1.0
            )
            lid = cy - 1.3 * ery + 2.6 * ery * b  # the lid's edge sweeps down over the eye
            alpha = torch.maximum(alpha, inside * ((lid - ey) / 1.5).clamp(0.0, 1.0))
            lash = torch.maximum(lash, inside * (1.0 - (ey - lid).abs() / lash_width).clamp(0.0, 1.0))
        alpha = alpha * smoothstep(0.0, 0.15, b)
        lash = lash * smoothstep(0.2, 0.5, b) * 0.8
        region = frames[:, :, ey_, ex_]
        region = region + alpha[:, None] * ((0.93 * self.skin)[None, :, None, None] - region)
        lash_colour = torch.tensor(LASH_COLOUR, device=self.device)[None, :, None, None]
        frames[:, :, ey_, ex_] = region + lash[:, None] * (lash_colour - region)
