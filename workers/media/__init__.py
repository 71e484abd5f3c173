"""Streaming video encoding with the gate's detector pass running alongside."""

from workers.media.encoder import EncoderError, EncodeResult, StreamingEncoder

__all__ = ["EncodeResult", "EncoderError", "StreamingEncoder"]
