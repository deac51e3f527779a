/* spvpack.c - build tool: packs the SPIR-V modules into the one file that
 * the programs read at run time (backends/vulkan/spirv.c), so that no
 * executable carries the shaders.
 * Usage: spvpack OUT.bin OUT_ID.h a.spv b.spv ...  A module's name is its
 * file name without directory and ".spv".  spvpack --bf16 IN.spv OUT.spv
 * rewrites one module's 16-bit float as bfloat16 (below).
 *
 * The file (little-endian, as the SPIR-V words of this host):
 *   "LMSPIRV1", u64 id, u32 count, u32 0,
 *   count entries of { char name[32] (NUL-terminated), u32 offset, u32 words }
 *     (offset in 32-bit words from the start of the file),
 *   then the modules' words.
 * The id (FNV-1a over names and words) also goes to OUT_ID.h, compiled into
 * the library: a program refuses a file from another build instead of
 * asking it for shaders it does not have. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_BYTES 32

typedef struct module {
    char name[NAME_BYTES];
    uint32_t *words;
    uint32_t n;
} module;

static int read_words(const char *path, module *m);

static int read_module(const char *path, module *m)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t len = strlen(base);
    if (len < 5 || strcmp(base + len - 4, ".spv") || len - 4 >= NAME_BYTES) {
        fprintf(stderr, "spvpack: %s: want NAME.spv with a name under %d characters\n", path, NAME_BYTES);
        return -1;
    }
    memset(m->name, 0, sizeof m->name);
    memcpy(m->name, base, len - 4);
    return read_words(path, m);
}

/* the file's words into m->words (m->n of them) */
static int read_words(const char *path, module *m)
{
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); return -1; }
    long bytes = -1;
    if (!fseek(f, 0, SEEK_END)) bytes = ftell(f);
    if (bytes <= 0 || bytes % 4 || fseek(f, 0, SEEK_SET)) {
        fprintf(stderr, "spvpack: %s: not a SPIR-V module (size %ld)\n", path, bytes);
        fclose(f);
        return -1;
    }
    m->n = (uint32_t)(bytes / 4);
    m->words = malloc((size_t)bytes);
    int ok = m->words && fread(m->words, 1, (size_t)bytes, f) == (size_t)bytes;
    fclose(f);
    if (!ok || m->words[0] != 0x07230203u) {
        fprintf(stderr, "spvpack: %s: not a SPIR-V module\n", path);
        return -1;
    }
    return 0;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

static void put32(FILE *f, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    fwrite(b, 1, 4, f);
}

/* written to a temporary name and renamed, so a reader never sees half */
static int finish(FILE *f, const char *tmp, const char *path)
{
    int bad = ferror(f);
    if (fclose(f) || bad || rename(tmp, path)) {
        perror(path);
        remove(tmp);
        return -1;
    }
    return 0;
}


/* ---- spvpack --bf16 IN.spv OUT.spv: the 16-bit float of IN made bfloat16
 *
 * glslang 15 has no bfloat16 type (GL_EXT_bfloat16 is 16.x), so a kernel
 * that wants bf16 cooperative matrices is compiled with float16_t and its
 * module rewritten here (module.mk's VK_BF16_VARIANTS): OpTypeFloat 16
 * gains the FP encoding BFloat16KHR (0), the module declares the
 * capabilities BFloat16TypeKHR (5116) and, where it has cooperative
 * matrices (CooperativeMatrixKHR, 6022), BFloat16CooperativeMatrixKHR
 * (5118), and the extension SPV_KHR_bfloat16, and no longer Float16 (9),
 * whose only type it was.  Constants of the type are re-encoded (refused
 * where bf16 cannot hold the f16 value exactly).  SPV_KHR_bfloat16 lets
 * the type appear only in constants, memory, function, conversion and
 * composite instructions, OpDot, OpCooperativeMatrixMulAddKHR and
 * OpCooperativeMatrixLengthKHR, OpSelect, OpPhi, OpReturnValue and
 * OpLifetimeStart/Stop (its Validation Rules), and the tensor-layout loads
 * and stores of SPV_NV_cooperative_matrix2 (memory instructions: the
 * nn_attn_cm2*_bf kernels; NVIDIA's driver takes them on bf16 matrices,
 * as GL_EXT_bfloat16 compilers emit them); any other instruction with
 * a result or an operand of a type that is or holds it (f16 arithmetic,
 * comparisons, extended instructions) fails the build, naming the
 * instruction, since the same bits would mean other numbers.  A value's
 * type is known where the instruction has a result type: an instruction
 * whose first operand is a type and second a new id. */
