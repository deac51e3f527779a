"""What the scripts that build references on the tiny diffusers pipelines share
(gen_diffusion.py, gen_hires.py, gen_inpaint.py, gen_samplers.py): the prompt
pair, SD's scheduler config, the folders gen_diffusion.py writes, and the noise
recorder.  Needs torch only (gen_samplers.py runs without the diffusers
package).  The scripts are run as `python3 tests/ref/gen_X.py OUTDIR` and
import this file from their own folder (sys.path[0] is the script's folder).
"""
import os
import sys

import torch

PROMPT = "a photo of an astronaut riding a horse"
NEGATIVE = "blurry, low quality"

# SD 1.x's scheduler config (the keys diffusers' schedulers take from_config)
SCHED_BASE = {"num_train_timesteps": 1000, "beta_start": 0.00085, "beta_end": 0.012,
              "beta_schedule": "scaled_linear", "steps_offset": 1, "timestep_spacing": "leading",
              "prediction_type": "epsilon", "clip_sample": False, "set_alpha_to_one": False,
              "trained_betas": None}


class Draws:
    """The noise recorder: every randn_tensor diffusers draws (ancestral steps, VAE
    sampling, img2img noise) comes from one generator seeded with seed and is recorded
    in order.  patch() puts randn in place of randn_tensor in every diffusers module
    imported so far; take() returns the draws since the last take() and forgets them."""

    def __init__(self, seed):
        self.drawn = []
        self.gen = torch.Generator().manual_seed(seed)

    def randn(self, shape, generator=None, device=None, dtype=None, layout=None):
        t = torch.randn(tuple(shape), generator=self.gen, dtype=torch.float32)
        self.drawn.append(t.clone())
        return t.to(dtype or torch.float32).to(device or "cpu")

    def patch(self):
        for name, mod in list(sys.modules.items()):
            if name.startswith("diffusers") and hasattr(mod, "randn_tensor"):
                setattr(mod, "randn_tensor", self.randn)

    def take(self):
        d = list(self.drawn)
        self.drawn.clear()
        return d


def find(here, name, script):
    """The tiny folder `name` (sd1, sdxl, ...) gen_diffusion.py writes: here/diffusion/name,
    here/name or ./tests/ref/diffusion/name; exits naming script when there is none."""
    for d in (os.path.join(here, "diffusion", name), os.path.join(here, name),
              os.path.join(os.getcwd(), "tests", "ref", "diffusion", name)):
        if os.path.exists(os.path.join(d, "model_index.json")):
            return d
    sys.exit("%s: no %s folder (tests/ref/diffusion/%s or ./%s beside the script)"
             % (script, name, name, name))
