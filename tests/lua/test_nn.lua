-- test_nn.lua - the neural-network functions (lua/l_nn.c, l_nnseq.c,
-- l_nnargs.c): values against PyTorch fixtures (tests/ref/gen_nn.py, the
-- same files the C tests read; inputs f32, references f64) or small
-- hand-computed ones, the PyTorch-style argument forms, 1-based indices in
-- and out, and the error messages.
local T, lm = ...
local test, eq, same, raises, ok = T.test, T.eq, T.same, T.raises, T.ok
local FX = "tests/ref/fixtures/nn/"

local cache = {}
local function fx(name)
  cache[name] = cache[name] or lm.load(FX .. name .. ".npy")
  return cache[name]
end

-- y matches fixture name in shape and values (f32 compute vs f64 truth)
local function close(y, name, tol)
  local ref = fx(name)
  tol = tol or 1e-4
  local scale = ref.dtype == "bool" and 1 or ref:astype("f64"):abs():max():item()
  if scale ~= scale then scale = 1 end               -- NaN in the reference
  local r = lm.compare(y:astype("f64"), ref:astype("f64"), {rtol = tol, atol = tol * (1 + scale)})
  if not r.shape_equal then
    error(string.format("%s: shape %s, want %s", name, table.concat(y.shape, "x"),
                        table.concat(ref.shape, "x")), 2)
  end
  if not r.ok then error(string.format("%s: max_abs %g at %s", name, r.max_abs, tostring(r.worst_index)), 2) end
end

local NN = {"conv1d", "conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
  "upsample", "interpolate", "pixel_shuffle", "pixel_unshuffle", "softmax", "log_softmax", "layer_norm",
  "rms_norm", "group_norm", "batch_norm", "normalize", "l2_normalize", "linear", "swiglu", "geglu",
  "leaky_relu", "embedding", "attention", "scaled_dot_product_attention", "rope", "rope_freqs", "rope_multi",
  "rope_angles", "topk", "sort", "argsort", "scatter", "scatter_add", "one_hot", "tril", "triu",
  "timestep_embedding"}

test("every NN function is bound with a docstring", function()
  for _, n in ipairs(NN) do
    eq(type(lm[n]), "function", "lm." .. n)
    local d = lm.doc("lm." .. n)
    ok(d and d:find(n, 1, true), "doc of lm." .. n)
  end
  local x = lm.ones{2, 2}
  for _, m in ipairs{"softmax", "log_softmax", "leaky_relu", "l2_normalize", "topk", "sort",
                     "argsort", "scatter", "scatter_add", "tril", "triu"} do
    eq(type(x[m]), "function", "t:" .. m)
    ok(lm.doc("t:" .. m), "doc of t:" .. m)
  end
  ok(lm.doc(lm.interpolate):find("Alias of lm.upsample", 1, true), "alias doc")
end)

test("every builder of core/ops_nn.h has its lm function", function()
  local f = assert(io.open("core/ops_nn.h"))
  local n = 0
  for name in f:read("a"):gmatch("\nlm_[%w_]+ %*?lm_([%w_]+)%(") do
    if name ~= "nn_rebuild" then                   -- compile's replay hook, not an op
      eq(type(lm[name]), "function", "lm." .. name)
      n = n + 1
    end
  end
  f:close()
  ok(n >= 35, "found the builders (" .. n .. ")")
end)

test("conv2d: options by name and by position", function()
  local x, w, b = fx("conv_x"), fx("conv_w"), fx("conv_b")
  close(lm.conv2d(x, w, b, {padding = 1}), "conv_a")
  close(lm.conv2d(x, w, b, 1, 1), "conv_a")
  close(lm.conv2d(x, w, b, {padding = "same"}), "conv_a")
  close(lm.conv2d(x, w, nil, {stride = {2, 1}, padding = {1, 2, 0, 1}, dilation = {1, 2}}), "conv_pad")
  close(lm.conv2d(x, fx("conv_wg"), b, 2, 1, 1, 2), "conv_groups")
  close(lm.conv2d(x, fx("conv_wd"), nil, {padding = {1, 1}, groups = 4}), "conv_depthwise")
  close(lm.conv2d(x, fx("conv_w1")), "conv_1x1")
  close(lm.conv2d(x, fx("conv_w1"), {padding = "valid"}), "conv_1x1")
end)

