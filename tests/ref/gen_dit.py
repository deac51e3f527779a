"""gen_dit.py OUT: the tiny Z-Image and FLUX.2-klein fixtures and diffusers'
outputs for them (issue 35), made with diffusers, transformers and
tokenizers (run where PyTorch is: the GPU machine; the device is the CPU so
the numbers do not depend on the GPU).

The pipelines are diffusers' own test configurations
(tests/pipelines/z_image/test_z_image.py, tests/pipelines/flux2/
test_pipeline_flux2_klein.py: get_dummy_components) with two changes: the
tokenizer is a small byte-level BPE laid out as Qwen2's tokenizer.json
(trained here, offline: the tests' tokenizer comes from the hub) and the
Qwen3 vocabulary is that tokenizer's size, so the committed folders stay
small.  Klein's Qwen3 has 3 layers and stacks layers (1, 2), its VAE two
levels, so stacking and the VAE's up/down blocks are exercised.

Writes OUT/tokenizer (the Qwen2 tokenizer folder with vocab.json and
merges.txt beside tokenizer.json), OUT/zimage and OUT/klein
(save_pretrained folders), OUT/tokens.json (chat texts and ids of 60
prompts) and OUT/{zimage,klein}_ref.safetensors (stage outputs)."""
import json, os, sys
import numpy as np
import torch

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.set_grad_enabled(False)

from tokenizers import Tokenizer, Regex, models, normalizers, pre_tokenizers, decoders, trainers, processors, AddedToken
from transformers import Qwen2TokenizerFast, Qwen3Config, Qwen3Model, Qwen3ForCausalLM
import diffusers
from diffusers import (AutoencoderKL, FlowMatchEulerDiscreteScheduler, ZImagePipeline, ZImageTransformer2DModel,
                       AutoencoderKLFlux2, Flux2KleinPipeline, Flux2Transformer2DModel)
from safetensors.torch import save_file

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# ---- the tokenizer -------------------------------------------------------
corpus = []
words = ("a photo of an astronaut riding a horse on the moon, highly detailed, 8k, trending on artstation "
         "portrait of a cat wearing sunglasses. oil painting! digital art; the quick brown fox jumps over the "
         "lazy dog 1234567890 it's you're we've I'm they'll he'd DON'T Can't "
         "東京の夜景 一只可爱的猫 красивый пейзаж Ελληνικά naïve café déjà-vu 🐱🚀✨ "
         "landscape, mountains, river, sunset, golden hour, cinematic lighting, bokeh").split()
rng = np.random.RandomState(0)
for i in range(4000):
    n = rng.randint(3, 14)
    s = " ".join(words[j] for j in rng.randint(0, len(words), n))
    if i % 7 == 0: s += "\n" + s.upper()
    if i % 11 == 0: s = "  " + s + "   \n\n"
    corpus.append(s)
tok = Tokenizer(models.BPE(byte_fallback=False, fuse_unk=False))
tok.normalizer = normalizers.NFC()
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
trainer = trainers.BpeTrainer(vocab_size=900, min_frequency=2, show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(corpus, trainer)
specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in ["<think>", "</think>"]])
template = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "dit", "qwen3_chat_template.jinja")).read()
qtok = Qwen2TokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                          pad_token="<|endoftext|>", unk_token=None, errors="replace",
                          model_max_length=131072, add_prefix_space=False)
qtok.chat_template = template
tdir = os.path.join(out, "tokenizer")
qtok.save_pretrained(tdir)
tok.model.save(tdir)                     # vocab.json + merges.txt, as Qwen2's hub folders carry
V = len(qtok)
print("vocab", V)

prompts = ["a dog is dancing", "dance monkey", "bad quality", "", " ", "  leading and trailing  ",
           "a photo of an astronaut riding a horse on the moon",
           "It's the cat's hat; you're sure they'll come? We've, I'm, he'd.", "IT'S LOUD'S",
           "numbers 1234567890 and 3.14159, 1e-7, 2^63", "line one\nline two\n\nline four", "tabs\tand\r\nCRLF",
           "東京の夜景、一只可爱的猫", "красивый пейзаж", "naïve café déjà-vu", "n\u0061\u0308ive (decomposed)",
           "emoji 🐱🚀✨👩‍👩‍👧", "Ελληνικά γράμματα", "mixed中文and English123", "trailing spaces   ",
           "    ", "\n\n\n", "!!!???...", "a,b,c;d:e", "'quoted' \"double\" `back`", "under_score-dash/slash\\back",
           "<|im_end|> typed by the user", "text <think> inside </think> it", "<|endoftext|>",
           "ｆｕｌｌｗｉｄｔｈ ＡＢＣ", "ﬁ ligature", "Å vs A\u030a", "zero\u200bwidth", "tab\tsep\tvalues",
           "very " * 40 + "long", "x" * 300, "123456789012345678901234567890", "a" + " " * 17 + "b",
           "The End.", "cinematic lighting, bokeh, 8k", "golden hour\n", "\tindent", "DON'T Can't won't",
           "ÀÉÎÕÜ àéîõü", "😀", "👍🏽", "🇫🇷", "ß ẞ", "İstanbul ıi", "한국어 문장", "العربية", "עברית",
           "हिन्दी", "ไทย", "mañana", "Ω≈ç√∫", "<b>html</b>", "{\"json\": [1, 2]}", "a\u00a0nbsp", "end"]
