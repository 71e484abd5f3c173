"""Media on the API side: ffprobe facts and streamed, content-checked uploads.

Domain: imports settings and errors only.
"""
