"""Media on the API side: ffprobe facts and streamed, content-checked uploads.

Domain: imports settings, errors and reports; workers use its probe too.
"""