tokens = []
for p in prompts:
    msgs = [{"role": "user", "content": p}]
    row = {"prompt": p}
    for think in (True, False):
        text = qtok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=think)
        row["chat_think" if think else "chat_nothink"] = text
        row["ids_think" if think else "ids_nothink"] = qtok(text)["input_ids"]
    row["ids_plain"] = qtok(p)["input_ids"]
    enc = qtok(row["chat_think"], padding="max_length", max_length=32, truncation=True)
    row["ids_pad32"] = enc["input_ids"]
    row["mask_pad32"] = enc["attention_mask"]
    tokens.append(row)
# characters the tokenizers library's regex counts as whitespace and ICU's
# \s does not, and a plain ChatML template's rendering
extra = ["a\x0bb", "x\x85y", "!\x0b!", "a \x0b b\x85\n", "\x0c form feed", "\u2028line\u2029para"]
chatml = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
json.dump({"vocab_size": V, "max_length": 32, "prompts": tokens,
           "extra": [{"prompt": p, "ids_plain": qtok(p)["input_ids"]} for p in extra],
           "chatml": {"template": chatml, "hi": qtok.apply_chat_template(
               [{"role": "user", "content": "hi"}], chat_template=chatml, tokenize=False, add_generation_prompt=True)}},
          open(os.path.join(out, "tokens.json"), "w"), ensure_ascii=False, indent=0)

def save(name, d):
    save_file({k: v.detach().contiguous().float().cpu() if v.is_floating_point() else v.contiguous().cpu()
               for k, v in d.items()}, os.path.join(out, name))

# ---- Z-Image ------------------------------------------------------------
torch.manual_seed(0)
transformer = ZImageTransformer2DModel(all_patch_size=(2,), all_f_patch_size=(1,), in_channels=16, dim=32,
    n_layers=2, n_refiner_layers=1, n_heads=2, n_kv_heads=2, norm_eps=1e-5, qk_norm=True, cap_feat_dim=16,
    rope_theta=256.0, t_scale=1000.0, axes_dims=[8, 4, 4], axes_lens=[256, 32, 32])
with torch.no_grad():
    transformer.x_pad_token.copy_(torch.ones_like(transformer.x_pad_token.data))
    transformer.cap_pad_token.copy_(torch.ones_like(transformer.cap_pad_token.data))
torch.manual_seed(0)
vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 2,
    up_block_types=["UpDecoderBlock2D"] * 2, block_out_channels=[32, 64], layers_per_block=1, latent_channels=16,
    norm_num_groups=32, sample_size=32, scaling_factor=0.3611, shift_factor=0.1159)
torch.manual_seed(0)
scheduler = FlowMatchEulerDiscreteScheduler()
torch.manual_seed(0)
te = Qwen3Model(Qwen3Config(hidden_size=16, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
    num_key_value_heads=1, head_dim=16, vocab_size=V, max_position_embeddings=512))
zp = ZImagePipeline(scheduler=scheduler, vae=vae, text_encoder=te, tokenizer=qtok, transformer=transformer)
zp.save_pretrained(os.path.join(out, "zimage"))
ref = {}
# the encoder: padded ids, hidden_states[-2] at the unmasked tokens
pe = zp._encode_prompt(["dance monkey", "bad quality"], device="cpu", max_sequence_length=16)
ref["enc.dance monkey"] = pe[0]; ref["enc.bad quality"] = pe[1]
ids = qtok([tokens[0]["chat_think"]], padding="max_length", max_length=32, return_tensors="pt")
o = te(input_ids=ids.input_ids, attention_mask=ids.attention_mask.bool(), output_hidden_states=True)
ref["enc_all.ids"] = ids.input_ids.to(torch.int32); ref["enc_all.mask"] = ids.attention_mask.to(torch.int32)
for k, h in enumerate(o.hidden_states):
    ref[f"enc_all.hidden.{k}"] = h