enum {
    OP_EXTINST = 12, OP_EXTENSION = 10, OP_CAPABILITY = 17, OP_TYPEFLOAT = 22, OP_TYPEVECTOR = 23,
    OP_TYPEMATRIX = 24, OP_TYPEARRAY = 28, OP_TYPERTARRAY = 29, OP_TYPESTRUCT = 30, OP_TYPEPOINTER = 32,
    OP_TYPEFUNCTION = 33, OP_CONSTANT = 43, OP_SPECCONSTANT = 50, OP_SPECCONSTANTOP = 52, OP_FUNCTION = 54,
    OP_SELECTIONMERGE = 247, OP_LOOPMERGE = 246, OP_BRANCH = 249, OP_BRANCHCOND = 250, OP_SWITCH = 251,
    OP_TYPECOOPMAT = 4456, CAP_FLOAT16 = 9, CAP_BF16_TYPE = 5116, CAP_BF16_COOPMAT = 5118, CAP_COOPMAT_KHR = 6022,
};

/* the opcodes SPV_KHR_bfloat16 allows on the type (by section of the
 * SPIR-V specification) */
static int bf16_allowed(uint32_t op)
{
    switch (op) {
    case 1:                                  /* OpUndef */
    case 41: case 42: case 43: case 44: case 45: case 46: /* constant creation */
    case 48: case 49: case 50: case 51: case 52: case 4461: case 4462:
    case 54: case 55: case 56: case 57:      /* function */
    case 59: case 60: case 61: case 62: case 63: case 64: /* memory */
    case 65: case 66: case 67: case 68: case 69: case 70: case 401: case 4457: case 4458:
    case 109: case 110: case 111: case 112: case 115: case 124: /* conversion */
    case 77: case 78: case 79: case 80: case 81: case 82: case 83: case 84: case 400: case 4463: /* composite */
    case 148:                                /* OpDot */
    case 4459: case 4460:                    /* OpCooperativeMatrixMulAddKHR, LengthKHR */
    case 169: case 245: case 254: case 256: case 257: /* OpSelect, OpPhi, OpReturnValue, OpLifetime* */
    case 5367: case 5368:                    /* OpCooperativeMatrixLoad/StoreTensorNV: memory */
        return 1;
    default:
        return 0;
    }
}

/* f16 bits to bf16 bits, or -1 where bf16 does not hold the value exactly */
static int32_t f16_to_bf16(uint32_t h)
{
    uint32_t s = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu, f;
    if (e == 31) f = s | 0x7f800000u | (m << 13);
    else if (e) f = s | ((e + 112u) << 23) | (m << 13);
    else if (!m) f = s;
    else {                                   /* subnormal: normalise */
        int sh = 0;
        while (!(m & 0x400u)) { m <<= 1; sh++; }
        f = s | ((uint32_t)(113 - sh) << 23) | ((m & 0x3ffu) << 13);
    }
    if (f & 0xffffu) return -1;
    return (int32_t)(f >> 16);
}

