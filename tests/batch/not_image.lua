-- not_image.lua - a render function that returns a 1-D tensor, not an image
-- (tests/batch/safety.sh: the error names the job and the shape)
return function(p) return lm.rand({16}, {seed = p.seed}) end
