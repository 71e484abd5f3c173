"""Streaming video encoding with the gate's detector pass (blackdetect, freezedetect) running
alongside, and the ffmpeg command lines and log parsing they share.

Imports the ``jobservice`` catalog, media probe and reports only; validation and the run use it.
"""

from workers.video.encoder import EncoderError, EncodeResult, StreamingEncoder

__all__ = ["EncodeResult", "EncoderError", "StreamingEncoder"]
