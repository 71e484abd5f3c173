"""The built-in reference models (real torch compute on CPU, CUDA or NPU)."""
