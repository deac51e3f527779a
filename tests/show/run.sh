#!/bin/sh
# tests/show/run.sh - images inline in real terminals (issue 38): the test
# pattern of tests/show/pattern.lua shown by the REPL's :show, lm.show and
# the CLI's --show, then looked for where a person would see it:
#   1. tmux (half blocks, as inside any multiplexer): the colours of the
#      cells of `tmux capture-pane -e`; lumen generate/upscale --show and
#      lumen diff's heat map drawn there too; LUMEN_IMAGES=off and a value
#      it does not know
#   2. xterm -ti vt340 under Xvfb, the REPL typing :show: sixel, chosen from
#      the terminal's answer to the device-attributes query; an xwd
#      screenshot holds the pattern
#   3. kitty under Xvfb (OpenGL 3.3 from Mesa's llvmpipe), the REPL as in 2: kitty graphics,
#      from the environment and, with KITTY_WINDOW_ID and TERM hidden, from
#      its answer to the graphics query; a screenshot holds the pattern
#   4. a pseudo-terminal that never answers: :show returns with half
#      blocks, the terminal's modes unchanged, and the REPL goes on; a
#      background job does not ask (SIGTTOU would stop it)
# A part whose program is missing (tmux, Xvfb, xterm, kitty, xwd) or whose
# terminal cannot start here is skipped with the reason.  Each checker is
# also run on a screen without the pattern, which it must refuse.
# Prints "N passed, N failed, N skipped".
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
LUMEN="$(pwd)/$BUILD/lumen"
CHECK="python3 $(pwd)/tests/show/check.py"
TMPD=$(mktemp -d /tmp/lumen-show.XXXXXX)
pass=0; fail=0; skip=0
SOCK="lumen-show-$$"
XPID=
cleanup() {
  tmux -L "$SOCK" kill-server 2>/dev/null
  [ -n "$XPID" ] && kill "$XPID" 2>/dev/null
  rm -rf "$TMPD"
}
trap cleanup EXIT
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() {
  fail=$((fail + 1)); echo "FAIL: $1"
  if [ -n "$2" ]; then echo "$2" | tail -15 | sed 's/^/  | /'; fi
  # the pane's size, where a tmux part failed
  tmux -L "$SOCK" display -p -t r '  | (pane #{pane_width}x#{pane_height})' 2>/dev/null
}
skipped() { skip=$((skip + 1)); echo "skipped: $1"; }
have() { command -v "$1" >/dev/null 2>&1; }
# the environment a terminal started here should not inherit: the test may
# itself run inside tmux or kitty
CLEAN="env -u TMUX -u STY -u KITTY_WINDOW_ID -u TERM_PROGRAM -u LC_TERMINAL -u LUMEN_IMAGES"

# waits (up to 30 s: a loaded machine) for a file to appear
wait_file() {
  i=0
  while [ $i -lt 300 ]; do [ -s "$1" ] && return 0; sleep 0.1; i=$((i + 1)); done
  return 1
}

# ---- 1. tmux: half blocks ----
T() { tmux -L "$SOCK" -f /dev/null "$@"; }
pane() { T capture-pane -e -p -N -S -200 -t r 2>/dev/null; }
wait_pane() {   # wait_pane PATTERN: up to 30 s for the pane to hold it
  i=0
  while [ $i -lt 300 ]; do pane | grep -q -- "$1" && return 0; sleep 0.1; i=$((i + 1)); done
  return 1
}
wait_prompt() {   # up to 30 s for half blocks, then the REPL's prompt on the last line
  i=0
  while [ $i -lt 300 ]; do
    T capture-pane -p -t r 2>/dev/null | grep -v '^ *$' | tail -1 | grep -q '^> *$' &&
      T capture-pane -p -t r | grep -q "$(printf '\342\226')" && return 0
    sleep 0.1; i=$((i + 1))
  done
  return 1
}
session() {   # session CMD: a fresh 80x40 pane running CMD
  T kill-server 2>/dev/null
  sleep 0.2
  T new-session -d -s r -x 80 -y 40 "$1; echo 'session''-end'; sleep 60"
}
if ! have tmux; then
  skipped "tmux parts: tmux is not installed"
