#!/usr/bin/env python3
"""Fixtures for Lumen's diffusion pipeline (issue 24), made with diffusers.

No pretrained weights can be downloaded where Lumen is built, so the reference is
diffusers itself on tiny random configurations that follow the real families'
conventions where single-file checkpoints cannot state them (SD 1.x: 8 heads per
attention; SD 2.x / SDXL: heads of 64 channels; CLIP: heads of 64 channels; group
norms of 32 groups), so the single-file loader infers the same configs the folders
state.

Run on the GPU machine (PyTorch, transformers; diffusers' source on PYTHONPATH):
    PYTHONPATH=/path/to/diffusers/src python3 tests/ref/gen_diffusion.py OUTDIR
Writes OUTDIR/{sd1,sd2,sdxl}/ (diffusers layout, f16 weights), with --single also
OUTDIR/{sd1,sd2,sdxl}.safetensors (original single-file key names, by make_single.py,
which make test runs itself), ref_unet / ref_vae / ref_sched / ref_pipe .safetensors
(computed in f32 on the CPU from the same f16-rounded weights) and pipe.json.
Tokenizers are the ones in tests/ref/clip/tiny (made by gen_clip.py).
"""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file

import diffusers
from diffusers import (AutoencoderKL, DDIMScheduler, DPMSolverMultistepScheduler,
                       EulerAncestralDiscreteScheduler, EulerDiscreteScheduler,
                       StableDiffusionImg2ImgPipeline, StableDiffusionPipeline,
                       StableDiffusionXLPipeline, UNet2DConditionModel)
from transformers import (CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection,
                          CLIPTokenizer)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True   # no __pycache__ beside the fixtures
import tiny_pipes  # noqa: E402  (the prompt pair, the noise recorder, the tiny folders)
from tiny_pipes import NEGATIVE, PROMPT, SCHED_BASE  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CLIP = os.path.join(HERE, "clip", "tiny")
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "diffusion")
SINGLE = "--single" in sys.argv  # also write the single files (make test builds them from the folders)
torch.set_grad_enabled(False)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

SAMPLERS = {
    "euler": (EulerDiscreteScheduler, {}),
    "euler_a": (EulerAncestralDiscreteScheduler, {}),
    "dpmpp_2m": (DPMSolverMultistepScheduler, {"algorithm_type": "dpmsolver++", "solver_order": 2}),
    "dpmpp_2m_karras": (DPMSolverMultistepScheduler, {"algorithm_type": "dpmsolver++", "solver_order": 2,
                                                      "use_karras_sigmas": True}),
    "ddim": (DDIMScheduler, {}),
}

# ---- noise recorder (tiny_pipes.Draws): every randn_tensor diffusers draws (ancestral
# steps, VAE sampling, img2img noise) comes from one seeded generator, recorded in order.
DRAWS = tiny_pipes.Draws(1234)
_randn, patch_randn, take_draws = DRAWS.randn, DRAWS.patch, DRAWS.take


def perturb(model, seed):
    g = torch.Generator().manual_seed(seed)
    for n, p in model.named_parameters():
        if p.ndim == 1:
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
        else:
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
    # round to f16 so the f16 files hold exactly the weights the f32 references use
    for p in model.parameters():
        p.copy_(p.half().float())
    return model.eval()


def clip_text(seed, proj=None, act="quick_gelu", eos=2, vocab=829, pad=1):
    cfg = CLIPTextConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_attention_heads=1,
                         num_hidden_layers=2, max_position_embeddings=77, hidden_act=act,
                         layer_norm_eps=1e-5, bos_token_id=827, eos_token_id=eos, pad_token_id=pad,
                         projection_dim=proj or 64)
    torch.manual_seed(seed)
    m = CLIPTextModelWithProjection(cfg) if proj else CLIPTextModel(cfg)
    return perturb(m, seed + 1)


def unet(seed, **kw):
    torch.manual_seed(seed)
    base = dict(sample_size=8, in_channels=4, out_channels=4, layers_per_block=2, norm_num_groups=32)
    base.update(kw)
    return perturb(UNet2DConditionModel(**base), seed + 1)


def vae(seed, scaling):
    torch.manual_seed(seed)
    m = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 64),
                      down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                      layers_per_block=1, norm_num_groups=32, sample_size=32, scaling_factor=scaling)
    return perturb(m, seed + 1)


def tokenizer(sub):
    return CLIPTokenizer.from_pretrained(os.path.join(CLIP, sub))


