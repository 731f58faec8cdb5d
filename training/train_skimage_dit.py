"""Train the bundled `skimage-dit` model: a small Flux-shaped pixel DiT on scikit-image's images.

    python training/train_skimage_dit.py --out DIR [--seconds 300] [--seed 0]

Data: the 16 natural and scanned images `CLASSES` names from `skimage.data` (shipped with
scikit-image, no download), each resized to 128 pixels on its short side; one class per image;
batches of random 64x64 crops. Objective: rectified flow (x_t = (1 - t) x0 + t noise, the model
predicts noise - x0, t uniform), AdamW, an EMA of the weights is what gets saved. float32 with
TF32 and bf16 autocast on a GPU; everything is seeded.

Writes to DIR: the pipeline (`save_pretrained`, transformer in bfloat16), `training.json`
(configuration, versions, loss every 50 steps, wall time) and `samples.png` (one sample per
class, 28 Euler steps). docs/trained-model.md records the run that produced the bundled weights.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

CLASSES = (
    "astronaut",
    "brick",
    "camera",
    "chelsea",
    "clock",
    "coffee",
    "coins",
    "colorwheel",
    "grass",
    "gravel",
    "hubble_deep_field",
    "immunohistochemistry",
    "moon",
    "retina",
    "rocket",
    "stereo_motorcycle",
)
SIZE = 64  # training crop and sampling resolution
SHORT_SIDE = 128  # every image is resized to this short side before cropping
TRANSFORMER = {
    "patch_size": 1,
    "in_channels": 48,
    "num_layers": 3,
    "num_single_layers": 6,
    "attention_head_dim": 64,
    "num_attention_heads": 2,
    "joint_attention_dim": 64,
    "pooled_projection_dim": 64,
    "guidance_embeds": False,
    "axes_dims_rope": (16, 24, 24),
}
TOKENS = {"num_tokens": 8, "dim": 64, "pooled_dim": 64}


def load_images(size: int = SHORT_SIDE) -> list[Any]:
    """The class images as float tensors `(3, H, W)` in [-1, 1], short side `size`."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from skimage import data

    out = []
    for name in CLASSES:
        image = getattr(data, name)()
        if isinstance(image, tuple):  # stereo_motorcycle: (left, right, disparity)
            image = image[0]
        array = np.asarray(image, dtype=np.float32)
        if image.dtype == np.uint8:
            array = array / 255.0
        if array.ndim == 2:
            array = np.stack([array] * 3, axis=-1)
        array = array[..., :3]
        tensor = torch.from_numpy(array).permute(2, 0, 1)[None]
        h, w = tensor.shape[-2:]
        scale = size / min(h, w)
        tensor = F.interpolate(
            tensor,
            size=(max(size, round(h * scale)), max(size, round(w * scale))),
            mode="bilinear",
            antialias=True,
            align_corners=False,
        )
        out.append((tensor[0].clamp(0, 1) * 2 - 1).contiguous())
    return out


def crops(images: list[Any], count: int, generator: Any, device: Any) -> tuple[Any, Any]:
    """`count` random SIZE x SIZE crops of random classes: (pixels, labels)."""
    import torch

    labels = torch.randint(len(images), (count,), generator=generator)
    batch = []
    for label in labels.tolist():
        image = images[label]
        h, w = image.shape[-2:]
        top = int(torch.randint(h - SIZE + 1, (1,), generator=generator))
        left = int(torch.randint(w - SIZE + 1, (1,), generator=generator))
        batch.append(image[:, top : top + SIZE, left : left + SIZE])
    return torch.stack(batch).to(device), labels.to(device)


def build(seed: int) -> tuple[Any, Any]:
    import torch
    from diffusers import FluxTransformer2DModel

    from cdit_runtime.skimage_pipeline import ClassTokens

    torch.manual_seed(seed)
    transformer = FluxTransformer2DModel(**TRANSFORMER)
    tokens = ClassTokens(class_names=CLASSES, **TOKENS)
    return transformer, tokens


