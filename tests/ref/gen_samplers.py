#!/usr/bin/env python3
"""Fixtures for the samplers added as rows of the sampler table after issue 24's five
(issue 37), computed by diffusers' own scheduler classes the way gen_diffusion.py computed
ref_sched.safetensors (which stays as it is):
  ref_sched_more.safetensors  LMS, LMS Karras and Euler Karras (unchanged by the second part)
  ref_sched_37.safetensors    Heun, DPM++ 2M SDE, DPM++ 2S a, UniPC (each + Karras and
                              exponential), LMS / Euler / DPM++ 2M exponential, LCM (16 rows),
                              and whole 4-step SD 1.x runs of the tiny pipeline with six

Needs torch, numpy and scipy (diffusers' LMS integrates with scipy.integrate.quad) and
diffusers' source; the full diffusers package is only needed for the whole runs: when
`import diffusers` fails, the scheduler files are loaded from the source with the config
plumbing they import (ConfigMixin.from_config, register_to_config, BaseOutput) replaced by
the few lines below (and the whole runs are skipped), and the check at the end replays
gen_diffusion.py's Euler loops from ref_sched.safetensors to show the harness computes
what diffusers computed there.
    python3 tests/ref/gen_samplers.py [/path/to/diffusers/src] [OUTDIR]
(an argument holding diffusers/__init__.py is the source, else it is OUTDIR; without a
source, diffusers comes from PYTHONPATH).  Writes into OUTDIR (default
tests/ref/diffusion/), for configs eps (SD 1.x's), v (v_prediction) and tr (trailing,
offset 0):
  <cfg>.<sampler>.<n>.timesteps / sigmas        after set_timesteps(n), n = 4 and 20
  <cfg>.<sampler>.4.init_sigma / x0 / model_out / scaled / xs / noise
                                                the 4-step loop with fake model outputs, one
                                                entry per model call (Heun: 7), noise the
                                                draws of the step (zeros where none)
  <cfg>.<sampler>.20.s06.timesteps / x0_clean / noise / noised
                                                img2img at strength 0.6 (add_noise)
  <cfg>.<sampler>.20.s06.model_out / scaled / xs (/ draws in ref_sched_37)
                                                the first 4 kept model calls from there
and in ref_sched_37 (needs the full diffusers and tests/ref/diffusion/sd1 and
ref_pipe.safetensors beside this script, as in the repository):
  pipe.latents, pipe.<sampler>.image / noise    StableDiffusionPipeline on sd1 with the
                                                scheduler from_config of sd1's, 4 steps,
                                                64x64, cfg 7, ref_pipe's prompt embeddings
"""
import dataclasses
import functools
import importlib.util
import inspect
import json
import os
import sys
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SRC, OUT = None, os.path.join(HERE, "diffusion")
for _a in sys.argv[1:]:
    if os.path.isfile(os.path.join(_a, "diffusers", "__init__.py")):
        SRC = _a
    else:
        OUT = _a
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True   # no __pycache__ beside the fixtures
import make_single  # noqa: E402  (numpy only: read_st / write_st)
import tiny_pipes  # noqa: E402  (torch only: the noise recorder, SD's scheduler config)
from tiny_pipes import SCHED_BASE  # noqa: E402

torch.set_grad_enabled(False)


FILES = {"EulerDiscreteScheduler": "scheduling_euler_discrete",
         "LMSDiscreteScheduler": "scheduling_lms_discrete",
         "HeunDiscreteScheduler": "scheduling_heun_discrete",
         "DPMSolverMultistepScheduler": "scheduling_dpmsolver_multistep",
         "DPMSolverSinglestepScheduler": "scheduling_dpmsolver_singlestep",
         "UniPCMultistepScheduler": "scheduling_unipc_multistep",
         "LCMScheduler": "scheduling_lcm"}
FULL = False   # whether the whole diffusers package imported (the pipeline runs need it)


