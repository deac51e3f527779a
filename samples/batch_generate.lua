-- batch_generate.lua - Stable Diffusion images from a params file, with the
-- pipeline loaded once for the whole run:
--   build/lumen batch samples/batch_generate.lua --params samples/batch_generate.jsonl \
--       -o 'sd/{index}_{seed}.png' [--batch-size 4] -- MODEL [TOKENIZER_DIR]
-- MODEL: a diffusers folder (model_index.json) or a single-file .safetensors
-- (SD 1.x, 2.x, SDXL); TOKENIZER_DIR: for a single file, a diffusers folder
-- of the same model to take the tokenizers (and scheduler) from.
-- Each job's columns: prompt, and optionally negative, steps, cfg, sampler
-- (defaults: the model family's, pipe.defaults: 20, 7 and "dpm++2m_karras"
-- for SD), size ("512x512"; default the model's), seed (>= 0; the runner
-- numbers the jobs when the file has none).  A value out of its range fails
-- the job, naming the option (pipe:generate checks).  A missing negative is
-- none, as in `lumen generate` without --negative (diffusers' None: zeros on
-- SDXL); "negative": "" is the empty prompt, encoded (the PNG's parameters
-- then say negative: with nothing after it).
-- With --batch-size N, up to N jobs that share steps, cfg, sampler and size
-- run in one UNet call; each image's noise comes from its own seed, so the
-- bytes are those of one job at a time (tests/models/generate.sh checks).
-- (Each image runs in its own lane; pipe:generate's stacked = true would make
-- the group one UNet call: faster on a GPU, the same bytes on Vulkan as its
-- kernels choose as for one image (lm_share_set), last bits off on the CPU.)
-- A batch mixing settings fails and the runner retries its jobs one by one.
-- Issue 37: hires (the scale), hires_steps, hires_denoise, hires_upscaler run
-- the hires fix (pipe:generate's hires=); variation_seed and
-- variation_strength (A1111's subseed and subseed_strength, also read under
-- those names) A1111's variation seed (each job its own seed), and
-- seed_resize_from ("WxH") A1111's "Resize seed from", as lumen generate's
-- --variation-seed, --variation-strength and --seed-resize-from; clip_skip
-- A1111's count (1: none), as --clip-skip.
-- LoRAs: lora ("FILE[:W]", several joined by ';'; `lumen batch --lora
-- FILE:W` adds to every job's) merged in that order, then the prompt's
-- <lora:NAME:W> tags from lora_dir/NAME.safetensors (`--lora-dir DIR`), as
-- lumen generate loads --lora's then the tags; the prompt is encoded without
-- its tags.  The pipeline keeps a job's LoRAs for the next job that has the
-- same ones (unloading restores the weights bit for bit).
-- `lumen batch ... --xyz NAME=V1,V2` makes the cells of an X/Y/Z plot of
-- one job (docs/BATCH.md).
-- img2img and inpainting: init (a PNG: alpha dropped, gray repeated, as
-- lumen generate's --init), strength, mask (a PNG, white repaints),
-- mask_blur, mask_overlay, inpaint_full_res, inpaint_padding, as lumen
-- generate's --init, --strength, --mask, --mask-blur, --mask-overlay,
-- --inpaint-full-res and --inpaint-padding (docs/DIFFUSION.md "Inpainting").
-- Jobs batched together share them (a batch mixing them is retried one by
-- one, as any other mix).
local lm = require "lumen"
local MODEL, TOKENIZER = ...
if not MODEL then error("batch_generate.lua: give the model after --: ... -- MODEL [TOKENIZER_DIR]") end
local pipe = lm.models.load(MODEL, {tokenizer = TOKENIZER})

local D = pipe.defaults   -- the family's row (models/family.h)

-- a job's LoRAs in load order: {file=, weight=, name=} (lora's, then the tags')
-- and its prompt without the tags
local function loras_of(p)
  local list = {}
  for e in tostring(p.lora or ""):gmatch("[^;]+") do
    e = e:match("^%s*(.-)%s*$")
    local f, w = e:match("^(.*):([^:]*)$")
    if f and f ~= "" and tonumber(w) then list[#list + 1] = {file = f, weight = tonumber(w)}
    elseif e ~= "" then list[#list + 1] = {file = e, weight = 1} end
  end
  local text, tags = lm.diffusion.lora_tags(tostring(p.prompt or ""))
  for _, t in ipairs(tags) do
    if not p.lora_dir then
      error("batch_generate.lua: prompt: <lora:" .. t.name .. "> needs a LoRA folder (lora_dir, --lora-dir DIR)")
    end
    list[#list + 1] = {file = p.lora_dir .. "/" .. t.name .. ".safetensors", weight = t.weight, name = t.name}
  end
  local k = {}
  for i, l in ipairs(list) do k[i] = l.file .. "=" .. string.format("%.17g", l.weight) .. "=" .. tostring(l.name) end
  return list, table.concat(k, ";"), text
end

local loaded = ""   -- the key of the LoRAs merged now
local function use_loras(list, k)
  if k == loaded then return end
  pipe:unload_loras()
  loaded = ""
  for _, l in ipairs(list) do pipe:load_lora(l.file, {scale = l.weight, name = l.name}) end
  loaded = k
end

local function settings(p)
  local _, lkey = loras_of(p)
  return {steps = p.steps or D.steps, cfg = p.cfg or D.cfg, sampler = p.sampler or D.sampler,
          size = p.size, hires = p.hires, hires_steps = p.hires_steps, hires_denoise = p.hires_denoise,
          hires_upscaler = p.hires_upscaler, variation_strength = p.variation_strength or p.subseed_strength,
          seed_resize_from = p.seed_resize_from, clip_skip = p.clip_skip, loras = lkey,
          init = p.init, strength = p.strength, mask = p.mask, mask_blur = p.mask_blur,
          mask_overlay = p.mask_overlay, inpaint_full_res = p.inpaint_full_res,
          inpaint_padding = p.inpaint_padding}
end

local function key(s)
  return table.concat({s.steps, s.cfg, s.sampler, tostring(s.size), tostring(s.hires), tostring(s.hires_steps),
                       tostring(s.hires_denoise), tostring(s.hires_upscaler), tostring(s.variation_strength),
                       tostring(s.seed_resize_from), tostring(s.clip_skip), s.loras, tostring(s.init),
                       tostring(s.strength), tostring(s.mask), tostring(s.mask_blur), tostring(s.mask_overlay),
                       tostring(s.inpaint_full_res), tostring(s.inpaint_padding)}, "|")
end

-- a PNG as f32 [C,H,W] in 0..1
local function read_png(path, what)
  local ok, t = pcall(lm.image.read_png, tostring(path), {dtype = "f32"})
  if not ok then error("batch_generate.lua: " .. what .. ": " .. tostring(t), 0) end
  return t
end

local function render_batch(ps)
  local s = settings(ps[1])
  local prompts, negatives, seeds, vseeds = {}, {}, {}, {}
  for i, p in ipairs(ps) do
    if key(settings(p)) ~= key(s) then
      error("batch_generate.lua: jobs with different steps/cfg/sampler/size/hires/variation strength/seed resize/"
        .. "clip skip/LoRAs/init/mask in one batch")
    end
    -- false: this image's negative is none (a table cannot hold nil)
    local neg = false
    if p.negative ~= nil then neg = tostring(p.negative) end
    local _, _, text = loras_of(p)
    prompts[i], negatives[i], seeds[i] = text, neg, p.seed
    vseeds[i] = p.variation_seed or p.subseed or 0
  end
  use_loras(loras_of(ps[1]))
  local hires
  if s.hires or s.hires_steps or s.hires_denoise or s.hires_upscaler then
    hires = {scale = s.hires, steps = s.hires_steps, denoise = s.hires_denoise, upscaler = s.hires_upscaler}
  end
  -- the init image as [3,H,W] (alpha dropped, gray repeated): lumen generate's --init
  local init = s.init and lm.image.rgb(read_png(s.init, "init")) or nil
  local mask = s.mask and read_png(s.mask, "mask") or nil
  return pipe:generate{prompt = prompts, negative = negatives, seed = seeds, batch = #ps,
                       init = init, strength = s.strength, mask = mask, mask_blur = s.mask_blur,
                       mask_overlay = s.mask_overlay, inpaint_full_res = s.inpaint_full_res,
                       inpaint_padding = s.inpaint_padding,
                       steps = s.steps, cfg = s.cfg, sampler = s.sampler, size = s.size, hires = hires,
                       variation_seed = s.variation_strength and vseeds or nil,
                       variation_strength = s.variation_strength, seed_resize_from = s.seed_resize_from,
                       clip_skip = s.clip_skip and s.clip_skip - 1}
end

return {
  render = function(p) return render_batch({p})[1] end,
  render_batch = render_batch,
}
