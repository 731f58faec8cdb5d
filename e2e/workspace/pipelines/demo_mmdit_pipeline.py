# Synthetic fixture for cdit-integrator (not a real pipeline). Runs on CPU with the tiny weights that e2e/make_tiny_model.py builds.
"""Text-to-image pipeline for DemoMMDiTTransformer2DModel (sequential classifier-free guidance)."""

from __future__ import annotations

import torch

from diffusers.image_processor import VaeImageProcessor
from diffusers.pipelines.pipeline_utils import DiffusionPipeline, ImagePipelineOutput
from diffusers.utils.torch_utils import randn_tensor


class DemoMMDiTPipeline(DiffusionPipeline):
    model_cpu_offload_seq = "text_encoder->transformer->vae"

    def __init__(self, scheduler, vae, text_encoder, tokenizer, transformer):
        super().__init__()
        self.register_modules(
            scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer
        )
        self.vae_scale_factor = 8
        self.image_processor = VaeImageProcessor(vae_scale_factor=self.vae_scale_factor)

    @property
    def guidance_scale(self):
        return self._guidance_scale

    @property
    def do_classifier_free_guidance(self):
        return self._guidance_scale > 1.0

    def encode_prompt(self, prompt, device, max_sequence_length=256):
        text_inputs = self.tokenizer(
            prompt, padding="max_length", max_length=max_sequence_length, truncation=True, return_tensors="pt"
        )
        return self.text_encoder(text_inputs.input_ids.to(device))[0]

    @torch.no_grad()
    def __call__(
        self,
        prompt: str | list[str],
        negative_prompt: str | list[str] = "",
        height: int = 1024,
        width: int = 1024,
        num_inference_steps: int = 28,
        guidance_scale: float = 5.0,
        generator: torch.Generator | None = None,
        output_type: str = "pil",
        return_dict: bool = True,
    ):
        self._guidance_scale = guidance_scale
        device = self._execution_device
        batch_size = 1 if isinstance(prompt, str) else len(prompt)

        prompt_embeds = self.encode_prompt(prompt, device)
        negative_prompt_embeds = None
        if self.do_classifier_free_guidance:
            negative_prompt_embeds = self.encode_prompt([negative_prompt] * batch_size, device)

        shape = (batch_size, self.transformer.config.in_channels, height // 8, width // 8)
        latents = randn_tensor(shape, generator=generator, device=device, dtype=prompt_embeds.dtype)

        self.scheduler.set_timesteps(num_inference_steps, device=device)
        timesteps = self.scheduler.timesteps

        with self.progress_bar(total=num_inference_steps) as progress_bar:
            for i, t in enumerate(timesteps):
                timestep = t.expand(latents.shape[0]).to(latents.dtype)

                noise_pred = self.transformer(
                    hidden_states=latents,
                    encoder_hidden_states=prompt_embeds,
                    timestep=timestep,
                    return_dict=False,
                )[0]

                if self.do_classifier_free_guidance:
                    noise_pred_uncond = self.transformer(
                        hidden_states=latents,
                        encoder_hidden_states=negative_prompt_embeds,
                        timestep=timestep,
                        return_dict=False,
                    )[0]
                    noise_pred = noise_pred_uncond + guidance_scale * (noise_pred - noise_pred_uncond)

                latents = self.scheduler.step(noise_pred, t, latents, return_dict=False)[0]
                progress_bar.update()

        if output_type == "latent":
            image = latents
        else:
            latents = latents / self.vae.config.scaling_factor
            image = self.vae.decode(latents, return_dict=False)[0]
            image = self.image_processor.postprocess(image, output_type=output_type)

        self.maybe_free_model_hooks()
        if not return_dict:
            return (image,)
        return ImagePipelineOutput(images=image)