else
  session "$CLEAN $LUMEN"
  wait_pane "help() for help"
  pane > "$TMPD/empty.txt"
  T send-keys -t r -l ':show dofile("tests/show/pattern.lua")(32, "HWC"), {width = 32, height = 16}'
  T send-keys -t r Enter
  # the next line typed only at the next prompt: typed ahead, the terminal
  # would echo it in the middle of the image
  wait_prompt
  T send-keys -t r -l 'print("shown" .. "-" .. select(1, lm.show_protocol()))'
  T send-keys -t r Enter
  if wait_pane "shown-blocks"; then ok "tmux: the REPL chose half blocks inside tmux"
  else bad "tmux: the REPL chose half blocks inside tmux" "$(pane | cat -v)"; fi
  pane > "$TMPD/pane.txt"
  if r=$($CHECK pane "$TMPD/pane.txt" 32); then ok "tmux: :show drew the pattern's colours ($r)"
  else bad "tmux: :show drew the pattern's colours" "$r"; fi
  if r=$($CHECK pane "$TMPD/empty.txt" 32); then bad "tmux: the checker refuses a pane without the pattern" "$r"
  else ok "tmux: the checker refuses a pane without the pattern"; fi
  T send-keys -t r -l ':q'
  T send-keys -t r Enter
  wait_pane "session-end" >/dev/null

  # a float CHW image and a PNG file drawn by lm.show in a script
  session "$CLEAN $LUMEN -e 'local p = dofile(\"tests/show/pattern.lua\")(32, \"CHW\"); lm.save(\"$TMPD/p.png\", p); lm.show(p, {width = 32, height = 16}); print(\"next\"); lm.show(\"$TMPD/p.png\", {width = 32, height = 16})'"
  wait_pane "session-end"
  pane > "$TMPD/pane2.txt"
  # the first image, then the second (after the "next" line)
  if r=$($CHECK pane "$TMPD/pane2.txt" 32); then ok "tmux: lm.show of a [3,H,W] f32 tensor ($r)"
  else bad "tmux: lm.show of a [3,H,W] f32 tensor" "$r"; fi
  sed -n '/next/,$p' "$TMPD/pane2.txt" | tail -n +2 > "$TMPD/pane3.txt"
  if r=$($CHECK pane "$TMPD/pane3.txt" 32); then ok "tmux: lm.show of a PNG file ($r)"
  else bad "tmux: lm.show of a PNG file" "$r"; fi

  # LUMEN_IMAGES: off prints nothing and says so; an unknown value is named
  session "$CLEAN LUMEN_IMAGES=off $LUMEN -e 'print(lm.show(lm.zeros{3, 8, 8}))'"
  if wait_pane "session-end" && pane | grep -q "false *LUMEN_IMAGES" && ! pane | grep -q "48;2"; then
    ok "tmux: LUMEN_IMAGES=off draws nothing and lm.show says why"
  else bad "tmux: LUMEN_IMAGES=off draws nothing and lm.show says why" "$(pane | cat -v)"; fi
  session "$CLEAN LUMEN_IMAGES=pictures $LUMEN -e 'print(pcall(lm.show, lm.zeros{3, 8, 8}))'"
  if wait_pane "session-end" && pane | grep -q "false.*LUMEN_IMAGES=pictures: expected kitty, iterm, sixel, blocks or off"; then
    ok "tmux: LUMEN_IMAGES=pictures is refused by name"
  else bad "tmux: LUMEN_IMAGES=pictures is refused by name" "$(pane | cat -v)"; fi

  # lumen diff: the heat map of the first difference (black where equal)
  $LUMEN -e "local a = lm.zeros{3, 16, 16}; local b = lm.zeros{3, 16, 16}
    lm.save('$TMPD/da.safetensors', {['0001.conv2d.x.lua:1'] = a})
    local t = b:totable(); for c = 1, 3 do for y = 1, 16 do for x = 9, 16 do t[c][y][x] = 1 end end end
    lm.save('$TMPD/db.safetensors', {['0001.conv2d.x.lua:1'] = lm.tensor(t)})"
  session "$CLEAN $LUMEN diff $TMPD/da.safetensors $TMPD/db.safetensors"
  wait_pane "session-end"
  pane > "$TMPD/diff.txt"
  if grep -q "^heat map of 0001.conv2d" "$TMPD/diff.txt" &&
     sed -n '/^heat map of/,$p' "$TMPD/diff.txt" | grep -q "48;2;255;255;255\|38;2;255;255;255" &&
     sed -n '/^heat map of/,$p' "$TMPD/diff.txt" | grep -q "48;2;0;0;0\|38;2;0;0;0"; then
    ok "tmux: lumen diff draws the heat map of the first difference (white and black cells)"
  else bad "tmux: lumen diff draws the heat map of the first difference" "$(cat -v "$TMPD/diff.txt")"; fi
  if $LUMEN diff "$TMPD/da.safetensors" "$TMPD/db.safetensors" > "$TMPD/diff.out" 2>&1; [ $? = 1 ] &&
     ! grep -q "heat map" "$TMPD/diff.out" && ! grep -q "$(printf '\033')" "$TMPD/diff.out"; then
    ok "lumen diff to a file: no heat map, no escape sequences"
  else bad "lumen diff to a file: no heat map, no escape sequences" "$(cat -v "$TMPD/diff.out")"; fi

  # lumen generate --show, lumen upscale --show (the tiny checkpoint and an
  # installed upscaler, where the build has them)
  SD=tests/ref/diffusion/sd1
  if [ -f "$SD/model_index.json" ]; then
    session "$CLEAN LUMEN_DEVICE=cpu $LUMEN generate 'a red fox' --model $SD --steps 2 --size 64x64 --seed 7 -o $TMPD/g.png --show"
    wait_pane "session-end"
    pane > "$TMPD/gen.txt"
    $LUMEN -e "io.write(lm.show('$TMPD/g.png', {protocol = 'blocks', string = true, width = 64, height = 38}))" > "$TMPD/gen.want" 2>&1
    if grep -q "g.png (seed 7)" "$TMPD/gen.txt" && r=$($CHECK same "$TMPD/gen.txt" "$TMPD/gen.want"); then
      ok "tmux: lumen generate --show draws the written image ($r)"
    else bad "tmux: lumen generate --show draws the written image" "$r$(cat -v "$TMPD/gen.txt")"; fi
    if ls "$BUILD/models/esrgan-slim" >/dev/null 2>&1; then
      session "$CLEAN LUMEN_DEVICE=cpu $LUMEN upscale $TMPD/g.png -o $TMPD/u.png --model esrgan-slim --show"
      wait_pane "session-end"
      pane > "$TMPD/up.txt"
      $LUMEN -e "io.write(lm.show('$TMPD/u.png', {protocol = 'blocks', string = true, width = 80, height = 38}))" > "$TMPD/up.want" 2>&1
      if grep -q "g.png -> .*u.png" "$TMPD/up.txt" && r=$($CHECK same "$TMPD/up.txt" "$TMPD/up.want"); then
        ok "tmux: lumen upscale --show draws the written image ($r)"
      else bad "tmux: lumen upscale --show draws the written image" "$r$(cat -v "$TMPD/up.txt" | tail -5)"; fi
    else skipped "lumen upscale --show: no esrgan-slim in $BUILD/models (make models)"; fi
    LUMEN_DEVICE=cpu $LUMEN generate 'a red fox' --model $SD --steps 2 --size 64x64 --seed 7 -o "$TMPD/g2.png" --show > "$TMPD/gen.out" 2>&1
    if ! grep -q "$(printf '\033')" "$TMPD/gen.out" && cmp -s "$TMPD/g.png" "$TMPD/g2.png"; then
      ok "lumen generate --show to a file: no escape sequences, the same PNG"
    else bad "lumen generate --show to a file: no escape sequences, the same PNG" "$(cat -v "$TMPD/gen.out")"; fi
    # an unknown LUMEN_IMAGES is refused before any work
    session "$CLEAN LUMEN_IMAGES=pictures LUMEN_DEVICE=cpu $LUMEN generate 'a red fox' --model $SD --steps 2 --size 64x64 -o $TMPD/g3.png --show; echo status \$?"
    if wait_pane "session-end" && pane | grep -q "lumen generate: --show: LUMEN_IMAGES=pictures: expected" &&
       pane | grep -q "status 2" && [ ! -e "$TMPD/g3.png" ]; then
      ok "tmux: lumen generate --show with LUMEN_IMAGES=pictures: status 2 before the work"
    else bad "tmux: lumen generate --show with LUMEN_IMAGES=pictures: status 2 before the work" "$(pane)"; fi
  else skipped "lumen generate/upscale --show: no $SD (tests/ref/diffusion)"; fi
  T kill-server 2>/dev/null
