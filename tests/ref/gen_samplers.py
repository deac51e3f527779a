#!/usr/bin/env python3
"""Fixtures for the samplers added as rows of the sampler table after issue 24's five
(issue 37): LMS, LMS Karras and Euler Karras, computed by diffusers' own scheduler
classes the way gen_diffusion.py computed ref_sched.safetensors (which stays as it is).

Needs torch, numpy and scipy (diffusers' LMS integrates with scipy.integrate.quad) and
diffusers' source; the full diffusers package is not needed: when `import diffusers`
fails, the scheduler files are loaded from the source with the config plumbing they
import (ConfigMixin.from_config, register_to_config, BaseOutput) replaced by the few
lines below, and the check at the end replays gen_diffusion.py's Euler loops from
ref_sched.safetensors to show the harness computes what diffusers computed there.
    python3 tests/ref/gen_samplers.py /path/to/diffusers/src [OUTDIR]
Writes OUTDIR/ref_sched_more.safetensors (default tests/ref/diffusion/), for configs
eps (SD 1.x's), v (v_prediction) and tr (trailing, offset 0):
  <cfg>.<sampler>.<n>.timesteps / sigmas        after set_timesteps(n), n = 4 and 20
  <cfg>.<sampler>.4.init_sigma / x0 / model_out / scaled / xs / noise
                                                the 4-step loop with fake model outputs
  <cfg>.<sampler>.20.s06.timesteps / x0_clean / noise / noised
                                                img2img at strength 0.6 (add_noise)
  <cfg>.<sampler>.20.s06.model_out / scaled / xs
                                                the first 4 kept steps from there
"""
import dataclasses
import functools
import importlib.util
import inspect
import os
import sys
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = sys.argv[1]
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "diffusion")
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True   # no __pycache__ beside the fixtures
import make_single  # noqa: E402  (numpy only: read_st / write_st)

torch.set_grad_enabled(False)


def load_schedulers():
    """diffusers' EulerDiscreteScheduler and LMSDiscreteScheduler, and a version string"""
    sys.path.insert(0, SRC)
    try:
        import diffusers
        return diffusers.EulerDiscreteScheduler, diffusers.LMSDiscreteScheduler, diffusers.__version__
    except ImportError:
        pass
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

    def register_to_config(init):
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

    class SchedulerMixin:
        pass

    class Karras:   # KarrasDiffusionSchedulers: only _compatibles reads it
        def __iter__(self):
            return iter(())

    def randn_tensor(*args, **kwargs):
        raise RuntimeError("no draws expected: LMS and Euler are not ancestral")

    d = os.path.join(SRC, "diffusers")
    module(pkg, d)
    module(pkg + ".configuration_utils", ConfigMixin=ConfigMixin, register_to_config=register_to_config)
    module(pkg + ".utils", BaseOutput=object, is_scipy_available=lambda: True,
           logging=types.SimpleNamespace(get_logger=lambda name: types.SimpleNamespace(warning=print)))
    module(pkg + ".utils.torch_utils", randn_tensor=randn_tensor)
    module(pkg + ".schedulers", os.path.join(d, "schedulers"))
    module(pkg + ".schedulers.scheduling_utils", KarrasDiffusionSchedulers=Karras(), SchedulerMixin=SchedulerMixin)
    classes = []
    for file, cls in (("scheduling_euler_discrete", "EulerDiscreteScheduler"),
                      ("scheduling_lms_discrete", "LMSDiscreteScheduler")):
        name = pkg + ".schedulers." + file
        spec = importlib.util.spec_from_file_location(name, os.path.join(d, "schedulers", file + ".py"))
        m = importlib.util.module_from_spec(spec)
        sys.modules[name] = m
        spec.loader.exec_module(m)
        classes.append(getattr(m, cls))
    with open(os.path.join(d, "__init__.py")) as f:
        version = next(line.split('"')[1] for line in f if line.startswith("__version__"))
    return classes[0], classes[1], version + " (source, config plumbing stubbed)"


Euler, LMS, VERSION = load_schedulers()
assert dataclasses  # the stubbed BaseOutput is a plain base of diffusers' dataclasses

SCHED_BASE = {"num_train_timesteps": 1000, "beta_start": 0.00085, "beta_end": 0.012,
              "beta_schedule": "scaled_linear", "steps_offset": 1, "timestep_spacing": "leading",
              "prediction_type": "epsilon", "clip_sample": False, "set_alpha_to_one": False,
              "trained_betas": None}
SAMPLERS = {
    "lms": (LMS, {}),
    "lms_karras": (LMS, {"use_karras_sigmas": True}),
    "euler_karras": (Euler, {"use_karras_sigmas": True}),
}
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
    print("replayed gen_diffusion.py's euler loops: largest difference %.3g" % replay_euler())
    print("wrote %s/ref_sched_more.safetensors (%d tensors) with diffusers %s, torch %s, numpy %s" %
          (OUT, len(out), VERSION, torch.__version__, np.__version__))


if __name__ == "__main__":
    main()
