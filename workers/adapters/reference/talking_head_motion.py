"""Motion of the reference talking head: per-frame head pose, mouth, blinks and breathing.

Motion is generated chunk by chunk, as FlashTalk does: a chunk covers ``chunk_frames`` frames,
the first ``motion_frames`` of which are the previous chunk's last frames carried over (for the
first chunk, the portrait's rest pose). The new frames continue from them: the head is a damped
spring whose position and velocity start where the carried frames left off, and the mouth and
speech followers start from the carried values, so motion stays continuous across chunks.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from workers.adapters.reference.audio_features import smooth_attack_release

POSE_FIELDS = ("roll", "tx", "ty", "scale")
# Sway amplitudes at motion_scale 1: radians, fractions of the face width/height, relative size.
SWAY_AMPLITUDE = {"roll": 0.045, "tx": 0.03, "ty": 0.02, "scale": 0.015}
SPEECH_NOD = 0.025  # extra downward head offset (face heights) while speaking
SPRING_HZ, SPRING_DAMPING = 1.2, 0.9  # the head follows its target like a lightly damped spring
MOUTH_ATTACK_S, MOUTH_RELEASE_S = 0.03, 0.09
SPEECH_ATTACK_S, SPEECH_RELEASE_S = 0.25, 0.6
BLINK_S = 0.2  # whole blink; the lid is fully shut for about a third of it
BLINK_INTERVAL_S = (2.0, 5.0)
BREATH_PERIOD_S = (3.5, 4.5)


@dataclass(frozen=True)
class MotionState:
    """The animation state of one frame."""

    mouth: float = 0.0  # openness 0..1 (before mouth_scale)
    speech: float = 0.0  # slow speech activity 0..1, drives nodding
    roll: float = 0.0  # head rotation, radians
    tx: float = 0.0  # head shift, fraction of the face width
    ty: float = 0.0  # head shift, fraction of the face height
    scale: float = 0.0  # head size change, relative
    blink: float = 0.0  # 0 open .. 1 shut
    breath: float = 0.0  # -1..1, chest and head rise

    def pose(self, name: str) -> float:
        """One of POSE_FIELDS by name."""
        return float(getattr(self, name))


REST = MotionState()  # the portrait as given


class MotionPlan:
    """The seeded, time-based part of one job's motion: sway curves, blink times, breathing."""

    def __init__(self, seed: int, duration_s: float, motion_scale: float) -> None:
        rng = random.Random(seed)
        self.motion_scale = motion_scale
        # Each pose field sways as a sum of three slow sines with seeded frequencies and phases.
        self.sway = {
            name: [
                (rng.uniform(0.5, 1.0), rng.uniform(0.07, 0.45), rng.uniform(0.0, 2 * math.pi))
                for _ in range(3)
            ]
            for name in POSE_FIELDS
        }
        self.blinks: list[float] = []
        t = rng.uniform(0.6, 2.0)
        while t < duration_s + BLINK_S:
            self.blinks.append(t)
            t += rng.uniform(*BLINK_INTERVAL_S)
        self.breath_hz = 1.0 / rng.uniform(*BREATH_PERIOD_S)
        self.breath_phase = rng.uniform(0.0, 2 * math.pi)

    def target(self, name: str, t: float, speech: float) -> float:
        """Where the head wants to be at time ``t``: seeded sway, plus a nod while speaking."""
        parts = self.sway[name]
        norm = sum(a for a, _, _ in parts)
        value = sum(a * math.sin(2 * math.pi * f * t + p) for a, f, p in parts) / norm
        value *= SWAY_AMPLITUDE[name]
        if name == "ty":
            value += SPEECH_NOD * speech
        return self.motion_scale * value

    def blink(self, t: float) -> float:
        """Lid closure at ``t``: a raised-cosine pulse per blink, clipped so it stays shut briefly."""
        closure = 0.0
        for start in self.blinks:
            tau = t - start
            if abs(tau) < BLINK_S / 2:
                closure = max(closure, min(1.0, 1.5 * math.cos(math.pi * tau / BLINK_S) ** 2))
        return closure

    def breath(self, t: float) -> float:
        """Breathing phase at ``t`` in -1..1 (independent of motion_scale: never frozen)."""
        return math.sin(2 * math.pi * self.breath_hz * t + self.breath_phase)


def continue_motion(
    plan: MotionPlan, carried: list[MotionState], raw_mouth: list[float], first_frame: int, fps: float
) -> list[MotionState]:
    """States of the new frames ``first_frame ...`` of a chunk, continuing from ``carried``.

    ``raw_mouth`` is the audio's openness for each new frame. Without carried frames
    (motion_frames = 0) the head starts at its target with no velocity and the mouth closed.
    """
    dt = 1.0 / fps
    t0 = first_frame * dt
    last = carried[-1] if carried else None
    mouth = smooth_attack_release(
        raw_mouth, last.mouth if last else 0.0, fps, MOUTH_ATTACK_S, MOUTH_RELEASE_S
    )
    speech = smooth_attack_release(
        raw_mouth, last.speech if last else 0.0, fps, SPEECH_ATTACK_S, SPEECH_RELEASE_S
    )

    omega = 2 * math.pi * SPRING_HZ
    tracks: dict[str, list[float]] = {}
    for name in POSE_FIELDS:
        if last is None:
            pos, vel = plan.target(name, t0, 0.0), 0.0
        else:
            pos = last.pose(name)
            # The carried frames give the velocity: the more of them, the steadier the estimate.
            span = len(carried) - 1
            vel = (pos - carried[0].pose(name)) / (span * dt) if span > 0 else 0.0
        track = []
        for i, s in enumerate(speech):
            target = plan.target(name, t0 + i * dt, s)
            vel += dt * (omega * omega * (target - pos) - 2 * SPRING_DAMPING * omega * vel)
            pos += dt * vel
            track.append(pos)
        tracks[name] = track

    return [
        MotionState(
            mouth=mouth[i],
            speech=speech[i],
            blink=plan.blink(t0 + i * dt),
            breath=plan.breath(t0 + i * dt),
            **{name: tracks[name][i] for name in POSE_FIELDS},
        )
        for i in range(len(raw_mouth))
    ]


def carry(window: list[MotionState], motion_frames: int) -> list[MotionState]:
    """The last ``motion_frames`` states of a chunk's window, handed to the next chunk."""
    return list(window[-motion_frames:]) if motion_frames > 0 else []


def rest_frames(motion_frames: int) -> list[MotionState]:
    """Motion frames of the first chunk: the portrait at rest, as the reference image is in FlashTalk."""
    return [replace(REST) for _ in range(motion_frames)]