# one transformer call: two images, captions of different lengths (pad tokens)
torch.manual_seed(1)
x = torch.randn(2, 16, 1, 16, 12)
cap = [torch.randn(7, 16), torch.randn(40, 16)]
t = torch.tensor([0.25, 0.8])
y = transformer(list(x.unbind(0)), t, cap, return_dict=False)[0]
ref["tr.x"] = x; ref["tr.t"] = t; ref["tr.cap0"] = cap[0]; ref["tr.cap1"] = cap[1]
ref["tr.out0"] = y[0]; ref["tr.out1"] = y[1]
# the VAE
torch.manual_seed(2)
z = torch.randn(1, 16, 8, 12)
ref["vae.z"] = z; ref["vae.decode"] = vae.decode(z, return_dict=False)[0]
img = torch.rand(1, 3, 16, 24) * 2 - 1
ref["vae.image"] = img; ref["vae.encode_mean"] = vae.encode(img).latent_dist.mean
# scheduler sigmas (Z-Image's own: linspace then shift with mu)
from diffusers.pipelines.z_image.pipeline_z_image import calculate_shift, get_default_z_image_sigmas
for steps, seq in ((4, 64), (8, 4096), (9, 1024), (1, 256), (50, 16384)):
    s = FlowMatchEulerDiscreteScheduler()
    mu = calculate_shift(seq)
    s.set_timesteps(sigmas=get_default_z_image_sigmas(steps), mu=mu, device="cpu")
    ref[f"sched.{steps}.{seq}.sigmas"] = s.sigmas; ref[f"sched.{steps}.{seq}.timesteps"] = s.timesteps
# whole images from given latents: 4 steps, without and with CFG (and cfg normalization)
for name, kw in (("nocfg", dict(guidance_scale=0.0)), ("cfg", dict(guidance_scale=3.0, negative_prompt="bad quality")),
                 ("cfgnorm", dict(guidance_scale=3.0, cfg_normalization=1.0)),
                 ("trunc", dict(guidance_scale=3.0, cfg_truncation=0.5))):
    torch.manual_seed(3)
    lat = torch.randn(1, 16, 16, 16)
    steps_lat = []
    def cb(p, i, t, kws):
        steps_lat.append(kws["latents"].clone()); return {}
    r = zp(prompt="dance monkey", height=32, width=32, num_inference_steps=4, latents=lat, max_sequence_length=32,
           output_type="pt", callback_on_step_end=cb, **kw)
    ref[f"img.{name}.latents"] = lat
    for i, l in enumerate(steps_lat): ref[f"img.{name}.step{i}"] = l
    ref[f"img.{name}.image"] = r.images
# the caption features of the whole-image runs (max_sequence_length 32)
ref["img.nocfg.cap"] = zp._encode_prompt(["dance monkey"], device="cpu", max_sequence_length=32)[0]
ref["img.cfg.negcap"] = zp._encode_prompt(["bad quality"], device="cpu", max_sequence_length=32)[0]
# img2img (ZImageImg2ImgPipeline, the same components): the VAE's mean as
# the image's latents (Lumen encodes to the mean, as for SD) and the noise
# diffusers draws, recorded
import diffusers.pipelines.z_image.pipeline_z_image_img2img as zi2i
from diffusers import ZImageImg2ImgPipeline
zi2i.retrieve_latents = lambda enc, generator=None, sample_mode="sample": enc.latent_dist.mode()
drawn = []
_randn = zi2i.randn_tensor
def rec_randn(*a, **k):
    r = _randn(*a, **k); drawn.append(r.clone()); return r
zi2i.randn_tensor = rec_randn
zi = ZImageImg2ImgPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=te, tokenizer=qtok,
                           transformer=transformer)
torch.manual_seed(5)
init = torch.rand(1, 3, 32, 32)
r = zi(prompt="dance monkey", image=init, strength=0.6, height=32, width=32, num_inference_steps=4,
       guidance_scale=0.0, max_sequence_length=32, output_type="pt", generator=torch.Generator().manual_seed(6))
ref["i2i.init"] = init; ref["i2i.noise"] = drawn[-1]; ref["i2i.image"] = r.images
save("zimage_ref.safetensors", ref)

# ---- FLUX.2-klein -------------------------------------------------------
torch.manual_seed(0)
ftr = Flux2Transformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
    attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, timestep_guidance_channels=256,
    axes_dims_rope=[4, 4, 4, 4], guidance_embeds=False)
torch.manual_seed(0)
fte = Qwen3ForCausalLM(Qwen3Config(intermediate_size=16, hidden_size=16, num_hidden_layers=3,
    num_attention_heads=2, num_key_value_heads=1, head_dim=16, vocab_size=V, max_position_embeddings=512))
torch.manual_seed(0)
fvae = AutoencoderKLFlux2(sample_size=32, in_channels=3, out_channels=3,
    down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
    block_out_channels=(8, 16), layers_per_block=1, latent_channels=4, norm_num_groups=4,
    use_quant_conv=False, use_post_quant_conv=False)