fi

# ---- 2 and 3. real terminals under Xvfb ----
# shoot NAME CMD...: runs CMD (a terminal running the REPL through
# check.py relay, which types :show of the pattern, with $TMPD/NAME as its
# folder); waits for the REPL to have shown it, then screenshots until the
# pattern is found (at most 20 tries)
shoot() {
  name=$1; dir=$TMPD/$name; shift
  mkdir -p "$dir"
  # its own session and process group: kitty leaves a helper process
  # behind and may stay up after its child exits; the group is ended below
  setsid "$@" > "$dir/term.log" 2>&1 &
  tpid=$!
  if ! wait_file "$dir/shown"; then
    kill -- -$tpid 2>/dev/null
    echo "the terminal did not run the REPL: $(tail -3 "$dir/term.log")"
    return 2
  fi
  tries=0; found=1
  while [ $tries -lt 20 ]; do
    xwd -root -display ":$DISP" -silent > "$dir/shot.xwd" 2>/dev/null
    r=$($CHECK shot "$dir/shot.xwd" "$dir/shot.png") && { found=0; break; }
    sleep 0.5; tries=$((tries + 1))
  done
  touch "$dir/done"
  i=0
  while kill -0 $tpid 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  kill -- -$tpid 2>/dev/null
  wait $tpid 2>/dev/null
  echo "$r"
  return $found
}
if ! have Xvfb || ! have xwd; then
  skipped "xterm and kitty parts: Xvfb or xwd (x11-apps) is not installed"