def train(out: Path, seconds: float, seed: int, batch_size: int, lr: float) -> dict[str, Any]:
    import torch

    from cdit_runtime.skimage_pipeline import pack, position_ids

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    # cuDNN's fused attention fails in the backward pass for these shapes on H200 (torch 2.11):
    # flash / memory-efficient SDPA instead
    torch.backends.cuda.enable_cudnn_sdp(False)
    generator = torch.Generator().manual_seed(seed)
    images = load_images()
    transformer, tokens = build(seed)
    transformer.to(device).train()
    tokens.to(device).train()
    params = [*transformer.parameters(), *tokens.parameters()]
    ema = [p.detach().clone() for p in params]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.99))
    img_ids = position_ids(SIZE, SIZE, device, torch.float32)
    txt_ids = torch.zeros(TOKENS["num_tokens"], 3, device=device)
    losses: list[tuple[int, float]] = []
    start = time.monotonic()
    step = 0
    running = 0.0
    while time.monotonic() - start < seconds:
        x0, labels = crops(images, batch_size, generator, device)
        noise = torch.randn(x0.shape, generator=generator).to(device)
        t = torch.rand(batch_size, generator=generator).to(device)
        xt = (1 - t[:, None, None, None]) * x0 + t[:, None, None, None] * noise
        target = pack(noise - x0)
        warm = min(1.0, (step + 1) / 200)
        for group in optimizer.param_groups:
            group["lr"] = lr * warm
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            text, pooled = tokens(labels)
            pred = transformer(
                hidden_states=pack(xt),
                timestep=t,
                pooled_projections=pooled,
                encoder_hidden_states=text,
                txt_ids=txt_ids,
                img_ids=img_ids,
                return_dict=False,
            )[0]
        loss = torch.nn.functional.mse_loss(pred.float(), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        decay = min(0.999, (1 + step) / (10 + step))
        with torch.no_grad():
            for shadow, p in zip(ema, params, strict=True):
                shadow.lerp_(p.detach(), 1 - decay)
        running += loss.item()
        step += 1
        if step % 50 == 0:
            losses.append((step, running / 50))
            print(f"step {step} loss {running / 50:.4f} ({time.monotonic() - start:.0f} s)")
            running = 0.0
    wall = time.monotonic() - start
    with torch.no_grad():
        for shadow, p in zip(ema, params, strict=True):
            p.copy_(shadow)
    return {
        "steps": step,
        "seconds": round(wall, 1),
        "batchSize": batch_size,
        "learningRate": lr,
        "losses": losses,
        "transformer": transformer.eval(),
        "tokens": tokens.eval(),
    }


def save(out: Path, run: dict[str, Any], seed: int) -> None:
    import diffusers
    import skimage
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler

    from cdit_runtime.skimage_pipeline import SkimageClassPipeline

    transformer = run.pop("transformer").to("cpu", torch.bfloat16)
    tokens = run.pop("tokens").to("cpu", torch.float32)
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0)
    pipe = SkimageClassPipeline(transformer, scheduler, tokens)
    pipe.save_pretrained(str(out), safe_serialization=True)
    meta = {
        **run,
        "seed": seed,
        "classes": list(CLASSES),
        "size": SIZE,
        "shortSide": SHORT_SIDE,
        "transformerConfig": {
            k: list(v) if isinstance(v, tuple) else v for k, v in TRANSFORMER.items()
        },
        "parameters": sum(p.numel() for p in transformer.parameters()),
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "diffusers": diffusers.__version__,
            "scikit-image": skimage.__version__,
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        },
    }
    (out / "training.json").write_text(json.dumps(meta, indent=1) + "\n")


def sample_grid(out: Path, steps: int = 28) -> None:
    import numpy as np
    import torch
    from PIL import Image

    from cdit_runtime.skimage_pipeline import SkimageClassPipeline

    pipe = SkimageClassPipeline.from_pretrained(str(out), torch_dtype=torch.float32)
    images = pipe(
        class_labels=list(range(len(CLASSES))),
        num_inference_steps=steps,
        generator=torch.Generator().manual_seed(0),
        output_type="np",
    ).images
    cols = 8
    rows = math.ceil(len(images) / cols)
    grid = np.ones((rows * (SIZE + 2), cols * (SIZE + 2), 3), dtype=np.float32)
    for i, image in enumerate(images):
        r, c = divmod(i, cols)
        grid[r * (SIZE + 2) : r * (SIZE + 2) + SIZE, c * (SIZE + 2) : c * (SIZE + 2) + SIZE] = image
    Image.fromarray((grid * 255).round().astype(np.uint8)).save(out / "samples.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=5e-4)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    run = train(args.out, args.seconds, args.seed, args.batch_size, args.lr)
    save(args.out, run, args.seed)
    sample_grid(args.out)
    print(f"saved to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
