-- test_fashion.lua - samples/fashion_batch.lua under lm.batch (the runner of
-- `lumen batch`): a few jobs of seeds x classes give the same pixels as the
-- sampler called directly, one at a time or several per evaluation, and
-- the pictures are garments, not constant.
local T, lm = ...
local test, eq, ok = T.test, T.eq, T.ok
local SCRIPT = "samples/fashion_batch.lua"

-- a fresh folder (under the temporary file's name) and its cleanup
local function tmpdir()
  local base = os.tmpname()
  os.remove(base)
  return base .. ".d"
end
local function cleanup(dir, names)
  for _, n in ipairs(names) do os.remove(dir .. "/" .. n) end
  os.remove(dir .. "/manifest.jsonl")
  os.remove(dir)
end

local function png_u8(path) return lm.image.read_png(path, {dtype = "u8"}) end

test("fashion_batch.lua under lm.batch: the same pixels as its sampler called directly", function()
  local jobs = {{seed = 3, class = 1}, {seed = 4, class = 7}, {seed = 5}}   -- seed 5 -> class 5
  local tmp = os.tmpname()
  os.remove(tmp)
  local csv = tmp .. ".csv"
  local f = assert(io.open(csv, "w"))
  f:write("seed,class\n3,1\n4,7\n5,\n")
  f:close()
  local dir, dir2 = tmpdir(), tmpdir()
  local r = lm.batch{script = SCRIPT, params = csv, out = dir .. "/%02d.png", progress = "off",
                     args = {"2"}}
  local r2 = lm.batch{script = SCRIPT, params = csv, out = dir2 .. "/%02d.png", progress = "off",
                      args = {"2"}, batch_size = 3}
  os.remove(csv)
  eq(r.made, 3, "jobs made")
  eq(r.failed, 0, "jobs failed")
  eq(r2.made, 3, "jobs made with batch_size 3")
  local s = loadfile(SCRIPT)("2")
  local names = {"01.png", "02.png", "03.png"}
  local direct = {}
  for k, p in ipairs(jobs) do
    local img = s.render(p)
    eq(table.concat(img.shape, "x"), "1x56x56", "render's shape")
    local ref = dir .. "/direct" .. k .. ".png"
    lm.image.write_png(ref, img)
    local a, b, c = png_u8(dir .. "/" .. names[k]), png_u8(ref), png_u8(dir2 .. "/" .. names[k])
    os.remove(ref)
    eq(a:eq(b):all():item(), true, "job " .. k .. ": batch PNG equals the direct render")
    eq(c:eq(b):all():item(), true, "job " .. k .. ": batch_size 3 equals the direct render")
    local v = b:astype("f32")
    ok(v:max():item() - v:min():item() > 100, "job " .. k .. " is not constant")
    ok(v:var():item() > 400, "job " .. k .. " has structure")
    direct[k] = v
  end
  -- different seeds and classes give different pictures
  ok((direct[1] - direct[2]):abs():mean():item() > 5, "jobs 1 and 2 differ")
  cleanup(dir, names)
  cleanup(dir2, names)
end)

test("fashion_batch.lua names a bad class", function()
  local s = loadfile(SCRIPT)("1")
  T.raises(function() s.render({seed = 1, class = 12}) end, "class must be an integer 0..9")
end)