def load_schedulers():
    """diffusers' scheduler classes by name (FILES), and a version string"""
    global FULL
    if SRC:
        sys.path.insert(0, SRC)
    try:
        import diffusers
        FULL = True
        return {name: getattr(diffusers, name) for name in FILES}, diffusers.__version__
    except ImportError:
        if not SRC:
            for p in sys.path:
                if p and os.path.isfile(os.path.join(p, "diffusers", "__init__.py")):
                    return load_source(p)
            raise
    return load_source(SRC)


def load_source(src):
    pkg = "diffusers_src"

    def module(name, path=None, **attrs):
        m = types.ModuleType(name)
        if path:
            m.__path__ = [path]
        m.__dict__.update(attrs)
        sys.modules[name] = m
        return m

    class Config(dict):
        __getattr__ = dict.__getitem__

    def register_to_config(init=None, **kwargs):
        if init is None:   # self.register_to_config(key=value) after __init__
            return None

        @functools.wraps(init)
        def wrapped(self, *args, **kwargs):
            bound = inspect.signature(init).bind(self, *args, **kwargs)
            bound.apply_defaults()
            self.config = Config((k, v) for k, v in bound.arguments.items() if k != "self")
            init(self, *args, **kwargs)
        return wrapped

    class ConfigMixin:
        @classmethod
        def from_config(cls, config, **kwargs):
            # as diffusers' from_config: the keys __init__ takes, the others ignored
            names = inspect.signature(cls.__init__).parameters
            return cls(**{k: v for k, v in dict(config, **kwargs).items() if k in names})

        def register_to_config(self, **kwargs):
            self.config.update(kwargs)

    class SchedulerMixin:
        pass

    class SchedulerOutput:
        def __init__(self, prev_sample):
            self.prev_sample = prev_sample

    class Karras:   # KarrasDiffusionSchedulers: only _compatibles reads it
        def __iter__(self):
            return iter(())

    d = os.path.join(src, "diffusers")
    module(pkg, d)
    module(pkg + ".configuration_utils", ConfigMixin=ConfigMixin, register_to_config=register_to_config)
    module(pkg + ".utils", BaseOutput=object, is_scipy_available=lambda: True, deprecate=lambda *a, **k: None,
           logging=types.SimpleNamespace(get_logger=lambda name: types.SimpleNamespace(warning=print)))
    module(pkg + ".utils.torch_utils", randn_tensor=_randn)
    module(pkg + ".schedulers", os.path.join(d, "schedulers"))
    module(pkg + ".schedulers.scheduling_utils", KarrasDiffusionSchedulers=Karras(), SchedulerMixin=SchedulerMixin,
           SchedulerOutput=SchedulerOutput)
    classes = {}
    for cls, file in FILES.items():
        name = pkg + ".schedulers." + file
        spec = importlib.util.spec_from_file_location(name, os.path.join(d, "schedulers", file + ".py"))
        m = importlib.util.module_from_spec(spec)
        sys.modules[name] = m
        spec.loader.exec_module(m)
        classes[cls] = getattr(m, cls)
    with open(os.path.join(d, "__init__.py")) as f:
        version = next(line.split('"')[1] for line in f if line.startswith("__version__"))
    return classes, version + " (source, config plumbing stubbed)"


# ---- noise recorder (tiny_pipes.Draws): every randn_tensor a scheduler draws (SDE and LCM
# steps) comes from one seeded generator and is recorded in order, as gen_diffusion.py's.
DRAWS = tiny_pipes.Draws(3737)
_randn, patch_randn, take_draws = DRAWS.randn, DRAWS.patch, DRAWS.take


def gauss_quad(f, a, b, **kwargs):
    """scipy.integrate.quad where scipy is missing: 8-point Gauss-Legendre, exact for the
    cubic LMS integrates (to rounding)"""
    x, w = np.polynomial.legendre.leggauss(8)
    m, r = (a + b) / 2, (b - a) / 2
    return float(sum(wi * f(m + r * xi) for xi, wi in zip(x, w)) * r), 0.0