else
  Xvfb -displayfd 3 -screen 0 1024x768x24 -nolisten tcp 3>"$TMPD/display" >"$TMPD/xvfb.log" 2>&1 &
  XPID=$!
  wait_file "$TMPD/display"
  DISP=$(cat "$TMPD/display")
  i=0
  until [ -z "$DISP" ] || xwd -root -display ":$DISP" -silent > "$TMPD/blank.xwd" 2>/dev/null || [ $i -gt 100 ]; do sleep 0.1; i=$((i + 1)); done
  if [ -z "$DISP" ] || [ ! -s "$TMPD/blank.xwd" ]; then
    skipped "xterm and kitty parts: Xvfb did not start here ($(tail -2 "$TMPD/xvfb.log" | tr '\n' ' '))"
  else
  if r=$($CHECK shot "$TMPD/blank.xwd"); then bad "X: the checker refuses a screen without the pattern" "$r"
  else ok "X: the checker refuses a screen without the pattern"; fi
  if ! have xterm; then skipped "xterm: not installed"
  else
    r=$(shoot xterm $CLEAN DISPLAY=":$DISP" xterm -ti vt340 -xrm 'XTerm*numColorRegisters: 256' \
          -geometry 100x40+0+0 -e python3 "$(pwd)/tests/show/check.py" relay "$LUMEN" "$TMPD/xterm"); rc=$?
    if [ $rc = 2 ]; then skipped "xterm could not start here: $r"
    else
      if grep -q "^sixel" "$TMPD/xterm/proto"; then ok "xterm -ti vt340: sixel from the device attributes ($(sed -n 2p "$TMPD/xterm/proto"))"
      else bad "xterm -ti vt340: sixel from the device attributes" "$(cat "$TMPD/xterm/proto")"; fi
      if [ $rc = 0 ]; then ok "xterm: the screenshot holds the pattern ($r)"
      else bad "xterm: the screenshot holds the pattern" "$r"; fi
    fi
  fi
  if ! have kitty; then skipped "kitty: not installed"
  else
    KITTY="kitty --config NONE -o linux_display_server=x11 -o remember_window_size=no -o initial_window_width=800 -o initial_window_height=600"
    r=$(shoot kitty $CLEAN DISPLAY=":$DISP" LIBGL_ALWAYS_SOFTWARE=1 $KITTY python3 "$(pwd)/tests/show/check.py" relay "$LUMEN" "$TMPD/kitty"); rc=$?
    if [ $rc = 2 ]; then skipped "kitty could not start here (it needs OpenGL 3.3): $r"
    else
      if grep -q "^kitty" "$TMPD/kitty/proto"; then ok "kitty: kitty graphics from the environment"
      else bad "kitty: kitty graphics from the environment" "$(cat "$TMPD/kitty/proto")"; fi
      if [ $rc = 0 ]; then ok "kitty: the screenshot holds the pattern ($r)"
      else bad "kitty: the screenshot holds the pattern" "$r"; fi
      # the environment hidden: kitty's answer to the graphics query
      r=$(shoot kittyq $CLEAN DISPLAY=":$DISP" LIBGL_ALWAYS_SOFTWARE=1 $KITTY \
            env -u KITTY_WINDOW_ID TERM=xterm-256color python3 "$(pwd)/tests/show/check.py" relay "$LUMEN" "$TMPD/kittyq"); rc=$?
      if grep -q "^kitty" "$TMPD/kittyq/proto" && grep -q "graphics query" "$TMPD/kittyq/proto"; then
        ok "kitty: kitty graphics from its answer to the graphics query"
      else bad "kitty: kitty graphics from its answer to the graphics query" "$(cat "$TMPD/kittyq/proto" 2>&1) $r"; fi
    fi
  fi
  fi
fi

# ---- 4. a terminal that never answers ----
if r=$($CHECK pty "$LUMEN"); then ok "$r"; else bad "a pty that never answers the query" "$r"; fi
if r=$($CHECK bg "$LUMEN"); then ok "$r"; else bad "a background job leaves the terminal alone" "$r"; fi

echo "$pass passed, $fail failed, $skip skipped"
[ $fail = 0 ]