-- The CPU keeps Winograd's transformed filters on the weight's buffer
-- (backends/cpu/conv_pack.c): an in-place write must drop them.  Doubling
-- is exact, so the results are compared bit for bit.
test("conv2d: an in-place write to the weight is seen by the next call", function()
  local x = lm.randn({1, 16, 8, 8}, {seed = 5})
  local w = lm.randn({16, 16, 3, 3}, {seed = 6}):eval()
  local y1 = lm.conv2d(x, w, nil, 1, 1):eval()
  same(lm.conv2d(x, w, nil, 1, 1):totable(), y1:totable())
  w:set(nil, w * 2)
  local y2 = (y1 * 2):eval()
  same(lm.conv2d(x, w, nil, 1, 1):totable(), y2:totable())
  w:set(1, 0)                                   -- output channel 1 only
  local y3 = lm.conv2d(x, w, nil, 1, 1):eval()
  eq(y3:select(2, 1):abs():max():item(), 0)
  same(y3:select(2, 2):totable(), y2:select(2, 2):totable())
end)

test("conv1d and conv_transpose2d", function()
  close(lm.conv1d(fx("conv1d_x"), fx("conv1d_w"), fx("conv_b"), {stride = 2, padding = {1, 2}}), "conv1d")
  local x, w = fx("convt_x"), fx("convt_w")
  close(lm.conv_transpose2d(x, w, fx("convt_b"), {stride = 2, padding = 1, output_padding = 1}), "convt_a")
  close(lm.conv_transpose2d(x, w, fx("convt_b6"), {stride = {1, 2}, padding = {0, 1}, dilation = {2, 1},
                                                 groups = 2}), "convt_groups")
  -- PyTorch's positional order puts groups before dilation
  close(lm.conv_transpose2d(x, w, fx("convt_b6"), {1, 2}, {0, 1}, 0, 2, {2, 1}), "convt_groups")
end)

test("pooling", function()
  local x = fx("pool_x")
  close(lm.max_pool2d(x, 3, 2, 1), "maxpool_a")
  close(lm.max_pool2d(x, {3, 2}, {stride = {2, 1}, padding = {1, 0}, dilation = {2, 1}, ceil_mode = true}),
        "maxpool_b")
  close(lm.avg_pool2d(x, 3, {stride = 2, padding = 1}), "avgpool_a")
  close(lm.avg_pool2d(x, 3, 2, 1, true, false), "avgpool_b")
  close(lm.avg_pool2d(x, 2, {divisor_override = 5}), "avgpool_c")
  close(lm.adaptive_avg_pool2d(x, {4, 3}), "adaptive_a")
  close(lm.adaptive_avg_pool2d(x, {output_size = {5, 7}}), "adaptive_b")
  same(lm.max_pool2d(lm.arange(16):reshape{1, 1, 4, 4}:astype("f32"), 2):totable(), {{{{5, 7}, {13, 15}}}})
end)

test("upsample / interpolate and pixel shuffles", function()
  local x = fx("up_x")
  close(lm.interpolate(x, {scale_factor = 2}), "up_nearest_s2")
  close(lm.upsample(x, {8, 11}), "up_nearest_size")
  close(lm.interpolate(x, nil, 2, "bilinear"), "up_bilinear_s2")
  close(lm.interpolate(x, {size = {9, 13}, mode = "bilinear", align_corners = true}), "up_bilinear_ac")
  close(lm.interpolate(x, {scale_factor = {1.5, 2.5}, mode = "bilinear"}), "up_bilinear_frac")
  close(lm.upsample(x, {size = {3, 4}, mode = "bilinear", align_corners = false}), "up_bilinear_down")
  close(lm.pixel_shuffle(fx("ps_x"), 2), "pixel_shuffle")
  close(lm.pixel_unshuffle(fx("pu_x"), {downscale_factor = 2}), "pixel_unshuffle")
end)

test("softmax and log_softmax with 1-based dims", function()
  local x = fx("sm_x")
  close(x:softmax(), "softmax_2")
  close(x:softmax(-1), "softmax_2")
  close(lm.softmax(x, 2), "softmax_1")
  close(x:softmax{dim = 1}, "softmax_0")
  close(x:softmax{axis = 1}, "softmax_0")
  close((x * 64):softmax(), "softmax_big")
  close(x:log_softmax(), "log_softmax_2")
  close(lm.log_softmax(x, 2), "log_softmax_1")
  local s = lm.tensor{0, math.log(3)}:softmax()
  T.near(s[1]:item(), 0.25); T.near(s[2]:item(), 0.75)
end)

