-- traced.lua - job.lua with a trace of the order in which the runner works
-- (tests/batch/run.sh and safety.sh), appended to the file $BATCH_TRACE:
-- "render I" when job I's render starts (each job of a render_batch),
-- "queued I" when lm.async_eval is called after job I's render, "write I"
-- when job I's PNG is written.  With BATCH_KILL_AT=render:I or write:I the
-- process sends itself SIGTERM at that moment (a signal at a chosen point
-- of the pipeline, not at a chosen time).
local here = debug.getinfo(1, "S").source:sub(2):match("^(.*)/[^/]*$") or "."
local spec = assert(loadfile(here .. "/job.lua"))(...)
local trace = assert(io.open(assert(os.getenv("BATCH_TRACE"), "BATCH_TRACE is not set"), "a"))
trace:setvbuf("line")
local kill_what, kill_at = (os.getenv("BATCH_KILL_AT") or ""):match("^(%a+):(%d+)$")
local pid = io.open("/proc/self/stat"):read("n")
local function event(what, i)
  trace:write(what, " ", i, "\n")
  -- SIGTERM, not SIGINT: os.execute's system() ignores SIGINT while it waits
  if what == kill_what and i == tonumber(kill_at) then os.execute("kill -TERM " .. pid) end
end

local last
local render, render_batch = spec.render, spec.render_batch
spec.render = function(p)
  last = p.seed
  event("render", p.seed)
  return render(p)
end
spec.render_batch = function(ps)
  for _, p in ipairs(ps) do last = p.seed; event("render", p.seed) end
  return render_batch(ps)
end
-- the runner looks these up when it calls them
local async_eval, write_png = lm.async_eval, lm.image.write_png
lm.async_eval = function(...)
  event("queued", last)
  return async_eval(...)
end
lm.image.write_png = function(path, ...)
  -- the temporary's name: 00007.png.lumen-HOST-PID-K.tmp
  event("write", tonumber(path:match("([^/]*)$"):match("^(%d+)%.png")))
  return write_png(path, ...)
end
-- the manifest's rename, the run's last step: "manifest 0"
local rename = os.rename
os.rename = function(from, to)
  if to:match("manifest%.jsonl$") then event("manifest", 0) end
  return rename(from, to)
end
return spec