CLASSES, VERSION = load_schedulers()
patch_randn()
_lms = sys.modules.get(CLASSES["LMSDiscreteScheduler"].__module__)
if _lms is not None and not hasattr(_lms, "integrate"):
    print("scipy missing: LMS integrates with 8-point Gauss-Legendre")
    _lms.integrate = types.SimpleNamespace(quad=gauss_quad)
Euler, LMS = CLASSES["EulerDiscreteScheduler"], CLASSES["LMSDiscreteScheduler"]
assert dataclasses  # the stubbed BaseOutput is a plain base of diffusers' dataclasses

SAMPLERS = {
    "lms": (LMS, {}),
    "lms_karras": (LMS, {"use_karras_sigmas": True}),
    "euler_karras": (Euler, {"use_karras_sigmas": True}),
}
# issue 37's rows: Lumen's fixture name -> diffusers class, from_config arguments
SAMPLERS_37 = {
    "heun": ("HeunDiscreteScheduler", {}),
    "heun_karras": ("HeunDiscreteScheduler", {"use_karras_sigmas": True}),
    "heun_exponential": ("HeunDiscreteScheduler", {"use_exponential_sigmas": True}),
    "lms_exponential": ("LMSDiscreteScheduler", {"use_exponential_sigmas": True}),
    "euler_exponential": ("EulerDiscreteScheduler", {"use_exponential_sigmas": True}),
    "dpmpp_2m_exponential": ("DPMSolverMultistepScheduler", {"use_exponential_sigmas": True}),
    "dpmpp_2m_sde": ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++"}),
    "dpmpp_2m_sde_karras": ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++",
                                                            "use_karras_sigmas": True}),
    "dpmpp_2m_sde_exponential": ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++",
                                                                 "use_exponential_sigmas": True}),
    "dpmpp_2s_a": ("DPMSolverSinglestepScheduler", {"algorithm_type": "sde-dpmsolver++"}),
    "dpmpp_2s_a_karras": ("DPMSolverSinglestepScheduler", {"algorithm_type": "sde-dpmsolver++",
                                                          "use_karras_sigmas": True}),
    "dpmpp_2s_a_exponential": ("DPMSolverSinglestepScheduler", {"algorithm_type": "sde-dpmsolver++",
                                                               "use_exponential_sigmas": True}),
    "unipc": ("UniPCMultistepScheduler", {}),
    "unipc_karras": ("UniPCMultistepScheduler", {"use_karras_sigmas": True}),
    "unipc_exponential": ("UniPCMultistepScheduler", {"use_exponential_sigmas": True}),
    "lcm": ("LCMScheduler", {}),
}
# the whole SD 1.x runs (images are 48 KB each: a few of them)
PIPE_37 = ["heun", "dpmpp_2m_sde_karras", "dpmpp_2s_a", "unipc", "lcm", "lms"]
SHAPE_37 = (1, 4, 2, 2)   # smaller latents than ref_sched_more's: the fixture stays small
CONFIGS = {"eps": SCHED_BASE, "v": dict(SCHED_BASE, prediction_type="v_prediction"),
           "tr": dict(SCHED_BASE, timestep_spacing="trailing", steps_offset=0)}


def sched(cls, kw, cfg):
    return cls.from_config(dict(cfg, **kw))


def loop(s, x, steps, g, key, R):
    mos, scs, xs = [], [], []
    for t in s.timesteps[s.begin_index or 0:][:steps]:
        scs.append(s.scale_model_input(x, t))
        mo = torch.randn(1, 4, 8, 8, generator=g)
        mos.append(mo)
        x = s.step(mo, t, x).prev_sample
        xs.append(x)
    R[key + "model_out"], R[key + "scaled"], R[key + "xs"] = torch.stack(mos), torch.stack(scs), torch.stack(xs)


