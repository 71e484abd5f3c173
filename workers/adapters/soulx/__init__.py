"""SoulX-FlashHead and SoulX-FlashTalk, driven through their checkouts' own code."""