test("layer, rms, group and batch norm", function()
  local x, w, b = fx("ln_x"), fx("ln_w"), fx("ln_b")
  close(lm.layer_norm(x, {8}, w, b, 1e-5), "layer_norm_affine")
  close(lm.layer_norm(x, 8, w, b), "layer_norm_affine")
  close(lm.layer_norm(x, nil, w, b), "layer_norm_affine")
  close(lm.layer_norm(x, {6, 8}), "layer_norm_2")
  close(lm.layer_norm(x, {weight = w}), "layer_norm_w")
  close(lm.rms_norm(x, 8, w, 1e-6), "rms_norm_w")
  close(lm.rms_norm(x, {6, 8}, {eps = 1e-6}), "rms_norm_2")
  local gx, gw, gb = fx("gn_x"), fx("gn_w"), fx("gn_b")
  close(lm.group_norm(gx, 3, gw, gb), "group_norm_affine")
  close(lm.group_norm(gx, {num_groups = 6, eps = 1e-5}), "group_norm_6")
  close(lm.group_norm(fx("gn_x3"), 2), "group_norm_3d")
  close(lm.batch_norm(fx("bn_x"), fx("bn_mean"), fx("bn_var"), gw[{{1, 3}}], gb[{{1, 3}}], {eps = 1e-5}),
        "batch_norm")
  close(lm.batch_norm(fx("bn_x"), fx("bn_mean"), fx("bn_var"), gw[{{1, 3}}], gb[{{1, 3}}], false, 0.1, 1e-5),
        "batch_norm")
end)

test("normalize, linear, gates, leaky_relu", function()
  local x = fx("l2_x")
  close(x:l2_normalize(), "l2_normalize_1")
  close(lm.normalize(x), "l2_normalize_1")            -- PyTorch's dim=1 is our axis 2
  close(lm.normalize(x, {dim = 1}), "l2_normalize_0")
  close(x:l2_normalize(1), "l2_normalize_0")
  close(lm.linear(fx("lin_x"), fx("lin_w"), fx("lin_b")), "linear")
  local g = fx("glu_x")
  close(lm.swiglu(g), "swiglu")
  close(lm.geglu(g), "geglu")
  local h = g:split(2, 2)
  close(lm.swiglu(h[1], h[2]), "swiglu")
  close(g:leaky_relu(0.2), "leaky_relu")
  same(lm.tensor{-100, 2}:leaky_relu():totable(), {-1, 2})
end)

test("embedding takes 1-based indices (PyTorch's argument order)", function()
  close(lm.embedding(fx("emb_idx") + 1, fx("emb_w")), "embedding")
  local w = lm.tensor{{1, 2}, {3, 4}, {5, 6}}
  same(lm.embedding({3, 1, -1}, w):totable(), {{5, 6}, {1, 2}, {5, 6}})
  raises(function() lm.embedding({1, 0}, w) end, "embedding: index 0 at position 2")
  raises(function() lm.embedding(lm.tensor({4}, "i64"), w) end, "out of range 1..3")
  raises(function() lm.embedding(lm.tensor{1.5}, w) end, "integer dtype")
  raises(function() lm.embedding({1}, lm.ones{3}) end, "weight must be 2-d")
end)

test("attention and scaled_dot_product_attention", function()
  local q, k, v = fx("att_q"), fx("att_k"), fx("att_v")
  close(lm.attention(q, k, v), "att_plain")
  close(lm.attention(q, k, v, {causal = true}), "att_causal")
  close(lm.scaled_dot_product_attention(q, k, v, {is_causal = true}), "att_causal")
  close(lm.scaled_dot_product_attention(q, k, v, nil, 0, true), "att_causal")
  close(lm.attention(q, k, v, {mask = fx("att_madd"), scale = 0.3}), "att_maskadd")
  close(lm.scaled_dot_product_attention(q, k, v, {attn_mask = fx("att_mbool")}), "att_maskbool")
  close(lm.attention(fx("attl_q"), fx("attl_k"), fx("attl_v"), {causal = true}), "attl_causal")
  raises(function() lm.attention(q, k, v, {dropout_p = 0.1}) end, "dropout_p must be 0")
  raises(function() lm.attention(q, k, v, {scale = 0}) end, "scale must be positive")
  raises(function() lm.attention(q, k, v, {causual = true}) end, "unknown option 'causual'")
  raises(function() lm.attention(q, k) end, "attention: value is required")
end)

