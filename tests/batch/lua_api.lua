-- lua_api.lua OUTDIR - lm.batch from a script (tests/batch/run.sh): a
-- Ctrl-C during the first call returns interrupted = true instead of
-- raising, the script goes on, and a second call finishes the set.
local here = debug.getinfo(1, "S").source:sub(2):match("^(.*)/[^/]*$") or "."
local out = arg[1] .. "/%05d.png"
local r = lm.batch{script = here .. "/job.lua", seeds = "1-200", out = out, progress = "off"}
print("first", r.made, r.pending, r.interrupted)
local r2 = lm.batch{script = here .. "/job.lua", seeds = "1-200", out = out, progress = "off"}
print("second", r2.made + r2.existed, r2.failed, r2.interrupted)
