-- tests/samples/check.lua - one property of a sample's output PNG; exits 0
-- when it holds, else prints why and exits 1.  Used by tests/samples/run.sh.
--   size FILE W H            the PNG is W x H with 3 channels
--   varied FILE MIN_STD      not a constant picture: pixel std >= MIN_STD
--   close A B ATOL MAX_FRAC  A within ATOL of B (0..1 scale) at all but
--                            MAX_FRAC of the values (lm.compare)
--   pattern FILE             a Gray-Scott picture with structure: between
--                            10% and 90% of pixels lit, and edges everywhere
--   generate SAMPLE          SAMPLE's generate(params) (as lumen batch calls
--                            it) gives [3,H,W] in 0..1, seed-dependent
local lm = require "lumen"
local cmd = arg[1]

local function fail(fmt, ...)
  print(string.format(fmt, ...))
  os.exit(1)
end

local function read(path)
  local ok, t = pcall(lm.image.read_png, path, {dtype = "f32"})
  if not ok then fail("%s: cannot read: %s", path, t) end
  return t
end

if cmd == "size" then
  local t = read(arg[2])
  local want = {3, tonumber(arg[4]), tonumber(arg[3])}
  local s = t.shape
  if s[1] ~= want[1] or s[2] ~= want[2] or s[3] ~= want[3] then
    fail("%s: shape [%d,%d,%d], want [%d,%d,%d]", arg[2], s[1], s[2], s[3],
      want[1], want[2], want[3])
  end
elseif cmd == "varied" then
  local sd = read(arg[2]):std():item()
  if not (sd >= tonumber(arg[3])) then fail("%s: pixel std %.4f < %s", arg[2], sd, arg[3]) end
  print(string.format("%s: pixel std %.3f", arg[2], sd))
elseif cmd == "close" then
  local a, b = read(arg[2]), read(arg[3])
  local r = lm.compare(a, b, {atol = tonumber(arg[4]), rtol = 0})
  print(string.format("%s vs %s: max abs %.4f, %d of %d values beyond %s, psnr %.1f dB",
    arg[2], arg[3], r.max_abs, r.n_bad, r.count, arg[4], r.psnr))
  if not r.shape_equal or r.frac_bad > tonumber(arg[5]) then fail("not close") end
elseif cmd == "pattern" then
  local t = read(arg[2]):mean(1)            -- [H, W] brightness
  local lit = t:gt(0.5):astype("f32"):mean():item()
  -- mean |horizontal step|: a blurred or flat field has almost none
  local edge = (t:slice(2, 2, -1) - t:slice(2, 1, -2)):abs():mean():item()
  print(string.format("%s: %.1f%% lit, mean edge %.4f", arg[2], 100 * lit, edge))
  if lit < 0.1 or lit > 0.9 then fail("lit fraction %.3f outside 0.1..0.9", lit) end
  if edge < 0.02 then fail("mean edge %.4f < 0.02: no pattern", edge) end
elseif cmd == "generate" then
  local m = dofile(arg[2])
  if type(m) ~= "table" or type(m.generate) ~= "function" then
    fail("%s returns no generate function", arg[2])
  end
  if m.render ~= m.generate then fail("render (lumen batch's name) is not generate") end
  if rawget(_G, "generate") then fail("a global generate leaked") end
  local a = m.generate{seed = 3, width = 40, height = 24}
  local b = m.generate{seed = 3, width = 40, height = 24}
  local c = m.generate{seed = 4, width = 40, height = 24}
  local s = a.shape
  if #s ~= 3 or s[1] ~= 3 or s[2] ~= 24 or s[3] ~= 40 then
    fail("generate gave shape [%s], want [3,24,40]", table.concat(s, ","))
  end
  if a:min():item() < 0 or a:max():item() > 1 then fail("values outside 0..1") end
  if not lm.allclose(a, b, 0, 0) then fail("seed 3 twice differs") end
  local d = (a - c):abs():max():item()
  if d < 0.05 then fail("seeds 3 and 4 give the same picture (max diff %g)", d) end
  print(string.format("generate: [3,24,40] on %s, seeds 3/4 differ by up to %.3f",
    a.device, d))
else
  fail("check.lua: unknown check %s", tostring(cmd))
end