def sched(name, cfg):
    cls, kw = SAMPLERS[name]
    c = dict(cfg)
    c.update(kw)
    return cls.from_config(c)


def build():
    sd1 = StableDiffusionPipeline(
        vae=vae(10, 0.18215), text_encoder=clip_text(11), tokenizer=tokenizer("tokenizer"),
        unet=unet(12, block_out_channels=(32, 64), cross_attention_dim=64, attention_head_dim=8, layers_per_block=1,
                  down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                  up_block_types=("UpBlock2D", "CrossAttnUpBlock2D")),
        scheduler=DDIMScheduler.from_config(SCHED_BASE),
        safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    sd2_sched = dict(SCHED_BASE, prediction_type="v_prediction")
    sd2 = StableDiffusionPipeline(
        vae=vae(10, 0.18215), text_encoder=clip_text(21, act="gelu", eos=828, pad=0),
        tokenizer=tokenizer("tokenizer_2"),
        unet=unet(22, block_out_channels=(64, 64), cross_attention_dim=64, attention_head_dim=(1, 1), layers_per_block=1,
                  use_linear_projection=True, upcast_attention=True,
                  down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                  up_block_types=("UpBlock2D", "CrossAttnUpBlock2D")),
        scheduler=DDIMScheduler.from_config(sd2_sched),
        safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    sdxl = StableDiffusionXLPipeline(
        vae=vae(10, 0.13025), text_encoder=clip_text(11), text_encoder_2=clip_text(32, proj=64, act="gelu", eos=828, pad=0),
        tokenizer=tokenizer("tokenizer"), tokenizer_2=tokenizer("tokenizer_2"),
        unet=unet(33, block_out_channels=(32, 64), cross_attention_dim=128, attention_head_dim=(1, 1),
                  transformer_layers_per_block=(1, 2), use_linear_projection=True,
                  addition_embed_type="text_time", addition_time_embed_dim=8,
                  projection_class_embeddings_input_dim=6 * 8 + 64,
                  down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                  up_block_types=("CrossAttnUpBlock2D", "UpBlock2D")),
        scheduler=EulerDiscreteScheduler.from_config(SCHED_BASE), add_watermarker=False)
    return sd1, sd2, sdxl


sys.path.insert(0, HERE)
import make_single  # noqa: E402  (numpy only; make test runs it too)


def f32(d):
    return {k: v.detach().to(torch.float32).contiguous() for k, v in d.items()}


def check_converter():
    sys.path.insert(0, os.path.join(os.path.dirname(diffusers.__file__), "..", "..", "scripts"))
    import convert_diffusers_to_original_stable_diffusion as cv
    u = unet(99, block_out_channels=(32, 64), cross_attention_dim=64, attention_head_dim=8, layers_per_block=2,
             down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))
    a = sorted("model.diffusion_model." + k for k in cv.convert_unet_state_dict(u.state_dict()))
    b = sorted("model.diffusion_model." + v for v in make_single.unet_names(dict(u.config), list(u.state_dict())).values())
    assert a == b, (sorted(set(a) - set(b))[:5], sorted(set(b) - set(a))[:5])
    v = vae(98, 0.18215)
    # diffusers' VAE script numbers decoder.up for SD's four levels; compare on the rest
    a = sorted(k for k in cv.convert_vae_state_dict(v.state_dict()) if not k.startswith("decoder.up."))
    b = sorted(k[len("first_stage_model."):] for k in make_single.vae_keys(dict(v.config), {n: t.numpy() for n, t in v.state_dict().items()})
               if not k.startswith("first_stage_model.decoder.up."))
    assert a == b, (sorted(set(a) - set(b))[:5], sorted(set(b) - set(a))[:5])
    print("make_single agrees with diffusers' conversion scripts")


def main():
    os.makedirs(OUT, exist_ok=True)
    check_converter()
    patch_randn()
    sd1, sd2, sdxl = build()
    pipes = {"sd1": sd1, "sd2": sd2, "sdxl": sdxl}
    for name, p in pipes.items():
        d = os.path.join(OUT, name)
        shutil.rmtree(d, ignore_errors=True)
        p.to(torch.float16)
        p.save_pretrained(d, safe_serialization=True)
        if SINGLE:
            make_single.write_st(os.path.join(OUT, name + ".safetensors"), make_single.convert(d, name))
        p.to(torch.float32)

    g = torch.Generator().manual_seed(7)
    R = {}
    # ---- UNet at given inputs
    for name, p in pipes.items():
        D = p.unet.config.cross_attention_dim
        x = torch.randn(2, 4, 8, 8, generator=g)
        t = torch.tensor([999.0, 501.0])
        ctx = torch.randn(2, 77, D, generator=g)
        kw = {}
        R[name + ".x"], R[name + ".t"], R[name + ".ctx"] = x, t, ctx
        if name == "sdxl":
            te = torch.randn(2, 64, generator=g)
            ti = torch.tensor([[64.0, 64, 0, 0, 64, 64], [1024.0, 768, 16, 32, 1024, 1024]])
            R[name + ".text_embeds"], R[name + ".time_ids"] = te, ti
            kw["added_cond_kwargs"] = {"text_embeds": te, "time_ids": ti}
        R[name + ".out"] = p.unet(x, t, encoder_hidden_states=ctx, **kw).sample
    save_file(f32(R), os.path.join(OUT, "ref_unet.safetensors"))

    # ---- VAE
    R = {}
    for name in ("sd1", "sdxl"):
        v = pipes[name].vae
        img = torch.rand(1, 3, 32, 32, generator=g) * 2 - 1
        dist = v.encode(img).latent_dist
        z = torch.randn(1, 4, 8, 8, generator=g)
        R[name + ".img"], R[name + ".mean"], R[name + ".logvar"] = img, dist.mean, dist.logvar
        R[name + ".z"], R[name + ".dec"] = z, v.decode(z).sample
        v.enable_tiling()
        zb = torch.randn(1, 4, 24, 24, generator=g)
        ib = torch.rand(1, 3, 80, 80, generator=g) * 2 - 1
        R[name + ".z_big"], R[name + ".dec_tiled"] = zb, v.decode(zb).sample
        R[name + ".img_big"], R[name + ".mean_tiled"] = ib, v.encode(ib).latent_dist.mean
        v.disable_tiling()
        R[name + ".dec_big_untiled"] = v.decode(zb).sample
    save_file(f32(R), os.path.join(OUT, "ref_vae.safetensors"))

    # ---- schedulers alone, with fake model outputs
    R = {}
    configs = {"eps": SCHED_BASE, "v": dict(SCHED_BASE, prediction_type="v_prediction"),
               "tr": dict(SCHED_BASE, timestep_spacing="trailing", steps_offset=0)}
    for cn, cfg in configs.items():
        for sn in SAMPLERS:
            for n in (4, 20):
                s = sched(sn, cfg)
                s.set_timesteps(n)
                key = "%s.%s.%d." % (cn, sn, n)
                R[key + "timesteps"] = s.timesteps.to(torch.float64)
                if hasattr(s, "sigmas") and s.sigmas is not None:
                    R[key + "sigmas"] = torch.as_tensor(s.sigmas).to(torch.float64)
                if n == 4:
                    take_draws()
                    x = torch.randn(1, 4, 8, 8, generator=g) * s.init_noise_sigma
                    R[key + "x0"] = x
                    mos, scs, xs, noise = [], [], [], []
                    for i, t in enumerate(s.timesteps):
                        scs.append(s.scale_model_input(x, t))
                        mo = torch.randn(1, 4, 8, 8, generator=g)
                        mos.append(mo)
                        x = s.step(mo, t, x).prev_sample
                        xs.append(x)
                        d = take_draws()
                        noise.append(d[0] if d else torch.zeros(1, 4, 8, 8))
                    R[key + "model_out"] = torch.stack(mos)
                    R[key + "scaled"] = torch.stack(scs)
                    R[key + "xs"] = torch.stack(xs)
                    R[key + "noise"] = torch.stack(noise)
                    R[key + "init_sigma"] = torch.tensor([float(s.init_noise_sigma)], dtype=torch.float64)
                else:
                    s2 = sched(sn, cfg)
                    s2.set_timesteps(n)
                    strength = 0.6
                    init_t = min(int(n * strength), n)
                    t_start = max(n - init_t, 0)
                    ts = s2.timesteps[t_start * s2.order:]
                    if hasattr(s2, "set_begin_index"):
                        s2.set_begin_index(t_start * s2.order)
                    x0 = torch.randn(1, 4, 8, 8, generator=g)
                    nz = torch.randn(1, 4, 8, 8, generator=g)
                    R[key + "s06.timesteps"] = ts.to(torch.float64)
                    R[key + "s06.x0_clean"], R[key + "s06.noise"] = x0, nz
                    R[key + "s06.noised"] = s2.add_noise(x0, nz, ts[:1])
    out = {}
    for k, v in R.items():
        out[k] = v.detach().contiguous() if v.dtype == torch.float64 else v.detach().to(torch.float32).contiguous()
    save_file(out, os.path.join(OUT, "ref_sched.safetensors"))

    # ---- whole pipelines
    R = {}
    meta = {"prompt": PROMPT, "negative": NEGATIVE, "steps": 4, "cfg": 7.0, "size": [64, 64],
            "scheduler_base": SCHED_BASE, "samplers": {k: v[1] for k, v in SAMPLERS.items()},
            "diffusers": diffusers.__version__, "torch": torch.__version__}
    pe, npe = sd1.encode_prompt(PROMPT, "cpu", 1, True, NEGATIVE)
    R["sd1.prompt_embeds"] = torch.cat([npe, pe])
    lat = torch.randn(1, 4, 8, 8, generator=g)
    R["sd1.latents"] = lat
    for sn in SAMPLERS:
        sd1.scheduler = sched(sn, SCHED_BASE)
        take_draws()
        img = sd1(PROMPT, negative_prompt=NEGATIVE, num_inference_steps=4, guidance_scale=7.0, height=64,
                  width=64, latents=lat.clone(), output_type="pt").images[0]
        R["sd1.%s.image" % sn] = img
        d = take_draws()
        R["sd1.%s.noise" % sn] = torch.stack(d) if d else torch.zeros(1, 1, 4, 8, 8)
    i2i = StableDiffusionImg2ImgPipeline(**sd1.components)
    i2i.scheduler = sched("dpmpp_2m", SCHED_BASE)
    init = torch.rand(1, 3, 64, 64, generator=g)
    take_draws()
    img = i2i(PROMPT, image=init, strength=0.5, negative_prompt=NEGATIVE, num_inference_steps=4,
              guidance_scale=7.0, output_type="pt").images[0]
    d = take_draws()
    R["sd1.img2img.init"] = init[0]
    R["sd1.img2img.enc_noise"] = d[0]
    R["sd1.img2img.noise"] = d[1]
    R["sd1.img2img.image"] = img
    meta["img2img"] = {"strength": 0.5, "sampler": "dpmpp_2m",
                       "draws": "enc_noise = VAE latent_dist.sample noise, noise = add_noise noise", "ndraws": len(d)}
    sd2.scheduler = sched("euler", dict(SCHED_BASE, prediction_type="v_prediction"))
    pe, npe = sd2.encode_prompt(PROMPT, "cpu", 1, True, NEGATIVE)
    R["sd2.prompt_embeds"] = torch.cat([npe, pe])
    lat2 = torch.randn(1, 4, 8, 8, generator=g)
    R["sd2.latents"] = lat2
    R["sd2.euler.image"] = sd2(PROMPT, negative_prompt=NEGATIVE, num_inference_steps=4, guidance_scale=7.0,
                               height=64, width=64, latents=lat2.clone(), output_type="pt").images[0]
    sdxl.scheduler = sched("euler_a", SCHED_BASE)
    pe, npe, pp, npp = sdxl.encode_prompt(PROMPT, device="cpu", num_images_per_prompt=1,
                                          do_classifier_free_guidance=True, negative_prompt=NEGATIVE)
    R["sdxl.prompt_embeds"] = torch.cat([npe, pe])
    R["sdxl.pooled"] = torch.cat([npp, pp])
    R["sdxl.time_ids"] = torch.tensor([[64.0, 64, 0, 0, 64, 64]] * 2)
    pe0, npe0, pp0, npp0 = sdxl.encode_prompt(PROMPT, device="cpu", num_images_per_prompt=1,
                                              do_classifier_free_guidance=True, negative_prompt=None)
    R["sdxl.empty_negative_embeds"] = npe0
    R["sdxl.empty_negative_pooled"] = npp0
    latx = torch.randn(1, 4, 8, 8, generator=g)
    R["sdxl.latents"] = latx
    take_draws()
    R["sdxl.euler_a.image"] = sdxl(PROMPT, negative_prompt=NEGATIVE, num_inference_steps=4, guidance_scale=7.0,
                                   height=64, width=64, latents=latx.clone(), output_type="pt").images[0]
    R["sdxl.euler_a.noise"] = torch.stack(take_draws())
    save_file(f32(R), os.path.join(OUT, "ref_pipe.safetensors"))
    with open(os.path.join(OUT, "pipe.json"), "w") as f:
        json.dump(meta, f, indent=1, default=str)
    for name, p in pipes.items():
        for c in ("unet", "vae", "text_encoder", "text_encoder_2"):
            m = getattr(p, c, None)
            if m is not None:
                print(name, c, sum(x.numel() for x in m.parameters()))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
