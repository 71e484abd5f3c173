"""Model adapters, one package or module per family: reference/ (built-in models), soulx/
(FlashHead, FlashTalk), omnirt/, vllm_omni, diffusers_wan; processes/ holds what the adapters
that drive other processes and servers share. ``base`` is the contract every adapter meets.

The API side of each family is ``jobservice/families/<family>.py``; tests/unit/test_families.py
checks that the two agree.
"""
