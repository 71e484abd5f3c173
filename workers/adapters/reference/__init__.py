"""The built-in reference models (real torch compute on CPU, CUDA or NPU): the talking head and
text2video, with their motion, rendering, face and audio helpers.

Imports the adapter contract and ``jobservice`` media and reports; torch is imported here.
"""