test("rope, rope_multi, rope_angles", function()
  local x = fx("rope_x")
  close(lm.rope(x, 8), "rope_std")
  close(lm.rope(x), "rope_std")
  close(lm.rope(x, 8, {traditional = true}), "rope_trad")
  close(lm.rope(x, 4, {base = 500, offset = 3, scale = 0.5}), "rope_partial")
  close(lm.rope(x, 4, {traditional = true, freqs = fx("rope_freqs"), offset = 2}), "rope_freq")
  close(lm.rope_freqs(x, 4, fx("rope_freqs"), true, 1, 2), "rope_freq")
  close(lm.rope_multi(x, fx("rope_pos"), {2, 2, 4}, {traditional = true}), "rope_multi")
  -- the angle table of rope_std: position p times 10000^(-2j/8)
  local f = (lm.arange(0, 8, 2):astype("f64") * (-math.log(10000) / 8)):exp()
  local ang = lm.arange(5):astype("f64"):reshape{5, 1} * f:reshape{1, 4}
  close(lm.rope_angles(x, ang), "rope_std")
  raises(function() lm.rope(x, 8, {base = 500, freqs = fx("rope_freqs")}) end, "base or freqs")
end)

test("topk, sort, argsort give 1-based indices", function()
  local x = fx("topk_x")
  local v, i = x:topk(4, 2)
  close(v, "topk_lv"); eq(i.dtype, "i64")
  ok(lm.allclose(i - 1, fx("topk_li")), "topk indices are 1-based")
  v, i = lm.topk(x, 2, {dim = 1, largest = false})
  close(v, "topk_sv"); ok(lm.allclose(i - 1, fx("topk_si")), "topk smallest indices")
  local xn = fx("sort_xn")
  v, i = xn:sort()
  close(v, "sort_0_v"); ok(lm.allclose(i - 1, fx("sort_0_i")), "sort indices")
  v, i = lm.sort(xn, {descending = true})
  close(v, "sort_1_v"); ok(lm.allclose(i - 1, fx("sort_1_i")), "sort descending indices")
  v, i = fx("sort_x"):sort(1, true)
  close(v, "sort0_1_v"); ok(lm.allclose(i - 1, fx("sort0_1_i")), "sort along axis 1")
  ok(lm.allclose(fx("sort_x"):argsort(1) - 1, fx("sort0_0_i")), "argsort")
  same(lm.tensor{3, 1, 2}:argsort():totable(), {2, 3, 1})
  same(lm.tensor{3, 1, 2}:argsort{descending = true}:totable(), {1, 3, 2})
  -- the indices feed take_along_axis, which is 1-based too
  v, i = x:topk(3)
  ok(lm.allclose(x:take_along_axis(i, 2), v), "topk indices index the input")
  raises(function() x:topk(10) end, "topk")
  raises(function() x:topk() end, "topk: k is required")
end)

test("scatter and scatter_add take 1-based indices", function()
  local a, src = fx("sc_a"), fx("sc_src")
  close(a:scatter(2, fx("sc_idx") + 1, src[{{1, 2}, {1, 4}}]), "scatter_1")
  close(a:scatter_add(2, fx("sc_idx2") + 1, src), "scatter_add_1")
  close(lm.scatter_add(a, 1, fx("sc_idx0") + 1, fx("sc_src0")), "scatter_add_0")
  local z = lm.zeros{2, 3}
  same(z:scatter(2, {{3}, {1}}, 7):totable(), {{0, 0, 7}, {7, 0, 0}})
  same(z:scatter(-1, {{-1}, {1}}, lm.ones{2, 1}):totable(), {{0, 0, 1}, {1, 0, 0}})
  same(lm.zeros{3}:scatter_add(1, {1, 1, 3}, lm.tensor{1, 2, 3}):totable(), {3, 0, 3})
  raises(function() z:scatter(2, {{0}, {1}}, 7) end, "scatter: index 0 at position 1 of index")
  raises(function() z:scatter(2, {{4}, {1}}, 7) end, "scatter: index 4 at position 1 of index is out of range 1..3")
  raises(function() z:scatter(3, {{1}, {1}}, 7) end, "scatter: axis 3 out of range")
  raises(function() z:scatter(2, {{1}, {1}}, "x") end, "src must be a tensor or a number")
  -- a lazy index tensor holding 0 fails at the call, in Lua's numbering
  raises(function() z:scatter(2, lm.tensor({{1}, {0}}, "i64") * 1, 7) end,
         "scatter: index 0 at position 2 of index")
end)

