#!/usr/bin/env python3
"""tests/show/check.py - reads what a terminal shows of tests/show's test
pattern and says whether the pattern is there (exit 0) or not (exit 1,
with the reason).  No numpy: the standard library only.

  check.py pattern                  prints the pattern as the Lua side
                                    builds it (a self-check of the colours)
  check.py pane FILE COLS           FILE: `tmux capture-pane -e -p` of the
                                    half-block pattern drawn COLS cells wide
  check.py shot FILE.xwd [OUT.png]  FILE: an `xwd -root` screenshot; OUT: a
                                    PNG copy for a person to look at
  check.py same PANE WANT           the image in PANE (capture-pane -e) is the
                                    half blocks WANT holds (lm.show's string)
  check.py relay LUMEN DIR          inside a terminal: the REPL typing :show of
                                    the pattern (tests/show/run.sh's parts 2, 3)
  check.py bg LUMEN                 lm.show_protocol() in a background job
  check.py pty LUMEN                runs LUMEN's REPL on a pseudo-terminal
                                    that never answers the terminal queries

The pattern (tests/show/pattern.lua makes the same): 4x4 blocks, block
(bx, by) of colour (40 + 60 bx, 40 + 60 by, 220 if bx + by is odd else 30).
"""
import os
import re
import struct
import sys
import time
import zlib


def block_colour(bx, by):
    return (40 + 60 * bx, 40 + 60 * by, 220 if (bx + by) % 2 else 30)


# ---- tmux's pane: half blocks ----

def parse_pane(text):
    """Rows of cells (char, fg, bg) from capture-pane -e output: truecolor
    SGR only (38;2 / 48;2, 0 and 39/49 resets)."""
    rows = []
    for line in text.split('\n'):
        fg = bg = None
        rev = False
        cells = []
        i = 0
        while i < len(line):
            if line[i] == '\x1b':
                m = re.match(r'\x1b\[([0-9;]*)m', line[i:])
                if not m:
                    i += 1
                    continue
                ps = [int(x) if x else 0 for x in m.group(1).split(';')] if m.group(1) else [0]
                k = 0
                while k < len(ps):
                    p = ps[k]
                    if p == 0:
                        fg = bg = None
                        rev = False
                    elif p == 7:
                        rev = True
                    elif p == 27:
                        rev = False
                    elif p == 39:
                        fg = None
                    elif p == 49:
                        bg = None
                    elif p in (38, 48) and k + 4 < len(ps) and ps[k + 1] == 2:
                        c = tuple(ps[k + 2:k + 5])
                        if p == 38:
                            fg = c
                        else:
                            bg = c
                        k += 4
                    k += 1
                i += len(m.group(0))
                continue
            cells.append((line[i], bg, fg) if rev else (line[i], fg, bg))
            i += 1
        rows.append(cells)
    return rows


def cell_pixels(cell):
    """(top, bottom) colours of a half-block cell, None where unknown."""
    ch, fg, bg = cell
    if ch == '\u2580':
        return fg, bg
    if ch == '\u2584':
        return bg, fg
    if ch == '\u2588':
        return fg, fg
    if ch == ' ':
        return bg, bg
    return None, None


