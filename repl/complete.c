/* complete.c - Tab completion: globals, table fields and tensor methods
 * (a.b.c<TAB>, t:su<TAB>), and file names inside string literals.
 *
 * Completion never evaluates anything: it walks tables with raw access
 * only, so no __index function and no tensor evaluation can run. */
#include <stdlib.h>
#include <string.h>
#include <readline/readline.h>
#include "lua/lumen_lua.h"
#include "complete.h"

static lua_State *CL;

#define LUA_BREAKS " \t\n\"'`@$><=;|&{(,+-*/%^~#[]}"
#define STRING_BREAKS "\"'"

/* The quote character if position pos of line is inside a string literal. */
static char in_string(const char *line, int pos)
{
    char q = 0;
    for (int i = 0; i < pos && line[i]; i++) {
        char c = line[i];
        if (q) {
            if (c == '\\') i++;
            else if (c == q) q = 0;
        } else if (c == '"' || c == '\'') {
            q = c;
        } else if (c == '-' && line[i + 1] == '-') {
            return 0;                      /* a comment */
        }
    }
    return q;
}

static char *word_breaks(void)
{
    return in_string(rl_line_buffer, rl_point) ? STRING_BREAKS : LUA_BREAKS;
}

static const char *const keywords[] = {
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if",
    "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while", NULL,
};

/* Candidate list being built. */
typedef struct cands {
    char **v;
    size_t n, cap;
} cands;

static void add(cands *c, const char *prefix, const char *name)
{
    if (c->n + 2 > c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 32;
        char **v = realloc(c->v, cap * sizeof *v);
        if (!v) return;
        c->v = v;
        c->cap = cap;
    }
    size_t len = strlen(prefix) + strlen(name) + 1;
    char *s = malloc(len);
    if (!s) return;
    snprintf(s, len, "%s%s", prefix, name);
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->v[i], s)) { free(s); return; }
    c->v[c->n++] = s;
}

static bool is_ident(const char *s)
{
    if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z'))) return false;
    for (s++; *s; s++)
        if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9')))
            return false;
    return true;
}

/* String keys of the table on top starting with part (functions only when
 * methods_only); follows a metatable's __index when it is a table. */
static void add_keys(cands *c, const char *prefix, const char *part, bool methods_only, int depth)
{
    size_t pl = strlen(part);
    lua_pushnil(CL);
    while (lua_next(CL, -2)) {
        if (lua_type(CL, -2) == LUA_TSTRING) {
            const char *k = lua_tostring(CL, -2);
            if (!strncmp(k, part, pl) && is_ident(k) && (!methods_only || lua_isfunction(CL, -1)))
                add(c, prefix, k);
        }
        lua_pop(CL, 1);
    }
    if (depth < 3 && lua_getmetatable(CL, -1)) {
        lua_pushliteral(CL, "__index");
        if (lua_rawget(CL, -2) == LUA_TTABLE) add_keys(c, prefix, part, methods_only, depth + 1);
        lua_pop(CL, 2);
    }
}

static void add_tensor_members(cands *c, const char *prefix, const char *part, bool methods_only)
{
    static const char *const props[] = {"shape", "dtype", "ndim", "size", "device", "nbytes",
                                        "evaluated", "kept", "freed", "T", NULL};
    lua_getfield(CL, LUA_REGISTRYINDEX, "lumen.methods");   /* lua/l_tensor.c */
    if (lua_istable(CL, -1)) add_keys(c, prefix, part, false, 3);
    lua_pop(CL, 1);
    if (methods_only) return;
    for (int i = 0; props[i]; i++)
        if (!strncmp(props[i], part, strlen(part))) add(c, prefix, props[i]);
}

/* Completes a.b.c:part from the globals, raw access only. */
static void complete_lua(cands *c, const char *text)
{
    const char *sep = strrchr(text, '.'), *colon = strrchr(text, ':');
    if (colon && (!sep || colon > sep)) sep = colon;
    int top = lua_gettop(CL);
    lua_pushglobaltable(CL);
    if (!sep) {
        add_keys(c, "", text, false, 0);
        for (int i = 0; keywords[i]; i++)
            if (!strncmp(keywords[i], text, strlen(text))) add(c, "", keywords[i]);
        lua_settop(CL, top);
        return;
    }
    /* walk the path before the last separator */
    const char *p = text;
    while (p < sep) {
        const char *e = p;
        while (e < sep && *e != '.' && *e != ':') e++;
        if (!lua_istable(CL, -1)) { lua_settop(CL, top); return; }
        lua_pushlstring(CL, p, (size_t)(e - p));
        lua_rawget(CL, -2);
        lua_remove(CL, -2);
        p = e + 1;
    }
    size_t plen = (size_t)(sep - text) + 1;
    char *prefix = malloc(plen + 1);
    if (prefix) {
        memcpy(prefix, text, plen);
        prefix[plen] = 0;
        bool methods = *sep == ':';
        if (lua_istable(CL, -1)) add_keys(c, prefix, sep + 1, methods, 0);
        else if (luaL_testudata(CL, -1, LM_LUA_TENSOR)) add_tensor_members(c, prefix, sep + 1, methods);
        free(prefix);
    }
    lua_settop(CL, top);
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* readline's format: v[0] = the common prefix, then the matches, NULL */
static char **to_matches(cands *c, const char *text)
{
    if (c->n == 0) { free(c->v); return NULL; }
    qsort(c->v, c->n, sizeof *c->v, cmp);
    char **m = malloc((c->n + 2) * sizeof *m);
    if (!m) return NULL;
    size_t common = strlen(c->v[0]);
    for (size_t i = 1; i < c->n; i++) {
        size_t k = 0;
        while (k < common && c->v[i][k] == c->v[0][k]) k++;
        common = k;
    }
    if (common < strlen(text)) common = strlen(text);
    m[0] = strndup(c->v[0], common);
    memcpy(m + 1, c->v, c->n * sizeof *m);
    m[c->n + 1] = NULL;
    free(c->v);
    return m;
}

static char **complete(const char *text, int start, int end)
{
    (void)end;
    char q = in_string(rl_line_buffer, start);
    if (q) {
        rl_completion_append_character = q;
        rl_attempted_completion_over = 0;
        return rl_completion_matches(text, rl_filename_completion_function);
    }
    rl_attempted_completion_over = 1;      /* never fall back to file names */
    rl_completion_append_character = '\0';
    cands c = {0};
    complete_lua(&c, text);
    return to_matches(&c, text);
}

void lm_repl_complete_init(lua_State *L)
{
    CL = L;
    rl_attempted_completion_function = complete;
    rl_completion_word_break_hook = word_breaks;
    rl_basic_word_break_characters = LUA_BREAKS;
    rl_completer_quote_characters = NULL;
}
