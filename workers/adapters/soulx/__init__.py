"""SoulX-FlashHead (generate_video.py per job) and SoulX-FlashTalk (a resident worker fed chunk
by chunk), driven through their checkouts' own code.

Imports the adapter contract, processes/ and ``jobservice.families.flashhead``/``flashtalk``.
"""
