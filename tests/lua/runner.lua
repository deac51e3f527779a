-- runner.lua - a small test runner for the Lua API.  Runs under build/lumen
-- and under stock lua5.4 (with build/ on package.cpath):
--   lua5.4 tests/lua/runner.lua tests/lua/test_*.lua
-- Prints one line per failure and closes with "N passed, N failed".
local lm = require "lumen"
local passed, failed = 0, 0
local host = rawget(_G, "lm") and "lumen" or "lua5.4"

local function fmt(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

local T = {}
function T.eq(a, b, what)
  if a ~= b then error(string.format("%s: expected %s, got %s", what or "eq", fmt(b), fmt(a)), 2) end
end
function T.near(a, b, tol, what)
  tol = tol or 1e-5
  if math.abs(a - b) > tol * (1 + math.abs(b)) then
    error(string.format("%s: expected %s, got %s", what or "near", fmt(b), fmt(a)), 2)
  end
end
function T.ok(c, what) if not c then error((what or "ok") .. ": not true", 2) end end
-- deep equality of nested tables of numbers/booleans
function T.same(a, b, what)
  local function same(x, y)
    if type(x) ~= "table" or type(y) ~= "table" then
      if type(x) == "number" and type(y) == "number" then return math.abs(x - y) <= 1e-5 * (1 + math.abs(y)) end
      return x == y
    end
    if #x ~= #y then return false end
    for i = 1, #x do if not same(x[i], y[i]) then return false end end
    return true
  end
  if not same(a, b) then
    local function dump(x)
      if type(x) ~= "table" then return tostring(x) end
      local p = {}
      for i = 1, #x do p[i] = dump(x[i]) end
      return "{" .. table.concat(p, ", ") .. "}"
    end
    error(string.format("%s: expected %s, got %s", what or "same", dump(b), dump(a)), 2)
  end
end
-- fn must raise an error whose message contains pattern (plain text)
function T.raises(fn, pattern, what)
  local ok, msg = pcall(fn)
  if ok then error((what or "raises") .. ": no error raised", 2) end
  if pattern and not tostring(msg):find(pattern, 1, true) then
    error(string.format("%s: error %q does not contain %q", what or "raises", tostring(msg), pattern), 2)
  end
end

local current = "?"
function T.test(name, fn)
  local ok, err = xpcall(fn, debug.traceback)
  if ok then passed = passed + 1
  else
    failed = failed + 1
    print(string.format("FAIL [%s] %s / %s\n  %s", host, current, name, tostring(err):gsub("\n", "\n  ")))
  end
end

for i = 1, #arg do
  current = arg[i]:match("[^/]*$")
  local chunk, err = loadfile(arg[i])
  if not chunk then
    failed = failed + 1
    print("FAIL cannot load " .. tostring(err))
  else
    local ok, e = pcall(chunk, T, lm)
    if not ok then failed = failed + 1; print("FAIL " .. current .. ": " .. tostring(e)) end
  end
end
print(string.format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1, true)   -- close the state: leak checkers see a clean exit