def check_pane(path, cols):
    """The pattern drawn cols cells wide (cols // 2 rows of two pixels) from
    the first column of the first coloured row.  The terminal image is
    scaled by libchafa, which blends across a block's edge: the pixels
    two or more from an edge are checked, within 3 of each channel."""
    text = open(path, encoding='utf-8', errors='replace').read()
    rows = parse_pane(text)
    start = next((y for y, r in enumerate(rows) if r and (r[0][1] or r[0][2])), None)
    if start is None:
        return 'no coloured cell at the start of a row'
    img = rows[start:start + cols // 2]
    if len(img) < cols // 2 or any(len(r) < cols for r in img):
        return 'the image has %d rows of %s cells, want %d rows of %d' % (
            len(img), sorted(set(len(r) for r in img)), cols // 2, cols)
    block = cols // 4
    checked = bad = 0
    first_bad = None
    for y, r in enumerate(img):
        for x in range(cols):
            top, bot = cell_pixels(r[x])
            for dy, got in ((0, top), (1, bot)):
                py = 2 * y + dy
                if min(x % block, block - 1 - x % block) < 2 or min(py % block, block - 1 - py % block) < 2:
                    continue
                want = block_colour(x // block, py // block)
                checked += 1
                if got is None or max(abs(a - b) for a, b in zip(got, want)) > 3:
                    bad += 1
                    if first_bad is None:
                        first_bad = 'pixel (%d, %d) is %s, want %s (cell %r)' % (x, py, got, want, r[x][0])
    if bad or not checked:
        return '%d of %d pixels inside the blocks differ; first: %s' % (bad, checked, first_bad)
    print('pane: %d pixels inside the 16 blocks of the pattern (%d rows x %d cells) match' % (
        checked, cols // 2, cols))
    return None


def image_cells(rows):
    """The rows of the first run of rows that start with a coloured cell,
    as (top, bottom) colours per cell."""
    start = next((y for y, r in enumerate(rows) if r and (r[0][1] or r[0][2])), None)
    if start is None:
        return []
    out = []
    for r in rows[start:]:
        if not r or not (r[0][1] or r[0][2]):
            break
        out.append([cell_pixels(c) for c in r if c[1] or c[2] or c[0] != ' '])
    return out


def check_same(pane_path, want_path):
    """The image in the pane is the one lm.show(..., {string = true}) gave."""
    got = image_cells(parse_pane(open(pane_path, encoding='utf-8', errors='replace').read()))
    want = image_cells(parse_pane(open(want_path, encoding='utf-8', errors='replace').read()))
    if not want:
        return 'no image in %s' % want_path
    if len(got) < len(want):
        return 'the pane has %d rows of the image, want %d' % (len(got), len(want))
    for y, (g, w) in enumerate(zip(got, want)):
        if g[:len(w)] != w:
            x = next((i for i in range(min(len(g), len(w))) if g[i] != w[i]), min(len(g), len(w)))
            return 'row %d differs at cell %d: %s, want %s' % (y, x, g[x] if x < len(g) else None, w[x] if x < len(w) else None)
    print('%d rows x %d cells as lm.show draws the file' % (len(want), len(want[0])))
    return None


# ---- X screenshots ----

def read_xwd(path):
    """(width, height, rows of bytes RGB) of a 24/32-bit TrueColor xwd."""
    data = open(path, 'rb').read()
    h = struct.unpack('>25I', data[:100])
    header_size, _ver, fmt, depth, width, height = h[0], h[1], h[2], h[3], h[4], h[5]
    byte_order, bpp, bpl = h[7], h[11], h[12]
    red_mask, green_mask, blue_mask = h[14], h[15], h[16]
    ncolors = h[19]
    # xwd writes 32 or (seen with kitty's window up) packed 24 bits a pixel
    if fmt != 2 or bpp not in (24, 32) or bpl < bpp // 8 * width:
        raise ValueError('xwd %s: format %d, %d bits per pixel, %d bytes a row (want ZPixmap, '
                         '24 or 32 bits)' % (path, fmt, bpp, bpl))
    off = header_size + ncolors * 12
    px = data[off:off + bpl * height]
    order = '<' if byte_order == 0 else '>'

    def shift(m):
        s = 0
        while m and not m & 1:
            m >>= 1
            s += 1
        return s
    rs, gs, bs = shift(red_mask), shift(green_mask), shift(blue_mask)
    out = []
    for y in range(height):
        if bpp == 24:
            b = px[y * bpl:y * bpl + 3 * width]
            lo = b if order == '<' else None
            if lo is None:
                vals = [int.from_bytes(b[3 * i:3 * i + 3], 'big') for i in range(width)]
            else:
                vals = [b[3 * i] | b[3 * i + 1] << 8 | b[3 * i + 2] << 16 for i in range(width)]
        else:
            vals = struct.unpack_from('%s%dI' % (order, width), px, y * bpl)
        row = bytearray(3 * width)
        row[0::3] = bytes(((v & red_mask) >> rs) & 255 for v in vals)
        row[1::3] = bytes(((v & green_mask) >> gs) & 255 for v in vals)
        row[2::3] = bytes(((v & blue_mask) >> bs) & 255 for v in vals)
        out.append(bytes(row))
    return width, height, out


def write_png(path, width, height, rows):
    raw = b''.join(b'\x00' + r for r in rows)

    def chunk(t, d):
        c = struct.pack('>I', len(d)) + t + d
        return c + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
    png = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0))
    png += chunk(b'IDAT', zlib.compress(raw, 6)) + chunk(b'IEND', b'')
    open(path, 'wb').write(png)


def check_shot(path, out_png=None):
    w, h, rows = read_xwd(path)
    if out_png:
        write_png(out_png, w, h, rows)
    # each screen pixel's block (0..15) when its colour is within 8 of that
    # block's in every channel, else 255
    tol = 8
    lut = {}
    for k in range(16):
        c = block_colour(k % 4, k // 4)
        for r in range(c[0] - tol, c[0] + tol + 1):
            for g in range(c[1] - tol, c[1] + tol + 1):
                for b in range(c[2] - tol, c[2] + tol + 1):
                    lut[bytes((r, g, b))] = k
    idx = bytearray(b'\xff' * (w * h))
    for y in range(h):
        r = rows[y]
        for x in range(w):
            k = lut.get(r[3 * x:3 * x + 3])
            if k is not None:
                idx[y * w + x] = k
    # only pixels whose four neighbours are of the same block count: the
    # anti-aliased edges of text (kitty draws grey on black) are not blocks
    boxes = {}
    for p in range(w, w * (h - 1)):
        k = idx[p]
        if k == 255 or idx[p - 1] != k or idx[p + 1] != k or idx[p - w] != k or idx[p + w] != k:
            continue
        x, y = p % w, p // w
        b = boxes.get(k)
        if b is None:
            boxes[k] = [x, y, x, y, 1]
        else:
            b[0], b[1], b[2], b[3], b[4] = min(b[0], x), min(b[1], y), max(b[2], x), max(b[3], y), b[4] + 1
    for k in range(16):
        if k not in boxes:
            return 'colour %s of block (%d, %d) is nowhere on the screen' % (block_colour(k % 4, k // 4), k % 4, k // 4)
    boxes = {(k % 4, k // 4): tuple(b) for k, b in boxes.items()}
    # a grid: the blocks of a column share their left and right edges,
    # those of a row their top and bottom, each column right of the one
    # before, each row below (a terminal may scale the image by a few
    # pixels to whole cells: the sides need not be equal)
    for (bx, by), (x0, y0, x1, y1, n) in sorted(boxes.items()):
        c0, r0 = boxes[(bx, 0)], boxes[(0, by)]
        if abs(x0 - c0[0]) > 2 or abs(x1 - c0[2]) > 2 or abs(y0 - r0[1]) > 2 or abs(y1 - r0[3]) > 2:
            return 'block (%d, %d) at %d,%d-%d,%d is out of the grid of column %d and row %d' % (
                bx, by, x0, y0, x1, y1, bx, by)
        if x1 - x0 < 3 or y1 - y0 < 3:
            return 'block (%d, %d) is %dx%d pixels' % (bx, by, x1 - x0 + 1, y1 - y0 + 1)
        if bx and x0 <= boxes[(bx - 1, by)][2]:
            return 'block (%d, %d) is not right of block (%d, %d)' % (bx, by, bx - 1, by)
        if by and y0 <= boxes[(bx, by - 1)][3]:
            return 'block (%d, %d) is not below block (%d, %d)' % (bx, by, bx, by - 1)
        if n < 0.8 * (x1 - x0 + 1) * (y1 - y0 + 1):
            return 'block (%d, %d) is %d of %d pixels of its colour' % (bx, by, n, (x1 - x0 + 1) * (y1 - y0 + 1))
    ox, oy = boxes[(0, 0)][0], boxes[(0, 0)][1]
    iw, ih = boxes[(3, 3)][2] - ox + 1, boxes[(3, 3)][3] - oy + 1
    if abs(iw - ih) > 0.15 * max(iw, ih):
        return 'the pattern is %dx%d pixels: not square' % (iw, ih)
    print('screen: the 16 blocks of the pattern in a grid at %d,%d, %dx%d pixels' % (ox, oy, iw, ih))
    return None


# ---- a terminal that never answers ----

def run_pty(lumen):
    """The REPL on a pty whose other side reads but never answers: :show
    must return (half blocks, the query's answer not waited for past its
    bound) and the next line run.  The harness's own bound is only against
    a hang of the whole test (60 s), not a timing threshold."""
    import pty
    import select
    env = dict(os.environ)
    for k in ('TMUX', 'STY', 'KITTY_WINDOW_ID', 'TERM_PROGRAM', 'LC_TERMINAL', 'LUMEN_IMAGES'):
        env.pop(k, None)
    env['TERM'] = 'xterm-256color'
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(lumen, [lumen], env)
    out = b''
    script = [b'p = dofile("tests/show/pattern.lua")(32, "HWC")\n',
              b'm1 = io.popen("stty -g"):read("a")\n',
              b'print(lm.show_protocol())\n',
              b'm2 = io.popen("stty -g"):read("a")\n',
              b'print(m1 == m2 and "modes" .. " kept" or "modes changed")\n',
              b':show p, {width = 16}\n',
              b'print("after" .. "show")\n',
              b':q\n']
    deadline = time.time() + 60
    sent = 0
    asked = answered = None
    while time.time() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        # one line at a time, each after the prompt
        if sent < len(script) and out.count(b'> ') > sent:
            os.write(fd, script[sent])
            if b'show_protocol' in script[sent]:
                asked = time.time()
            sent += 1
        if asked and not answered and b'no answer' in out:
            answered = time.time()
    try:
        os.kill(pid, 9)
    except OSError:
        pass
    os.waitpid(pid, 0)
    text = out.decode('utf-8', 'replace')
    problems = []
    if '\x1b[c' not in text:
        problems.append('the terminal was not asked (no DA1 query in the output)')
    if 'blocks\tno answer' not in text:
        problems.append('lm.show_protocol() did not say blocks for want of an answer')
    if '\u2580' not in text and '\u2584' not in text:
        problems.append(':show drew no half blocks')
    if 'modes kept' not in text:
        problems.append("the terminal's modes differ after the query")
    if 'aftershow' not in text:
        problems.append('the line after :show did not run')
    if problems:
        sys.stdout.write(text[-2000:].encode('ascii', 'backslashreplace').decode() + '\n')
        return '; '.join(problems)
    # for the log only, never a threshold
    print('pty: the query went unanswered (lm.show_protocol() answered in %.0f ms), :show drew '
          'half blocks and the REPL went on' % ((answered - asked) * 1000))
    return None


def run_background(lumen):
    """lm.show_protocol() in a process group that is not the terminal's
    foreground one (a shell's background job): it must not touch the
    terminal's modes (SIGTTOU would stop it) and says so."""
    import pty
    import select
    env = dict(os.environ)
    for k in ('TMUX', 'STY', 'KITTY_WINDOW_ID', 'TERM_PROGRAM', 'LC_TERMINAL', 'LUMEN_IMAGES'):
        env.pop(k, None)
    env['TERM'] = 'xterm-256color'
    pid, fd = pty.fork()
    if pid == 0:
        # the session leader stays in the foreground; its child leaves it
        child = os.fork()
        if child == 0:
            os.setpgid(0, 0)
            os.execve(lumen, [lumen, '-e', 'print("proto", lm.show_protocol())'], env)
        _, st = os.waitpid(child, os.WUNTRACED)
        os._exit(0 if os.WIFEXITED(st) else 3)
    out = b''
    deadline = time.time() + 60
    while time.time() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    _, st = os.waitpid(pid, 0)
    text = out.decode('utf-8', 'replace')
    if os.WEXITSTATUS(st) != 0:
        return 'the background job did not exit (stopped?): %r' % text
    if 'proto\tblocks\ta background job does not ask the terminal' not in text:
        return 'a background job: %r' % text
    print('background job: half blocks, the terminal not asked')
    return None


def run_relay(lumen, folder):
    """Run inside a real terminal (xterm, kitty): the REPL on a pty of its
    own whose bytes are relayed both ways, as `script` does, so the
    terminal draws what the REPL writes and answers its queries, while
    the lines typed are ours: the pattern, `:show p`, then the protocol
    into FOLDER/proto and FOLDER/shown; at FOLDER/done, :q."""
    import fcntl
    import pty
    import select
    import termios
    import tty
    pattern = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'pattern.lua')
    script = [('p = dofile(%r)(96, "CHW")\n' % pattern).encode(),
              b':show p\n',
              ('f = io.open(%r, "w"); f:write(table.concat({lm.show_protocol()}, "\\n"), "\\n"); f:close()\n'
               % os.path.join(folder, 'proto')).encode(),
              ('f = io.open(%r, "w"); f:write("1\\n"); f:close()\n' % os.path.join(folder, 'shown')).encode()]
    old = termios.tcgetattr(0)
    size = fcntl.ioctl(0, termios.TIOCGWINSZ, b'\0' * 8)
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(lumen, [lumen])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, size)
    tty.setraw(0)
    out = b''
    sent = 0
    quit_sent = False
    deadline = time.time() + 120
    try:
        while time.time() < deadline:
            r, _, _ = select.select([0, fd], [], [], 0.1)
            if fd in r:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
                os.write(1, chunk)
            if 0 in r:
                data = os.read(0, 4096)
                if data:
                    os.write(fd, data)
            if sent < len(script) and out.count(b'> ') > sent:
                os.write(fd, script[sent])
                sent += 1
            if not quit_sent and os.path.exists(os.path.join(folder, 'done')):
                os.write(fd, b':q\n')
                quit_sent = True
    finally:
        termios.tcsetattr(0, termios.TCSANOW, old)
        try:
            os.kill(pid, 9)
        except OSError:
            pass
        os.waitpid(pid, 0)
    return None


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ''
    if cmd == 'pane':
        err = check_pane(sys.argv[2], int(sys.argv[3]))
    elif cmd == 'same':
        err = check_same(sys.argv[2], sys.argv[3])
    elif cmd == 'shot':
        err = check_shot(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    elif cmd == 'relay':
        err = run_relay(sys.argv[2], sys.argv[3])
    elif cmd == 'bg':
        err = run_background(sys.argv[2])
    elif cmd == 'pty':
        err = run_pty(sys.argv[2])
    else:
        sys.stderr.write(__doc__)
        return 2
    if err:
        print(err)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