with torch.no_grad():    # non-trivial batch-norm statistics, so the (de)normalization is tested
    fvae.bn.running_mean.copy_(torch.linspace(-0.3, 0.4, fvae.bn.running_mean.numel()))
    fvae.bn.running_var.copy_(torch.linspace(0.5, 2.0, fvae.bn.running_var.numel()))
fp = Flux2KleinPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=fvae, text_encoder=fte, tokenizer=qtok,
                        transformer=ftr)
fp.save_pretrained(os.path.join(out, "klein"))
ref = {}
pe, tid = fp.encode_prompt(prompt=["a dog is dancing", ""], device="cpu", max_sequence_length=32,
                           text_encoder_out_layers=(1, 2))
ref["enc.prompt_embeds"] = pe; ref["enc.text_ids"] = tid.to(torch.int32)
torch.manual_seed(1)
hs = torch.randn(2, 24, 16)
ehs = torch.randn(2, 10, 32)
tt = torch.tensor([0.3, 0.9])
img_ids = fp._prepare_latent_ids(torch.zeros(2, 16, 4, 6))
txt_ids = fp._prepare_text_ids(ehs)
y = ftr(hidden_states=hs, encoder_hidden_states=ehs, timestep=tt, img_ids=img_ids, txt_ids=txt_ids,
        guidance=None, return_dict=False)[0]
ref["tr.x"] = hs; ref["tr.ctx"] = ehs; ref["tr.t"] = tt; ref["tr.img_ids"] = img_ids.to(torch.int32)
ref["tr.txt_ids"] = txt_ids.to(torch.int32); ref["tr.out"] = y
torch.manual_seed(2)
z = torch.randn(1, 4, 8, 12)
ref["vae.z"] = z; ref["vae.decode"] = fvae.decode(z, return_dict=False)[0]
img = torch.rand(1, 3, 16, 24) * 2 - 1
ref["vae.image"] = img; ref["vae.encode_mean"] = fvae.encode(img).latent_dist.mean
from diffusers.pipelines.flux2.pipeline_flux2_klein import compute_empirical_mu
for steps, seq in ((4, 64), (4, 4096), (28, 1024), (50, 8192)):
    s = FlowMatchEulerDiscreteScheduler()
    s.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=compute_empirical_mu(seq, steps), device="cpu")
    ref[f"sched.{steps}.{seq}.sigmas"] = s.sigmas; ref[f"sched.{steps}.{seq}.timesteps"] = s.timesteps
for name, g in (("nocfg", 1.0), ("cfg", 4.0)):
    torch.manual_seed(3)
    lat = torch.randn(1, 16, 8, 8)
    steps_lat = []
    def cb(p, i, t, kws):
        steps_lat.append(kws["latents"].clone()); return {}
    r = fp(prompt="a dog is dancing", height=32, width=32, num_inference_steps=4, guidance_scale=g, latents=lat,
           max_sequence_length=32, text_encoder_out_layers=(1, 2), output_type="pt", callback_on_step_end=cb)
    ref[f"img.{name}.latents"] = lat
    for i, l in enumerate(steps_lat): ref[f"img.{name}.step{i}"] = l
    ref[f"img.{name}.image"] = r.images
# dynamic shifting with FLUX.2's mu (the fixture's scheduler has it off)
for steps, seq in ((4, 4096), (28, 1024), (50, 8192)):
    s = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, shift=3.0)
    s.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=compute_empirical_mu(seq, steps), device="cpu")
    ref[f"sched_dyn.{steps}.{seq}.sigmas"] = s.sigmas; ref[f"sched_dyn.{steps}.{seq}.timesteps"] = s.timesteps
# reference-image editing: one 64x64 reference image (the smallest the pipeline takes)
import PIL.Image
refimg = PIL.Image.fromarray((np.random.RandomState(4).rand(64, 64, 3) * 255).astype("uint8"))
ref["ref.pixels"] = torch.from_numpy(np.asarray(refimg).copy()).to(torch.int32)
rl, rids = fp.prepare_image_latents([fp.image_processor.preprocess(refimg, 64, 64)], 1, None, "cpu", torch.float32)
ref["ref.latents"] = rl; ref["ref.ids"] = rids.to(torch.int32)
torch.manual_seed(3)
lat = torch.randn(1, 16, 8, 8)
steps_lat = []
def cb(p, i, t, kws):
    steps_lat.append(kws["latents"].clone()); return {}
r = fp(prompt="a dog is dancing", image=refimg, height=32, width=32, num_inference_steps=4, guidance_scale=1.0,
       latents=lat, max_sequence_length=32, text_encoder_out_layers=(1, 2), output_type="pt", callback_on_step_end=cb)
ref["img.ref.latents"] = lat
for i, l in enumerate(steps_lat): ref[f"img.ref.step{i}"] = l
ref["img.ref.image"] = r.images
save("klein_ref.safetensors", ref)
print("diffusers", diffusers.__version__, "torch", torch.__version__)