test("one_hot, tril, triu, timestep_embedding", function()
  close(lm.one_hot(fx("oh_idx") + 1, 5), "one_hot")
  same(lm.one_hot({1, 3, -1}, 3):totable(), {{1, 0, 0}, {0, 0, 1}, {0, 0, 1}})
  eq(lm.one_hot({1}, 2).dtype, "i64")
  raises(function() lm.one_hot({1, 0}, 3) end, "one_hot: index 0 at position 2")
  raises(function() lm.one_hot({5}, 3) end, "out of range 1..3")
  raises(function() lm.one_hot({1}) end, "num_classes must be given")
  local x = fx("tri_x")
  close(x:tril(), "tril_2"); close(x:tril(1), "tril_3"); close(lm.tril(x, {diagonal = -2}), "tril_0")
  close(x:triu(), "triu_2"); close(x:triu(1), "triu_3"); close(lm.triu(x, -2), "triu_0")
  local t = fx("ts_t")
  close(lm.timestep_embedding(t, 16), "ts_a")
  close(lm.timestep_embedding(t, 15, {flip_sin_to_cos = false, downscale_freq_shift = 1, scale = 2}), "ts_b")
  close(lm.timestep_embedding(t, 15, 10000, false, 1, 2), "ts_b")
end)

test("argument errors name the function and the argument", function()
  local x = lm.ones{1, 2, 5, 5}
  local w = lm.ones{3, 2, 3, 3}
  raises(function() lm.conv2d(x, w, nil, {strides = 2}) end, "conv2d: unknown option 'strides'")
  raises(function() lm.conv2d(x, w, nil, {strides = 2}) end, "known: weight, bias, stride")
  raises(function() lm.conv2d(x, w, nil, 1, {stride = 2}) end, "conv2d: stride given both")
  raises(function() lm.conv2d(x, w, nil, 1, 0, 1, 1, 5) end, "conv2d: too many arguments")
  raises(function() lm.conv2d(x, w, nil, {stride = "2"}) end, "conv2d: stride must be an integer")
  raises(function() lm.conv2d(x, w, nil, {padding = {1, 2, 3}}) end, "conv2d: padding needs 1, 2 or 4")
  raises(function() lm.conv2d(x, w, nil, {padding = "full"}) end, "padding 'full' is not supported")
  raises(function() lm.conv2d(x, w, nil, {padding = "same", stride = 2}) end, "'same' needs stride 1")
  raises(function() lm.conv2d(x, lm.ones{3, 2, 3}) end, "conv2d: weight must be 4-d")
  raises(function() lm.conv2d(x) end, "conv2d: weight is required")
  raises(function() lm.conv2d(x, 3) end, "conv2d: weight must be a tensor, got number")
  raises(function() lm.conv2d(lm.ones{2, 5, 5}, w) end, "conv2d")          -- wrong rank
  raises(function() lm.conv2d(lm.ones{2, 5, 5}, w) end, "[2,5,5]")
  raises(function() lm.max_pool2d(x) end, "max_pool2d: kernel_size is required")
  raises(function() lm.max_pool2d(x, 2, {return_indices = true}) end, "return_indices")
  raises(function() lm.max_pool2d(x, 2, {ceil_mode = 1}) end, "ceil_mode must be a boolean")
  raises(function() lm.interpolate(x, {size = 4, scale_factor = 2}) end, "exactly one of size and scale_factor")
  raises(function() lm.interpolate(x, {scale_factor = 2, mode = "bicubic"}) end, "mode 'bicubic' is not supported")
  raises(function() lm.interpolate(x, {scale_factor = 2, align_corners = true}) end, "'bilinear' only")
  raises(function() lm.interpolate(lm.ones{2, 5}, {scale_factor = 2}) end, "upsample")
  raises(function() lm.softmax(x, 0) end, "softmax: axis 0 is not valid")
  raises(function() lm.softmax(x, 5) end, "softmax: axis 5 out of range for a 4-d tensor")
  raises(function() x:softmax{dims = 1} end, "softmax: unknown option 'dims' (known: dim/axis)")
  raises(function() lm.layer_norm(x, {4}) end, "normalized_shape does not match the last 1 axes")
  raises(function() lm.group_norm(x, 3) end, "group_norm")
  raises(function() lm.group_norm(x) end, "num_groups is required")
  raises(function() lm.batch_norm(x, lm.zeros{2}, lm.ones{2}, {training = true}) end, "training=true")
  raises(function() lm.normalize(x, {p = 1}) end, "only p=2")
  raises(function() lm.linear(x) end, "linear: weight is required")
  raises(function() lm.softmax(x, {1}) end, "softmax: dim must be an integer")
end)

test("NN ops trace under compile", function()
  local w = lm.randn({4, 3, 3, 3}, {seed = 2})
  local f = lm.compile(function(x) return lm.conv2d(x, w, nil, {padding = 1}):silu():softmax(2) end)
  local x = lm.randn({1, 3, 6, 6}, {seed = 3})
  ok(lm.allclose(f(x), lm.conv2d(x, w, nil, {padding = 1}):silu():softmax(2), 1e-5, 1e-6), "compiled")
end)
