/* kdb._speedups: kdb.triton.normalize.normalise_stage in C (issue #31).

   normalise_stage(text, kind) -> str | None

   Byte-for-byte the output of the pure-Python reference (kdb.triton.normalize.normalise_stage_pure) for
   every kind it handles: ttir/ttgir/source (_normalise_mlir), llir (_normalise_llir), amdgcn and ptx
   (_normalise_asm); any other kind returns the text itself, as the reference does.

   The C code is exact for text made of ASCII characters other than \r \v \f and \x1c-\x1f: in such text
   str.splitlines() splits on \n only, str.strip() and the regular expressions' \s strip/match only space,
   tab (and \n), and \w \d \b str.isdigit() str.isalnum() are their ASCII selves. Any other text (non-ASCII,
   CRLF, form feeds, ...) returns None, and the caller runs the pure-Python function on it.

   Each regular expression of the reference is a pass over a buffer below; the comment above each pass
   names the expression it replaces and why the scan is the same (leftmost, non-overlapping, greedy). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* -- growable byte buffer ------------------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t n, cap;
} Buf;

static int buf_init(Buf *b, size_t cap) {
    b->n = 0;
    b->cap = cap < 64 ? 64 : cap;
    b->p = (char *)PyMem_Malloc(b->cap);
    if (!b->p) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void buf_free(Buf *b) {
    PyMem_Free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

static int buf_reserve(Buf *b, size_t extra) {
    if (b->n + extra <= b->cap)
        return 0;
    size_t cap = b->cap * 2;
    while (cap < b->n + extra)
        cap *= 2;
    char *p = (char *)PyMem_Realloc(b->p, cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const char *s, size_t n) {
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

static int buf_putc(Buf *b, char c) {
    if (buf_reserve(b, 1) < 0)
        return -1;
    b->p[b->n++] = c;
    return 0;
}

/* prefix followed by the decimal digits of v (f"{prefix}{v}") */
static int buf_put_name(Buf *b, const char *prefix, size_t plen, size_t v) {
    char digits[24];
    int k = 0;
    do {
        digits[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (buf_reserve(b, plen + (size_t)k) < 0)
        return -1;
    memcpy(b->p + b->n, prefix, plen);
    b->n += plen;
    while (k)
        b->p[b->n++] = digits[--k];
    return 0;
}

/* -- name -> order of first appearance (the `dict.fromkeys(names)` of _renamer) -------------------- */

typedef struct {
    const char *k;
    size_t n;
    size_t v;
} Entry;

typedef struct {
    Entry *e;
    size_t cap, len;
} Table;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

static int table_init(Table *t) {
    t->cap = 256;
    t->len = 0;
    t->e = (Entry *)PyMem_Calloc(t->cap, sizeof(Entry));
    if (!t->e) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void table_free(Table *t) {
    PyMem_Free(t->e);
    t->e = NULL;
}

/* index of the name (a new name gets the next index); (size_t)-1 when out of memory. The key is not
   copied: it must live as long as the table (it points into the pass's input buffer). */
static size_t table_index(Table *t, const char *k, size_t n) {
    if ((t->len + 1) * 2 > t->cap) {
        size_t cap = t->cap * 2;
        Entry *e = (Entry *)PyMem_Calloc(cap, sizeof(Entry));
        if (!e) {
            PyErr_NoMemory();
            return (size_t)-1;
        }
        for (size_t i = 0; i < t->cap; i++) {
            if (t->e[i].k) {
                size_t j = hash_bytes(t->e[i].k, t->e[i].n) & (cap - 1);
                while (e[j].k)
                    j = (j + 1) & (cap - 1);
                e[j] = t->e[i];
            }
        }
        PyMem_Free(t->e);
        t->e = e;
        t->cap = cap;
    }
    size_t j = hash_bytes(k, n) & (t->cap - 1);
    while (t->e[j].k) {
        if (t->e[j].n == n && memcmp(t->e[j].k, k, n) == 0)
            return t->e[j].v;
        j = (j + 1) & (t->cap - 1);
    }
    t->e[j].k = k;
    t->e[j].n = n;
    t->e[j].v = t->len++;
    return t->e[j].v;
}

/* -- characters (of text that passed `exact_in_c`) ----------------------------------------------- */

static inline int is_blank(unsigned char c) { return c == ' ' || c == '\t'; } /* \s and str.strip() less \n */
static inline int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static inline int is_alnum(unsigned char c) {
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
static inline int is_word(unsigned char c) { return is_alnum(c) || c == '_'; }                 /* \w */
static inline int is_name(unsigned char c) { return is_word(c) || c == '$' || c == '.' || c == '-'; } /* [\w$.-] */
static inline int is_label(unsigned char c) { return is_word(c) || c == '$' || c == '.'; }      /* [\w$.] */

static int starts(const char *s, size_t n, const char *lit) {
    size_t m = strlen(lit);
    return n >= m && memcmp(s, lit, m) == 0;
}

static const char *find(const char *h, size_t n, const char *needle, size_t m) {
    if (m == 0)
        return h;
    const char *end = h + n;
    while ((size_t)(end - h) >= m) {
        const char *c = (const char *)memchr(h, needle[0], (size_t)(end - h) - m + 1);
        if (!c)
            return NULL;
        if (memcmp(c, needle, m) == 0)
            return c;
        h = c + 1;
    }
    return NULL;
}

static int contains(const char *s, size_t n, const char *lit) { return find(s, n, lit, strlen(lit)) != NULL; }

/* ASCII without \r \v \f \x1c-\x1f: where the C passes are exact (see the top of the file) */
static int exact_in_c(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c < 0x20 && (c == '\r' || c == '\v' || c == '\f' || c >= 0x1c))
            return 0;
        if (c >= 0x80)
            return 0;
    }
    return 1;
}

/* One line of text: [a, b) with the \n after it (or the end) at b; *pos moves past it. 0 at the end. */
static int next_line(const char *s, size_t n, size_t *pos, const char **a, const char **b) {
    if (*pos >= n)
        return 0;
    const char *ls = s + *pos;
    const char *nl = (const char *)memchr(ls, '\n', n - *pos);
    const char *le = nl ? nl : s + n;
    *a = ls;
    *b = le;
    *pos = (size_t)(le - s) + 1;
    return 1;
}

static void strip(const char **a, const char **b) {
    while (*a < *b && is_blank((unsigned char)**a))
        (*a)++;
    while (*b > *a && is_blank((unsigned char)(*b)[-1]))
        (*b)--;
}

/* "\n".join(kept): the separator before every kept line but the first */
static int put_line(Buf *out, const char *a, size_t n) {
    if (out->n && buf_putc(out, '\n') < 0)
        return -1;
    return buf_put(out, a, n);
}

/* The first kept line may be empty only if nothing is kept, so out->n == 0 means "no line yet". Every
   filter below keeps non-empty lines only (or lines starting with a label name), so this holds. */

/* -- _QUOTED_PATH.sub('"<path>"', text) ------------------------------------------------------------
   "(?:[^"\\\n]|\\.)* / (?:[^"\\\n]|\\.)*" (without the spaces around the `/`): from a `"`, the tokens (a character other than " \ \n, or \
   and any character but \n) are read one way only; the match is the run of tokens up to a closing `"`
   when one of them is a bare `/`. No match there: the search goes on at the next character. */
static int quoted_paths(const char *s, size_t n, Buf *out) {
    size_t from = 0, pos = 0;
    while (pos < n) {
        const char *q = (const char *)memchr(s + pos, '"', n - pos);
        if (!q)
            break;
        size_t p = (size_t)(q - s), k = p + 1;
        int slash = 0;
        while (k < n) {
            char c = s[k];
            if (c == '"' || c == '\n')
                break;
            if (c == '\\') {
                if (k + 1 < n && s[k + 1] != '\n') {
                    k += 2;
                    continue;
                }
                break;
            }
            if (c == '/')
                slash = 1;
            k++;
        }
        if (slash && k < n && s[k] == '"') {
            if (buf_put(out, s + from, p - from) < 0 || buf_put(out, "\"<path>\"", 8) < 0)
                return -1;
            from = pos = k + 1;
        } else {
            pos = p + 1;
        }
    }
    return buf_put(out, s + from, n - from);
}

/* -- MLIR ---------------------------------------------------------------------------------------- */

/* matching_paren(line, open_at) of kdb.triton.mlir_text: the `)` closing the `(` at open_at outside
   quoted strings; -1 when unbalanced */
static long matching_paren(const char *s, size_t n, size_t open_at) {
    long depth = 0;
    int in_str = 0;
    size_t i = open_at;
    while (i < n) {
        char c = s[i];
        if (in_str) {
            if (c == '\\') {
                i += 2;
                continue;
            }
            if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '(') {
            depth++;
        } else if (c == ')') {
            depth--;
            if (depth == 0)
                return (long)i;
        }
        i++;
    }
    return -1;
}

/* _strip_complex_locs(line) */
static int strip_complex_locs(const char *s, size_t n, Buf *out) {
    size_t i = 0;
    for (;;) {
        const char *f = i <= n ? find(s + i, n - i, "loc(", 4) : NULL;
        if (!f)
            return i < n ? buf_put(out, s + i, n - i) : 0;
        size_t j = (size_t)(f - s);
        if (j > 0 && (is_word((unsigned char)s[j - 1]) || s[j - 1] == '.')) {
            if (buf_put(out, s + i, j + 4 - i) < 0)
                return -1;
            i = j + 4;
            continue;
        }
        if (buf_put(out, s + i, j - i) < 0)
            return -1;
        long close = matching_paren(s, n, j + 3);
        i = (close < 0 ? n : (size_t)close) + 1;
    }
}

/* _strip_locs(text) */
static int strip_locs(const char *s, size_t n, Buf *out) {
    Buf a, b;
    if (buf_init(&a, n) < 0)
        return -1;
    /* _SIMPLE_LOC.sub("", text): (?<![\w.])loc\(#[\w.$-]*\) ; the look-behind reads the original text */
    size_t from = 0, pos = 0;
    while (pos < n) {
        const char *f = find(s + pos, n - pos, "loc(#", 5);
        if (!f)
            break;
        size_t j = (size_t)(f - s), k = j + 5;
        if (j > 0 && (is_word((unsigned char)s[j - 1]) || s[j - 1] == '.')) {
            pos = j + 1;
            continue;
        }
        while (k < n && is_name((unsigned char)s[k]))
            k++;
        if (k < n && s[k] == ')') {
            if (buf_put(&a, s + from, j - from) < 0)
                goto fail_a;
            from = pos = k + 1;
        } else {
            pos = j + 1;
        }
    }
    if (buf_put(&a, s + from, n - from) < 0)
        goto fail_a;
    /* the balanced scanner on every line that still has `loc(` */
    const char *t = a.p;
    size_t tn = a.n;
    if (find(a.p, a.n, "loc(", 4)) {
        if (buf_init(&b, a.n) < 0)
            goto fail_a;
        size_t lp = 0;
        const char *la, *lb;
        int first = 1;
        /* text.split("\n"): every segment, the empty last one too */
        for (;;) {
            const char *nl = lp <= a.n ? (const char *)memchr(a.p + lp, '\n', a.n - lp) : NULL;
            la = a.p + lp;
            lb = nl ? nl : a.p + a.n;
            if (!first && buf_putc(&b, '\n') < 0)
                goto fail_b;
            first = 0;
            size_t ln = (size_t)(lb - la);
            if (find(la, ln, "loc(", 4) ? strip_complex_locs(la, ln, &b) < 0 : buf_put(&b, la, ln) < 0)
                goto fail_b;
            if (!nl)
                break;
            lp = (size_t)(nl - a.p) + 1;
        }
        buf_free(&a);
        a = b;
        t = a.p;
        tn = a.n;
    }
    /* _LOC_GAP.sub("", text): [^\S\n]+(?=[,)]|$) with re.MULTILINE: a maximal run of blanks before `,` `)`
       a \n or the end (a shorter run is followed by a blank, which the look-ahead refuses) */
    from = 0;
    size_t i = 0;
    while (i < tn) {
        if (!is_blank((unsigned char)t[i])) {
            i++;
            continue;
        }
        size_t k = i;
        while (k < tn && is_blank((unsigned char)t[k]))
            k++;
        if (k == tn || t[k] == ',' || t[k] == ')' || t[k] == '\n') {
            if (buf_put(out, t + from, i - from) < 0)
                goto fail_a;
            from = k;
        }
        i = k;
    }
    if (buf_put(out, t + from, tn - from) < 0)
        goto fail_a;
    buf_free(&a);
    return 0;
fail_b:
    buf_free(&b);
fail_a:
    buf_free(&a);
    return -1;
}

/* _MLIR_BLOCKS(_MLIR_SSA(body)) in one pass: %[\w$.-]+(?:#\d+)? -> %vN and \^[\w$.-]+ -> ^bbN. Neither
   class holds `%` or `^`, so no match of one crosses a match of the other and one scan finds both. */
static int rename_mlir(const char *s, size_t n, Buf *out) {
    Table ssa, blocks;
    if (table_init(&ssa) < 0)
        return -1;
    if (table_init(&blocks) < 0) {
        table_free(&ssa);
        return -1;
    }
    int rc = -1;
    size_t from = 0, i = 0;
    while (i < n) {
        char c = s[i];
        if (c != '%' && c != '^') {
            i++;
            continue;
        }
        size_t k = i + 1;
        while (k < n && is_name((unsigned char)s[k]))
            k++;
        if (k == i + 1) {
            i++;
            continue;
        }
        if (c == '%' && k + 1 < n && s[k] == '#' && is_digit((unsigned char)s[k + 1])) {
            k += 2;
            while (k < n && is_digit((unsigned char)s[k]))
                k++;
        }
        size_t v = table_index(c == '%' ? &ssa : &blocks, s + i, k - i);
        if (v == (size_t)-1 || buf_put(out, s + from, i - from) < 0)
            goto done;
        if ((c == '%' ? buf_put_name(out, "%v", 2, v) : buf_put_name(out, "^bb", 3, v)) < 0)
            goto done;
        from = i = k;
    }
    rc = buf_put(out, s + from, n - from);
done:
    table_free(&ssa);
    table_free(&blocks);
    return rc;
}

static int normalise_mlir(const char *s, size_t n, Buf *out) {
    Buf kept, locs, paths;
    if (buf_init(&kept, n) < 0)
        return -1;
    size_t pos = 0;
    const char *a, *b;
    while (next_line(s, n, &pos, &a, &b)) {
        strip(&a, &b);
        size_t ln = (size_t)(b - a);
        if (!ln || starts(a, ln, "#loc") || starts(a, ln, "//"))
            continue;
        if (put_line(&kept, a, ln) < 0)
            goto fail_kept;
    }
    if (buf_init(&locs, kept.n) < 0)
        goto fail_kept;
    if (strip_locs(kept.p, kept.n, &locs) < 0)
        goto fail_locs;
    buf_free(&kept);
    if (buf_init(&paths, locs.n) < 0)
        goto fail_locs;
    if (quoted_paths(locs.p, locs.n, &paths) < 0) {
        buf_free(&paths);
        goto fail_locs;
    }
    buf_free(&locs);
    int rc = rename_mlir(paths.p, paths.n, out);
    buf_free(&paths);
    return rc;
fail_locs:
    buf_free(&locs);
    return -1;
fail_kept:
    buf_free(&kept);
    return -1;
}

/* -- LLVM IR ------------------------------------------------------------------------------------- */

/* the line filter and `N:` block labels -> LN of _normalise_llir */
static int filter_llir(const char *s, size_t n, Buf *out) {
    Table labels;
    if (table_init(&labels) < 0)
        return -1;
    size_t pos = 0;
    const char *a, *b;
    int rc = -1;
    while (next_line(s, n, &pos, &a, &b)) {
        const char *la = a;
        while (la < b && is_blank((unsigned char)*la))
            la++;
        if (!(la < b && *la == '"')) { /* line.split(";", 1)[0] unless the line starts with a quoted name */
            const char *sc = (const char *)memchr(a, ';', (size_t)(b - a));
            if (sc)
                b = sc;
        }
        strip(&a, &b);
        size_t ln = (size_t)(b - a);
        if (!ln || *a == '!' || starts(a, ln, "source_filename") || starts(a, ln, "#dbg_") ||
            contains(a, ln, "llvm.dbg."))
            continue;
        if (out->n && buf_putc(out, '\n') < 0)
            goto done;
        const char *d = a;
        while (d < b && is_digit((unsigned char)*d))
            d++;
        if (d > a && d < b && *d == ':') { /* \d+(?=:) */
            size_t v = table_index(&labels, a, (size_t)(d - a));
            if (v == (size_t)-1 || buf_put_name(out, "L", 1, v) < 0)
                goto done;
            a = d;
        }
        if (buf_put(out, a, (size_t)(b - a)) < 0)
            goto done;
    }
    rc = 0;
done:
    table_free(&labels);
    return rc;
}

/* _DBG_PRINTED.sub("", body): `, !dbg !\d+` */
static int dbg_printed(const char *s, size_t n, Buf *out) {
    size_t from = 0, pos = 0;
    while (pos < n) {
        const char *f = find(s + pos, n - pos, ", !dbg !", 8);
        if (!f)
            break;
        size_t j = (size_t)(f - s), k = j + 8;
        while (k < n && is_digit((unsigned char)s[k]))
            k++;
        if (k == j + 8) {
            pos = j + 1;
            continue;
        }
        if (buf_put(out, s + from, j - from) < 0)
            return -1;
        from = pos = k;
    }
    return buf_put(out, s + from, n - from);
}

/* _DBG_ATTACHMENT.sub("", line) on every line: `,?\s*!dbg\s+!\d+`. Every match holds one `!dbg`: where
   its tail (blanks, `!`, digits) follows, the match starts at the blanks before it, or at the `,` before
   those, no earlier than the end of the previous match (the search goes on from there). Blanks never
   cross a \n, as the reference works line by line. */
static int dbg_attachment(const char *s, size_t n, Buf *out) {
    size_t from = 0, pos = 0;
    while (pos < n) {
        const char *f = find(s + pos, n - pos, "!dbg", 4);
        if (!f)
            break;
        size_t d = (size_t)(f - s), k = d + 4;
        while (k < n && is_blank((unsigned char)s[k]))
            k++;
        if (k == d + 4 || k >= n || s[k] != '!' || k + 1 >= n || !is_digit((unsigned char)s[k + 1])) {
            pos = d + 1;
            continue;
        }
        k++;
        while (k < n && is_digit((unsigned char)s[k]))
            k++;
        size_t st = d;
        while (st > from && is_blank((unsigned char)s[st - 1]))
            st--;
        if (st > from && s[st - 1] == ',')
            st--;
        if (buf_put(out, s + from, st - from) < 0)
            return -1;
        from = pos = k;
    }
    return buf_put(out, s + from, n - from);
}

/* _LLIR_META(_LLIR_SSA(body)) in one pass: %[\w$.-]+ -> %vN and ![0-9]+\b -> !mN. Neither holds the
   other's first character, and the character after a `!N` is the same before and after SSA renaming. */
static int rename_llir(const char *s, size_t n, Buf *out) {
    Table ssa, meta;
    if (table_init(&ssa) < 0)
        return -1;
    if (table_init(&meta) < 0) {
        table_free(&ssa);
        return -1;
    }
    int rc = -1;
    size_t from = 0, i = 0;
    while (i < n) {
        char c = s[i];
        if (c != '%' && c != '!') {
            i++;
            continue;
        }
        size_t k = i + 1;
        if (c == '%') {
            while (k < n && is_name((unsigned char)s[k]))
                k++;
        } else {
            while (k < n && is_digit((unsigned char)s[k]))
                k++;
            if (k < n && is_word((unsigned char)s[k])) { /* \b refuses: no match at this `!` */
                i++;
                continue;
            }
        }
        if (k == i + 1) {
            i++;
            continue;
        }
        size_t v = table_index(c == '%' ? &ssa : &meta, s + i, k - i);
        if (v == (size_t)-1 || buf_put(out, s + from, i - from) < 0)
            goto done;
        if ((c == '%' ? buf_put_name(out, "%v", 2, v) : buf_put_name(out, "!m", 2, v)) < 0)
            goto done;
        from = i = k;
    }
    rc = buf_put(out, s + from, n - from);
done:
    table_free(&ssa);
    table_free(&meta);
    return rc;
}

static int normalise_llir(const char *s, size_t n, Buf *out) {
    Buf x, y;
    if (buf_init(&x, n) < 0)
        return -1;
    if (filter_llir(s, n, &x) < 0)
        goto fail_x;
    if (buf_init(&y, x.n) < 0)
        goto fail_x;
    if (dbg_printed(x.p, x.n, &y) < 0)
        goto fail_y;
    x.n = 0;
    if (find(y.p, y.n, "!dbg", 4)) {
        if (dbg_attachment(y.p, y.n, &x) < 0)
            goto fail_y;
    } else if (buf_put(&x, y.p, y.n) < 0) {
        goto fail_y;
    }
    y.n = 0;
    if (quoted_paths(x.p, x.n, &y) < 0)
        goto fail_y;
    int rc = rename_llir(y.p, y.n, out);
    buf_free(&x);
    buf_free(&y);
    return rc;
fail_y:
    buf_free(&y);
fail_x:
    buf_free(&x);
    return -1;
}

/* -- AMDGPU assembly and PTX --------------------------------------------------------------------- */

static int filter_asm(const char *s, size_t n, int ptx, Buf *out) {
    const char *comment = ptx ? "//" : ";";
    size_t clen = ptx ? 2 : 1;
    int in_debug = 0;
    size_t pos = 0;
    const char *a, *b;
    while (next_line(s, n, &pos, &a, &b)) {
        const char *c = find(a, (size_t)(b - a), comment, clen);
        if (c)
            b = c;
        strip(&a, &b);
        size_t ln = (size_t)(b - a);
        if (!ln)
            continue;
        if (starts(a, ln, ".section") || starts(a, ln, ".text") || starts(a, ln, ".data")) {
            in_debug = contains(a, ln, ".debug");
            if (in_debug)
                continue;
        }
        if (in_debug) {
            if (ptx && ln == 1 && *a == '}')
                in_debug = 0;
            continue;
        }
        if (starts(a, ln, ".loc") || starts(a, ln, ".file") || starts(a, ln, ".cfi_") || starts(a, ln, ".ident") ||
            (starts(a, ln, "$L__tmp") && a[ln - 1] == ':'))
            continue;
        if (put_line(out, a, ln) < 0)
            return -1;
    }
    return 0;
}

/* %(?:r|rd|f|fd|p|rs|h|hh|b)\d+\b at s[i] == '%': the end of the match, or 0. The letters before the
   digits are one alternative at most (a longer alternative is a shorter one followed by a letter, which
   \d refuses), and fewer digits leave a digit after them, which \b refuses. */
static size_t ptx_register(const char *s, size_t n, size_t i) {
    size_t k = i + 1;
    while (k < n && s[k] >= 'a' && s[k] <= 'z' && k - i <= 3)
        k++;
    size_t m = k - i - 1;
    const char *l = s + i + 1;
    int ok = (m == 1 && (*l == 'r' || *l == 'f' || *l == 'p' || *l == 'h' || *l == 'b')) ||
             (m == 2 && (memcmp(l, "rd", 2) == 0 || memcmp(l, "fd", 2) == 0 || memcmp(l, "rs", 2) == 0 ||
                         memcmp(l, "hh", 2) == 0));
    if (!ok || k >= n || !is_digit((unsigned char)s[k]))
        return 0;
    while (k < n && is_digit((unsigned char)s[k]))
        k++;
    if (k < n && is_word((unsigned char)s[k]))
        return 0;
    return k;
}

/* _BLANKS.sub(" ", _PTX_REGS(_ASM_LABELS(body))) in one pass: (?:\.L|\$L)[\w$.]+ -> .LN, PTX registers
   -> %rN, and every run of blanks -> one space ([^\S\n]{2,}|[^\S \n] leaves a lone space as it is and
   turns every other run into one). No match of one crosses a match of another: a label holds no `%` or
   blank, a register no `.` `$` or blank, and the character after a register (\b) is a `.` `$` either way. */
static int rename_asm(const char *s, size_t n, int ptx, Buf *out) {
    Table labels, regs;
    if (table_init(&labels) < 0)
        return -1;
    if (table_init(&regs) < 0) {
        table_free(&labels);
        return -1;
    }
    int rc = -1;
    size_t from = 0, i = 0;
    while (i < n) {
        char c = s[i];
        size_t k;
        if ((c == '.' || c == '$') && i + 2 < n && s[i + 1] == 'L' && is_label((unsigned char)s[i + 2])) {
            k = i + 3;
            while (k < n && is_label((unsigned char)s[k]))
                k++;
            size_t v = table_index(&labels, s + i, k - i);
            if (v == (size_t)-1 || buf_put(out, s + from, i - from) < 0 || buf_put_name(out, ".L", 2, v) < 0)
                goto done;
        } else if (ptx && c == '%' && (k = ptx_register(s, n, i)) != 0) {
            size_t v = table_index(&regs, s + i, k - i);
            if (v == (size_t)-1 || buf_put(out, s + from, i - from) < 0 || buf_put_name(out, "%r", 2, v) < 0)
                goto done;
        } else if (is_blank((unsigned char)c)) {
            k = i + 1;
            while (k < n && is_blank((unsigned char)s[k]))
                k++;
            if (k == i + 1 && c == ' ') {
                i = k;
                continue;
            }
            if (buf_put(out, s + from, i - from) < 0 || buf_putc(out, ' ') < 0)
                goto done;
        } else {
            i++;
            continue;
        }
        from = i = k;
    }
    rc = buf_put(out, s + from, n - from);
done:
    table_free(&labels);
    table_free(&regs);
    return rc;
}

static int normalise_asm(const char *s, size_t n, int ptx, Buf *out) {
    Buf x, y;
    if (buf_init(&x, n) < 0)
        return -1;
    if (filter_asm(s, n, ptx, &x) < 0)
        goto fail_x;
    if (buf_init(&y, x.n) < 0)
        goto fail_x;
    if (quoted_paths(x.p, x.n, &y) < 0) {
        buf_free(&y);
        goto fail_x;
    }
    buf_free(&x);
    int rc = rename_asm(y.p, y.n, ptx, out);
    buf_free(&y);
    return rc;
fail_x:
    buf_free(&x);
    return -1;
}

/* -- the module ---------------------------------------------------------------------------------- */

enum { K_OTHER, K_MLIR, K_LLIR, K_AMDGCN, K_PTX };

static int kind_of(const char *k) {
    if (!strcmp(k, "ttir") || !strcmp(k, "ttgir") || !strcmp(k, "source"))
        return K_MLIR;
    if (!strcmp(k, "llir"))
        return K_LLIR;
    if (!strcmp(k, "amdgcn"))
        return K_AMDGCN;
    if (!strcmp(k, "ptx"))
        return K_PTX;
    return K_OTHER;
}

static PyObject *normalise_stage(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "normalise_stage(text: str, kind: str)");
        return NULL;
    }
    PyObject *text = args[0];
    const char *kname = PyUnicode_AsUTF8(args[1]);
    if (!kname)
        return NULL;
    int kind = kind_of(kname);
    if (kind == K_OTHER) {
        Py_INCREF(text);
        return text;
    }
    if (PyUnicode_READY(text) < 0)
        return NULL;
    if (!PyUnicode_IS_ASCII(text))
        Py_RETURN_NONE;
    Py_ssize_t size;
    const char *s = PyUnicode_AsUTF8AndSize(text, &size); /* the string's own ASCII data: no copy */
    if (!s)
        return NULL;
    size_t n = (size_t)size;
    if (!exact_in_c((const unsigned char *)s, n))
        Py_RETURN_NONE;
    Buf out;
    if (buf_init(&out, n) < 0)
        return NULL;
    int rc;
    switch (kind) {
    case K_MLIR:
        rc = normalise_mlir(s, n, &out);
        break;
    case K_LLIR:
        rc = normalise_llir(s, n, &out);
        break;
    default:
        rc = normalise_asm(s, n, kind == K_PTX, &out);
        break;
    }
    PyObject *result = NULL;
    if (rc == 0) {
        result = PyUnicode_New((Py_ssize_t)out.n, 127);
        if (result)
            memcpy(PyUnicode_DATA(result), out.p, out.n);
    }
    buf_free(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"normalise_stage", (PyCFunction)(void (*)(void))normalise_stage, METH_FASTCALL,
     "normalise_stage(text, kind) -> str | None\n\nkdb.triton.normalize.normalise_stage_pure(text, kind) in C; "
     "None for text the C code does not handle exactly (non-ASCII, \\r \\v \\f \\x1c-\\x1f)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kdb._speedups", "kdb's hot text passes in C (issue #31)", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