static int bf16_rewrite(const char *in, const char *out)
{
    module m;
    if (read_words(in, &m)) return 1;
    uint32_t *w = m.words, n = m.n, bound = n > 3 ? w[3] : 0;
    if (n < 5 || bound > (1u << 24)) {
        fprintf(stderr, "spvpack: %s: not a SPIR-V module\n", in);
        return 1;
    }
    /* bf[id]: a type that is or holds the 16-bit float; ty[id]: a value's type */
    unsigned char *bf = calloc(bound, 1), *istype = calloc(bound, 1);
    uint32_t *ty = calloc(bound, sizeof *ty);
    uint32_t *o = malloc(((size_t)n + 16) * 4);
    if (!bf || !istype || !ty || !o) { fprintf(stderr, "spvpack: out of memory\n"); return 1; }
    uint32_t half = 0, no = 5, last_cap = 0, bad = 0;
    int has_f16cap = 0, in_fn = 0;
    memcpy(o, w, 5 * 4);
    /* BFloat16CooperativeMatrixKHR where the module has cooperative matrices */
    int coop = 0;
    for (uint32_t i = 5; i < n && (w[i] >> 16); i += w[i] >> 16)
        coop |= (w[i] & 0xffffu) == OP_CAPABILITY && (w[i] >> 16) == 2 && w[i + 1] == CAP_COOPMAT_KHR;
    for (uint32_t i = 5; i < n;) {
        uint32_t len = w[i] >> 16, op = w[i] & 0xffffu;
        if (!len || i + len > n) {
            fprintf(stderr, "spvpack: %s: instruction at word %u runs past the end\n", in, i);
            return 1;
        }
        const uint32_t *x = w + i;
        if (op == OP_TYPEFLOAT && len == 3 && x[2] == 16) half = x[1];
        if (op == OP_TYPEFLOAT && len > 3 && x[2] == 16) {
            fprintf(stderr, "spvpack: %s: the 16-bit float already has an encoding\n", in);
            return 1;
        }
        if ((op >= 19 && op <= 39) || op == OP_TYPECOOPMAT) {   /* type declarations */
            if (x[1] < bound) istype[x[1]] = 1;
            int holds = half && x[1] == half;
            if (op == OP_TYPEVECTOR || op == OP_TYPEMATRIX || op == OP_TYPEARRAY || op == OP_TYPERTARRAY ||
                op == OP_TYPECOOPMAT)
                holds |= len > 2 && x[2] < bound && bf[x[2]];
            if (op == OP_TYPEPOINTER) holds |= len > 3 && x[3] < bound && bf[x[3]];
            if (op == OP_TYPESTRUCT || op == OP_TYPEFUNCTION)
                for (uint32_t k = 2; k < len; k++) holds |= x[k] < bound && bf[x[k]];
            if (x[1] < bound) bf[x[1]] = (unsigned char)holds;
        } else if (len >= 3 && x[1] < bound && istype[x[1]] && x[2] < bound && !istype[x[2]] && !ty[x[2]]) {
            ty[x[2]] = x[1];
        }
        /* is an instruction with a bf16 result or operand allowed? */
        /* the functions' instructions (and spec-constant operations) but
         * their control flow, whose literals are no values */
        if (op == OP_FUNCTION) in_fn = 1;
        int body = (in_fn || op == OP_SPECCONSTANTOP) && op != OP_SELECTIONMERGE && op != OP_LOOPMERGE &&
                   op != OP_BRANCH && op != OP_BRANCHCOND && op != OP_SWITCH && op != 8 && op != 317;
        if (body && half && !bf16_allowed(op)) {
            int hit = 0;
            uint32_t first = 1;
            if (len >= 3 && x[1] < bound && istype[x[1]] && ty[x[2]] == x[1]) {
                hit |= bf[x[1]];
                first = 3;
            }
            for (uint32_t k = first; k < len; k++) {
                if (op == OP_EXTINST && (k == 3 || k == 4)) continue;   /* the set and its instruction */
                if (op == OP_SPECCONSTANTOP && k == 3) continue;        /* the opcode */
                hit |= x[k] < bound && ty[x[k]] && bf[ty[x[k]]];
            }
            if (hit) {
                fprintf(stderr, "spvpack: %s: opcode %u (word %u) computes on the 16-bit float, which "
                                "SPV_KHR_bfloat16 allows only in loads, stores, conversions, composites "
                                "and cooperative-matrix multiplies\n", in, op, i);
                bad++;
            }
        }
        /* the rewrite */
        if (op == OP_CAPABILITY && len == 2 && x[1] == CAP_FLOAT16) {
            has_f16cap = 1;
            i += len;
            continue;
        }
        if (op == OP_TYPEFLOAT && half && x[1] == half) {
            o[no++] = (4u << 16) | OP_TYPEFLOAT;
            o[no++] = x[1];
            o[no++] = 16;
            o[no++] = 0;                       /* BFloat16KHR */
            i += len;
            continue;
        }
        memcpy(o + no, x, len * 4);
        if ((op == OP_CONSTANT || op == OP_SPECCONSTANT) && half && x[1] == half && len == 4) {
            int32_t b = f16_to_bf16(x[3] & 0xffffu);
            if (b < 0) {
                fprintf(stderr, "spvpack: %s: constant %%%u (f16 bits 0x%04x) is not a bfloat16 value\n", in,
                        x[2], x[3] & 0xffffu);
                bad++;
            }
            o[no + 3] = (uint32_t)b & 0xffffu;
        }
        no += len;
        if (op == OP_CAPABILITY) last_cap = no;
        i += len;
        if (op == OP_CAPABILITY && (i >= n || (w[i] & 0xffffu) != OP_CAPABILITY)) {
            /* after the last capability: ours, then the extension */
            static const char ext[] = "SPV_KHR_bfloat16";   /* 16 characters: 5 words with the NUL */
            o[no++] = (2u << 16) | OP_CAPABILITY;
            o[no++] = CAP_BF16_TYPE;
            if (coop) {
                o[no++] = (2u << 16) | OP_CAPABILITY;
                o[no++] = CAP_BF16_COOPMAT;
            }
            o[no++] = (6u << 16) | OP_EXTENSION;
            memset(o + no, 0, 5 * 4);
            memcpy(o + no, ext, sizeof ext - 1);
            no += 5;
        }
    }
    if (!half) {
        fprintf(stderr, "spvpack: %s: asked for bfloat16 but the module has no 16-bit float\n", in);
        bad++;
    }
    if (!last_cap) {
        fprintf(stderr, "spvpack: %s: no capabilities\n", in);
        bad++;
    }
    (void)has_f16cap;
    if (bad) {
        fprintf(stderr, "spvpack: %s: %u problem(s): not rewritten for bfloat16\n", in, bad);
        return 1;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    FILE *f = fopen(tmp, "wb");
    if (!f) { perror(tmp); return 1; }
    for (uint32_t k = 0; k < no; k++) put32(f, o[k]);
    if (finish(f, tmp, out)) return 1;
    free(o); free(ty); free(bf); free(istype); free(m.words);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--bf16")) return bf16_rewrite(argv[2], argv[3]);
    if (argc < 4) { fprintf(stderr, "usage: spvpack OUT.bin OUT_ID.h FILE.spv...\n"); return 2; }
    uint32_t n = (uint32_t)(argc - 3);
    module *m = calloc(n, sizeof *m);
    if (!m) return 1;
    uint64_t id = 14695981039346656037ull;
    for (uint32_t i = 0; i < n; i++) {
        if (read_module(argv[i + 3], &m[i])) return 1;
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(m[j].name, m[i].name)) {
                fprintf(stderr, "spvpack: two modules named %s\n", m[i].name);
                return 1;
            }
        id = fnv(id, m[i].name, sizeof m[i].name);
        id = fnv(id, m[i].words, (size_t)m[i].n * 4);
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
    FILE *f = fopen(tmp, "wb");
    if (!f) { perror(tmp); return 1; }
    fwrite("LMSPIRV1", 1, 8, f);
    put32(f, (uint32_t)id);
    put32(f, (uint32_t)(id >> 32));
    put32(f, n);
    put32(f, 0);
    uint32_t off = (24 + n * (NAME_BYTES + 8)) / 4;
    for (uint32_t i = 0; i < n; i++) {
        fwrite(m[i].name, 1, NAME_BYTES, f);
        put32(f, off);
        put32(f, m[i].n);
        off += m[i].n;
    }
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t w = 0; w < m[i].n; w++) put32(f, m[i].words[w]);
    if (finish(f, tmp, argv[1])) return 1;

    snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
    if (!(f = fopen(tmp, "w"))) { perror(tmp); return 1; }
    fprintf(f, "/* generated by backends/vulkan/tools/spvpack.c - do not edit */\n"
               "#define LM_VK_SPIRV_ID 0x%016llxull\n",
            (unsigned long long)id);
    if (finish(f, tmp, argv[2])) return 1;
    for (uint32_t i = 0; i < n; i++) free(m[i].words);
    free(m);
    return 0;
}