def schedulers(g):
    R = {}
    for cn, cfg in CONFIGS.items():
        for sn, (cls, kw) in SAMPLERS.items():
            for n in (4, 20):
                s = sched(cls, kw, cfg)
                s.set_timesteps(n)
                key = "%s.%s.%d." % (cn, sn, n)
                R[key + "timesteps"] = s.timesteps.to(torch.float64)
                R[key + "sigmas"] = torch.as_tensor(s.sigmas).to(torch.float64)
                if n == 4:
                    x = torch.randn(1, 4, 8, 8, generator=g) * s.init_noise_sigma
                    R[key + "x0"] = x
                    R[key + "init_sigma"] = torch.tensor([float(s.init_noise_sigma)], dtype=torch.float64)
                    loop(s, x, 4, g, key, R)
                    R[key + "noise"] = torch.zeros(4, 1, 4, 8, 8)   # none is ancestral
                else:
                    t_start = max(n - min(int(n * 0.6), n), 0)
                    ts = s.timesteps[t_start * s.order:]
                    s.set_begin_index(t_start * s.order)   # as the img2img pipeline does
                    x0 = torch.randn(1, 4, 8, 8, generator=g)
                    nz = torch.randn(1, 4, 8, 8, generator=g)
                    R[key + "s06.timesteps"] = ts.to(torch.float64)
                    R[key + "s06.x0_clean"], R[key + "s06.noise"] = x0, nz
                    R[key + "s06.noised"] = noised = s.add_noise(x0, nz, ts[:1])
                    loop(s, noised, 4, g, key + "s06.", R)
    return R


def loop_37(s, x, steps, g, key, R):
    """as loop, one entry per model call, with the draws of each call (zeros where none)"""
    mos, scs, xs, nz = [], [], [], []
    take_draws()
    for t in s.timesteps[s.begin_index or 0:][:steps]:
        scs.append(s.scale_model_input(x, t))
        mo = torch.randn(*SHAPE_37, generator=g)
        mos.append(mo)
        x = s.step(mo, t, x).prev_sample
        xs.append(x)
        d = take_draws()
        assert len(d) <= 1, key
        nz.append(d[0].float() if d else torch.zeros(*SHAPE_37))
    R[key + "model_out"], R[key + "scaled"], R[key + "xs"] = torch.stack(mos), torch.stack(scs), torch.stack(xs)
    return torch.stack(nz)


def schedulers_37(g):
    R = {}
    for cn, cfg in CONFIGS.items():
        for sn, (cls, kw) in SAMPLERS_37.items():
            for n in (4, 20):
                s = sched(CLASSES[cls], kw, cfg)
                s.set_timesteps(n)
                key = "%s.%s.%d." % (cn, sn, n)
                R[key + "timesteps"] = s.timesteps.to(torch.float64)
                if getattr(s, "sigmas", None) is not None and cls != "LCMScheduler":
                    R[key + "sigmas"] = torch.as_tensor(s.sigmas).to(torch.float64)
                if n == 4:
                    x = torch.randn(*SHAPE_37, generator=g) * s.init_noise_sigma
                    R[key + "x0"] = x
                    R[key + "init_sigma"] = torch.tensor([float(s.init_noise_sigma)], dtype=torch.float64)
                    R[key + "noise"] = loop_37(s, x, len(s.timesteps), g, key, R)
                else:
                    t_start = max(n - min(int(n * 0.6), n), 0)
                    ts = s.timesteps[t_start * s.order:]
                    s.set_begin_index(t_start * s.order)   # as the img2img pipeline does
                    x0 = torch.randn(*SHAPE_37, generator=g)
                    nz = torch.randn(*SHAPE_37, generator=g)
                    R[key + "s06.timesteps"] = ts.to(torch.float64)
                    R[key + "s06.x0_clean"], R[key + "s06.noise"] = x0, nz
                    R[key + "s06.noised"] = noised = s.add_noise(x0, nz, ts[:1])
                    R[key + "s06.draws"] = loop_37(s, noised, 4, g, key + "s06.", R)
    return R


