/* spirv.c - finds the SPIR-V file (lumen-spirv.bin, written by
 * tools/spvpack.c) and maps it, once per process.
 *
 * The shaders live in one file rather than in every executable: embedded,
 * each test binary and build/lumen carried 30 MB of them.  A file read at
 * run time, unlike a shared library linked by the programs, cannot stop a
 * program from starting: when it is missing, Vulkan is not offered and the
 * CPU works as before (device.c), with a message naming where we looked.
 *
 * Where: $LUMEN_SPIRV if set (that file only); else, for the directory D of
 * the object holding this code (the program, or lumen.so under a stock
 * lua5.4) and of the running program, D/, D/../ (build/tests/ finds
 * build/) and D/../share/lumen/ (an installed bin/); last the install
 * prefix compiled in.  A file whose id is not this build's is skipped with
 * a reason: shader names and constants change between builds. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/error.h"
#include "backends/vulkan/shaders.h"
#include "backends/vulkan/vk.h"
#include "vk_spirv_id.h"       /* LM_VK_SPIRV_ID, generated with the file */
#include "vk_spirv_prefix.h"   /* LM_VK_SPIRV_INSTALL_DIR, from $(PREFIX) */

#define NAME_BYTES 32
#define HEADER_BYTES 24
#define ENTRY_BYTES (NAME_BYTES + 8)

static pthread_once_t once = PTHREAD_ONCE_INIT;
static lm_status load_status = LM_ERR_STATE;
static char load_error[1536];
static char found_path[PATH_MAX];
static lm_vk_shader shaders[LM_VK_MAX_SHADERS];
static char names[LM_VK_MAX_SHADERS][NAME_BYTES];
static int nshaders;

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Checks a mapped file as untrusted input and fills the table; on failure
 * writes why to `why` and leaves the table empty. */
static bool parse(const unsigned char *p, size_t size, char *why, size_t nwhy)
{
    if (size < HEADER_BYTES || memcmp(p, "LMSPIRV1", 8)) {
        snprintf(why, nwhy, "not a Lumen SPIR-V file");
        return false;
    }
    uint64_t id = rd32(p + 8) | (uint64_t)rd32(p + 12) << 32;
    if (id != LM_VK_SPIRV_ID) {
        snprintf(why, nwhy, "from another build (id %016llx, this build %016llx)",
                 (unsigned long long)id, (unsigned long long)LM_VK_SPIRV_ID);
        return false;
    }
    uint32_t n = rd32(p + 16);
    if (n == 0 || n > LM_VK_MAX_SHADERS || (size - HEADER_BYTES) / ENTRY_BYTES < n) {
        snprintf(why, nwhy, "damaged (%u modules)", (unsigned)n);
        return false;
    }
    for (uint32_t i = 0; i < n; i++) {
        const unsigned char *e = p + HEADER_BYTES + (size_t)i * ENTRY_BYTES;
        uint64_t off = rd32(e + NAME_BYTES), words = rd32(e + NAME_BYTES + 4);
        const uint32_t *code = (const uint32_t *)(const void *)(p + off * 4);
        if (!memchr(e, 0, NAME_BYTES) || !e[0] || words == 0 || (off + words) * 4 > size ||
            off * 4 < HEADER_BYTES + (uint64_t)n * ENTRY_BYTES || code[0] != 0x07230203u) {
            snprintf(why, nwhy, "damaged (module %u)", (unsigned)i);
            nshaders = 0;
            return false;
        }
        memcpy(names[i], e, NAME_BYTES);
        shaders[i] = (lm_vk_shader){names[i], code, (int)words, (int)i};
    }
    nshaders = (int)n;
    return true;
}

/* true when `path` was mapped and accepted; else appends why to load_error */
static bool try_file(const char *path)
{
    char why[160];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) snprintf(why, sizeof why, "not there");
        else snprintf(why, sizeof why, "%s", strerror(errno));
    } else {
        struct stat st;
        void *map = MAP_FAILED;
        if (fstat(fd, &st) == 0 && st.st_size > 0)
            map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (map == MAP_FAILED) {
            snprintf(why, sizeof why, "cannot be mapped");
        } else if (parse(map, (size_t)st.st_size, why, sizeof why)) {
            snprintf(found_path, sizeof found_path, "%s", path);
            return true;        /* stays mapped: the table points into it */
        } else {
            munmap(map, (size_t)st.st_size);
        }
    }
    size_t len = strlen(load_error);
    snprintf(load_error + len, sizeof load_error - len, "%s%s (%s)", len ? "; " : "", path, why);
    return false;
}

/* the directory part of `file` made absolute, or false */
static bool dir_of(const char *file, char *dir, size_t n)
{
    char real[PATH_MAX];
    if (!file || !strchr(file, '/') || !realpath(file, real)) return false;
    char *slash = strrchr(real, '/');
    *slash = 0;
    snprintf(dir, n, "%s", real[0] ? real : "/");
    return true;
}

static bool try_beside(const char *dir)
{
    static const char *const rel[] = {"", "/..", "/../share/lumen"};
    char path[PATH_MAX + 64];
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
        snprintf(path, sizeof path, "%s%s/" LM_VK_SPIRV_FILE, dir, rel[i]);
        if (try_file(path)) return true;
    }
    return false;
}

static void load_once(void)
{
    const char *env = getenv("LUMEN_SPIRV");
    bool ok = false;
    if (env && *env) {
        ok = try_file(env);
    } else {
        char self[PATH_MAX] = "", exe[PATH_MAX] = "";
        Dl_info info;
        if (dladdr((void *)load_once, &info)) dir_of(info.dli_fname, self, sizeof self);
        dir_of("/proc/self/exe", exe, sizeof exe);
        ok = (self[0] && try_beside(self)) || (exe[0] && strcmp(exe, self) && try_beside(exe)) ||
             try_file(LM_VK_SPIRV_INSTALL_DIR "/" LM_VK_SPIRV_FILE);
    }
    load_status = ok ? LM_OK : LM_ERR_IO;
}

lm_status lm_vk_spirv_load(void)
{
    pthread_once(&once, load_once);
    if (load_status == LM_OK) return LM_OK;
    return lm_error_set(load_status, "vulkan: no usable SPIR-V file " LM_VK_SPIRV_FILE
                        " (set LUMEN_SPIRV to its path): %s", load_error);
}

const char *lm_vk_spirv_path(void)
{
    return found_path;
}

const lm_vk_shader *lm_vk_shader_find(const char *name)
{
    if (lm_vk_spirv_load() != LM_OK) return NULL;
    for (int i = 0; i < nshaders; i++)
        if (!strcmp(shaders[i].name, name)) return &shaders[i];
    return NULL;
}
