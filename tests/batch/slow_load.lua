-- slow_load.lua - a script that takes long to load (as one loading a model
-- does), so a Ctrl-C can arrive before the run starts (tests/batch/safety.sh)
io.stderr:write("loading\n")
local t = os.clock()
while os.clock() - t < 60 do end
return function(p) return lm.rand({3, 8, 8}, {seed = p.seed}) end