def pipes_37(g, R):
    """whole 4-step runs of the tiny SD 1.x pipeline (tests/ref/diffusion/sd1) with the
    prompt embeddings gen_diffusion.py recorded (no tokenizer needed)"""
    import diffusers
    d = os.path.join(HERE, "diffusion")
    unet = diffusers.UNet2DConditionModel.from_pretrained(os.path.join(d, "sd1", "unet")).float().eval()
    vae = diffusers.AutoencoderKL.from_pretrained(os.path.join(d, "sd1", "vae")).float().eval()
    with open(os.path.join(d, "sd1", "scheduler", "scheduler_config.json")) as f:
        base = json.load(f)
    pipe = diffusers.StableDiffusionPipeline(vae=vae, text_encoder=None, tokenizer=None, unet=unet,
                                             scheduler=sched(Euler, {}, base),
                                             safety_checker=None, feature_extractor=None,
                                             requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    pe = torch.from_numpy(make_single.read_st(os.path.join(d, "ref_pipe.safetensors"))["sd1.prompt_embeds"].copy())
    npe, ppe = pe[:1], pe[1:]
    lat = torch.randn(1, 4, 8, 8, generator=g)
    R["pipe.latents"] = lat
    for sn in PIPE_37:
        cls, kw = SAMPLERS_37[sn] if sn in SAMPLERS_37 else ("LMSDiscreteScheduler", {})
        pipe.scheduler = sched(CLASSES[cls], kw, base)
        patch_randn()
        take_draws()
        img = pipe(prompt_embeds=ppe, negative_prompt_embeds=npe, num_inference_steps=4, guidance_scale=7.0,
                   height=64, width=64, latents=lat.clone(), output_type="pt").images[0]
        R["pipe.%s.image" % sn] = img
        dr = take_draws()
        R["pipe.%s.noise" % sn] = torch.stack(dr).float() if dr else torch.zeros(1, 1, 4, 8, 8)
        print("  pipe %s: %d draws, image mean %.4f" % (sn, len(dr), img.mean().item()))


def replay_euler():
    """gen_diffusion.py's Euler loops again from its recorded inputs: the largest difference"""
    ref = {k: torch.from_numpy(v.copy()) for k, v in
           make_single.read_st(os.path.join(HERE, "diffusion", "ref_sched.safetensors")).items()}
    worst = 0.0
    for cn, cfg in CONFIGS.items():
        s = sched(Euler, {}, cfg)
        s.set_timesteps(4)
        key = "%s.euler.4." % cn
        assert torch.equal(s.timesteps.to(torch.float64), ref[key + "timesteps"])
        x = ref[key + "x0"]
        for i, t in enumerate(s.timesteps):
            s.scale_model_input(x, t)
            x = s.step(ref[key + "model_out"][i], t, x).prev_sample
            worst = max(worst, (x - ref[key + "xs"][i]).abs().max().item())
    return worst


def main():
    os.makedirs(OUT, exist_ok=True)
    R = schedulers(torch.Generator().manual_seed(37))
    out = {k: v.detach().numpy() if v.dtype == torch.float64 else v.detach().float().numpy() for k, v in R.items()}
    make_single.write_st(os.path.join(OUT, "ref_sched_more.safetensors"), out)
    R = schedulers_37(torch.Generator().manual_seed(3737))
    failed = False
    if FULL:
        try:
            pipes_37(torch.Generator().manual_seed(373737), R)
        except Exception:   # the scheduler fixtures are written anyway
            import traceback
            traceback.print_exc()
            failed = True
            R = {k: v for k, v in R.items() if not k.startswith("pipe.")}
    else:
        print("diffusers did not import: the whole pipeline runs are skipped")
    out37 = {k: v.detach().numpy() if v.dtype == torch.float64 else v.detach().float().numpy() for k, v in R.items()}
    make_single.write_st(os.path.join(OUT, "ref_sched_37.safetensors"), out37)
    print("replayed gen_diffusion.py's euler loops: largest difference %.3g" % replay_euler())
    print("wrote %s/ref_sched_more.safetensors (%d tensors) and ref_sched_37.safetensors (%d) with diffusers %s, "
          "torch %s, numpy %s" % (OUT, len(out), len(out37), VERSION, torch.__version__, np.__version__))
    if failed:
        sys.exit("the whole pipeline runs failed (above); the scheduler fixtures were written")


if __name__ == "__main__":
    main()
