-- test_memory.lua - memory stays flat without manual calls; free, <close>,
-- keep/sweep and the memory limit.
local T, lm = ...
local test, eq, ok, raises = T.test, T.eq, T.ok, T.raises

local function active() return lm.memory().active end

test("10,000 make-and-drop iterations keep memory flat", function()
  collectgarbage()
  local base, live0 = active(), lm.live()
  local peak_active, peak_live = 0, 0
  for i = 1, 10000 do
    local t = lm.ones{64, 64} * i          -- 16 KiB each, dropped at once
    t:eval()
    if i % 500 == 0 then
      peak_active = math.max(peak_active, active() - base)
      peak_live = math.max(peak_live, lm.live() - live0)
    end
  end
  -- 10,000 x 16 KiB = 160 MiB made; far less may be held at any time
  ok(peak_active < 16 * 2^20, "active grew by " .. peak_active .. " bytes")
  ok(peak_live < 2000, "live arrays grew by " .. peak_live)
end)

test("the module puts the collector in incremental mode", function()
  eq(collectgarbage("incremental"), "incremental")
end)

test("big tensors are collected as they are dropped", function()
  local base = active()
  local worst = 0
  for _ = 1, 200 do
    local t = lm.zeros{1024, 1024} + 1     -- 4 MiB each, 800 MiB in all
    t:eval()
    worst = math.max(worst, active() - base)
  end
  ok(worst < 256 * 2^20, "active grew by " .. worst .. " bytes")
end)

test("free and <close> release at once", function()
  local t = lm.ones{1000}:eval()
  local before = active()
  t:free()
  ok(before - active() >= 4000, "freed at once")
  raises(function() return t:sum():item() end, "freed")
  local mid
  do
    local u <close> = lm.ones{1000}:eval()
    mid = active()
  end
  ok(mid - active() >= 4000, "closed at once")
end)

test("sweep frees what is not kept", function()
  local w = lm.ones{10}:eval():keep()
  local scratch = {}
  for i = 1, 5 do scratch[i] = (lm.ones{10} * i):eval() end
  ok(lm.sweep() >= 5, "swept")
  eq(w:sum():item(), 10)
  raises(function() return scratch[1]:sum():item() end, "freed")
  w:unkeep()
end)

test("memory limit gives an error, not a crash", function()
  collectgarbage()
  lm.set_memory_limit(active() + 2^20)
  local okk, err = pcall(function() return lm.zeros{4 * 2^20}:eval() end)
  lm.set_memory_limit(0)
  ok(not okk, "allocation past the limit failed")
  ok(tostring(err):find("limit", 1, true), "message names the limit: " .. tostring(err))
  eq(lm.ones{2}:sum():item(), 2)
end)

test("with the collector stopped, an allocation at the limit collects and retries", function()
  collectgarbage()
  collectgarbage("stop")
  lm.set_memory_limit(active() + 12 * 2^20)
  local okk, err = pcall(function()
    -- each step holds 8 MiB (input and output) under a 12 MiB limit
    for _ = 1, 50 do (lm.zeros{2^20} + 1):eval() end
  end)
  lm.set_memory_limit(0)
  collectgarbage("restart")
  ok(okk, tostring(err))
end)
