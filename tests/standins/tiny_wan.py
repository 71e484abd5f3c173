"""A tiny, randomly initialised Wan2.1 diffusers pipeline, built from small configs with no
downloads: a 2-layer WanTransformer3DModel, a narrow AutoencoderKLWan, a 2-layer UMT5 encoder, a
word-level tokenizer made locally with ``tokenizers``, and the UniPC flow scheduler Wan uses.
Saved with ``save_pretrained`` it has the layout of Wan-AI/Wan2.1-T2V-1.3B-Diffusers.
"""

from __future__ import annotations

from pathlib import Path

WORDS = "a red kite over the sea lighthouse in storm city at sunset cat running street".split()


def build_tiny_wan(folder: Path, *, seed: int = 0) -> Path:
    """Build and save the pipeline to ``folder``; returns it."""
    import torch
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, UMT5Config, UMT5EncoderModel

    torch.manual_seed(seed)
    vocab = {word: index for index, word in enumerate(["<pad>", "</s>", "<unk>", *dict.fromkeys(WORDS)])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    text_encoder = UMT5EncoderModel(
        UMT5Config(
            vocab_size=len(vocab),
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_heads=4,
            relative_attention_num_buckets=8,
        )
    ).eval()
    vae = AutoencoderKLWan(
        base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True]
    )
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=12,
        in_channels=16,
        out_channels=16,
        text_dim=32,
        freq_dim=256,
        ffn_dim=32,
        num_layers=2,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        rope_max_seq_len=32,
    )
    scheduler = UniPCMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0
    )
    pipe = WanPipeline(
        tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, scheduler=scheduler, transformer=transformer
    )
    # mypy sees diffusers' top-level names as its torch-less dummy classes, which lack this method.
    pipe.save_pretrained(str(folder))  # type: ignore[attr-defined]
    return folder


if __name__ == "__main__":
    import sys

    print(build_tiny_wan(Path(sys.argv[1])))
