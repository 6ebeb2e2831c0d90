/*
 * ockpt_c_reader: a small reader of Orbax checkpoints in C, written from spec/ only
 * (spec/ocdbt.md, spec/arrays.md, spec/json-documents.md), as an example of a program run
 * by the conformance suite's command adapter (conformance/README.md, "Command readers").
 *
 *   ockpt_c_reader [--kind pytree|ocdbt] CHECKPOINT OUT   write OUT/result.json or OUT/error.json
 *   ockpt_c_reader --list DATABASE                        print the keys of an OCDBT database
 *
 * Supports: a pytree item directory (not a v1 checkpoint or a manager root); its array store
 * as an OCDBT database (manifest kind 0, B+tree leaf and interior nodes, zstd or raw, the merged
 * root or, without it, the per-process databases) or as zarr directories; zarr v2 arrays with
 * zstd or no compressor, C order; the tree of _METADATA (arrays, scalars as 0-d arrays,
 * strings from _strings.json, None and empty containers). Not: zarr v3, items without
 * _METADATA, values inline in the msgpack file, numbered manifests (unsupported.json).
 *
 * libzstd is used without its header: the few prototypes are declared below.
 * Build: cc -O2 -o ockpt_c_reader ockpt_c_reader.c -l:libzstd.so.1   (or -lzstd)
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- libzstd (zstd.h is not needed) ---- */
size_t ZSTD_decompress(void *dst, size_t cap, const void *src, size_t n);
unsigned long long ZSTD_getFrameContentSize(const void *src, size_t n);
size_t ZSTD_findFrameCompressedSize(const void *src, size_t n);
unsigned ZSTD_isError(size_t code);
const char *ZSTD_getErrorName(size_t code);
typedef struct ZSTD_DCtx_s ZSTD_DStream;
typedef struct { const void *src; size_t size, pos; } ZSTD_inBuffer;
typedef struct { void *dst; size_t size, pos; } ZSTD_outBuffer;
ZSTD_DStream *ZSTD_createDStream(void);
size_t ZSTD_freeDStream(ZSTD_DStream *);
size_t ZSTD_initDStream(ZSTD_DStream *);
size_t ZSTD_decompressStream(ZSTD_DStream *, ZSTD_outBuffer *, ZSTD_inBuffer *);

/* ---- failures: error.json (a refusal naming a rule) or unsupported ---- */
static const char *g_out;
static void json_str(FILE *f, const char *s, size_t n);

static void finish(const char *rule, int unsupported, const char *fmt, va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (!g_out) { fprintf(stderr, "%s%s%s\n", rule ? rule : "", rule ? ": " : "", msg); exit(1); }
    char path[4096];
    snprintf(path, sizeof path, "%s/error.json", g_out);
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(2); }
    fputs("{\"rule\": ", f);
    if (rule) json_str(f, rule, strlen(rule)); else fputs("null", f);
    fputs(", \"message\": ", f);
    json_str(f, msg, strlen(msg));
    fprintf(f, "%s}\n", unsupported ? ", \"unsupported\": true" : "");
    fclose(f);
    exit(unsupported ? 3 : 1);
}
static void die(const char *rule, const char *fmt, ...) {
    va_list ap; va_start(ap, fmt); finish(rule, 0, fmt, ap);
}
static void unsupported(const char *fmt, ...) {
    va_list ap; va_start(ap, fmt); finish(NULL, 1, fmt, ap);
}
static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) unsupported("out of memory (%zu bytes)", n);
    return p;
}
static char *cat(const char *a, const char *b, size_t bn) {
    size_t an = strlen(a);
    char *s = xmalloc(an + bn + 1);
    memcpy(s, a, an); memcpy(s + an, b, bn); s[an + bn] = 0;
    return s;
}

/* ---- files ---- */
/* The bytes [off, off+len) of a file; len == SIZE_MAX: the whole file. NULL if absent. */
static uint8_t *read_file(const char *path, uint64_t off, uint64_t len, size_t *n, const char *rule) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR) return NULL;
        die(rule, "%s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) die(rule, "%s: not a regular file", path);
    if (len == SIZE_MAX) { off = 0; len = (uint64_t)st.st_size; }
    if (off > (uint64_t)st.st_size || len > (uint64_t)st.st_size - off)
        die(rule, "%s: range %llu+%llu lies past its end (%lld bytes)", path,
            (unsigned long long)off, (unsigned long long)len, (long long)st.st_size);
    if (len > ((uint64_t)1 << 31)) unsupported("%s: a value of %llu bytes", path, (unsigned long long)len);
    uint8_t *buf = xmalloc(len);
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, buf + got, len - got, (off_t)(off + got));
        if (r <= 0) die(rule, "%s: read failed", path);
        got += (size_t)r;
    }
    close(fd);
    *n = len;
    return buf;
}
static int is_dir(const char *p) { struct stat st; return !stat(p, &st) && S_ISDIR(st.st_mode); }

/* ---- zstd: exactly one frame, decoded size bounded ---- */
static uint8_t *unzstd(const uint8_t *src, size_t n, size_t bound, size_t *out_n, const char *rule, const char *what) {
    size_t fsz = ZSTD_findFrameCompressedSize(src, n);
    if (ZSTD_isError(fsz) || fsz != n) die(rule, "%s: not exactly one complete zstd frame", what);
    unsigned long long cs = ZSTD_getFrameContentSize(src, n);
    if (cs == (unsigned long long)-2) die(rule, "%s: bad zstd frame header", what);
    if (cs != (unsigned long long)-1) { /* content size recorded */
        if (cs > bound) die(rule, "%s: decodes to %llu bytes, more than %zu", what, cs, bound);
        uint8_t *out = xmalloc((size_t)cs);
        size_t r = ZSTD_decompress(out, (size_t)cs, src, n);
        if (ZSTD_isError(r) || r != cs) die(rule, "%s: zstd: %s", what, ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short");
        *out_n = r;
        return out;
    }
    ZSTD_DStream *ds = ZSTD_createDStream(); /* no content size: decode as a stream */
    ZSTD_initDStream(ds);
    size_t cap = 1 << 16, len = 0;
    uint8_t *out = xmalloc(cap);
    ZSTD_inBuffer in = {src, n, 0};
    for (;;) {
        if (len == cap) {
            if (cap >= bound + 1) die(rule, "%s: decodes to more than %zu bytes", what, bound);
            cap = cap * 2 > bound + 1 ? bound + 1 : cap * 2;
            out = realloc(out, cap);
            if (!out) unsupported("out of memory");
        }
        ZSTD_outBuffer o = {out, cap, len};
        size_t r = ZSTD_decompressStream(ds, &o, &in);
        len = o.pos;
        if (ZSTD_isError(r)) die(rule, "%s: zstd: %s", what, ZSTD_getErrorName(r));
        if (len > bound) die(rule, "%s: decodes to more than %zu bytes", what, bound);
        if (r == 0) break;
        if (in.pos == in.size && o.pos < o.size) die(rule, "%s: truncated zstd frame", what);
    }
    ZSTD_freeDStream(ds);
    *out_n = len;
    return out;
}

/* ---- CRC-32C (Castagnoli, reflected 0x82F63B78) ---- */
static uint32_t crc32c(const uint8_t *p, size_t n) {
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            table[i] = c;
        }
    uint32_t c = 0xFFFFFFFFu;
    while (n--) c = table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* ---- OCDBT primitives (spec/ocdbt.md §2) ---- */
typedef struct { const uint8_t *p; size_t n, pos; const char *what; } Cur;

static void need(Cur *c, size_t k) {
    if (c->n - c->pos < k) die("OCDBT-007", "%s: field past the end of the body", c->what);
}
static uint8_t u8(Cur *c) { need(c, 1); return c->p[c->pos++]; }
static uint64_t u64le(Cur *c) {
    need(c, 8);
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | c->p[c->pos + i];
    c->pos += 8;
    return v;
}
static uint64_t varint(Cur *c) {
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        uint8_t b = u8(c);
        if (i == 9 && b > 1) die("OCDBT-008", "%s: varint above 2^64", c->what);
        v |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) return v;
    }
    die("OCDBT-008", "%s: varint longer than 10 bytes", c->what);
    return 0;
}
/* a count of entries, each at least `each` bytes, must fit in what remains (OCDBT-007) */
static size_t count(Cur *c, uint64_t n, size_t each) {
    if (n > (c->n - c->pos) / (each ? each : 1)) die("OCDBT-007", "%s: count %llu does not fit", c->what, (unsigned long long)n);
    return (size_t)n;
}
static uint64_t *varints(Cur *c, size_t n) {
    uint64_t *v = xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = varint(c);
    return v;
}

enum { MAGIC_MANIFEST = 0x0cdb3a2a, MAGIC_VERSION = 0x0cdb1234, MAGIC_BTREE = 0x0cdb20de };

/* §4: check the envelope of a structure of `n` bytes; its decoded body */
static uint8_t *envelope(const uint8_t *p, size_t n, uint32_t magic, size_t bound, size_t *body_n, const char *what) {
    if (n < 4) die("OCDBT-002", "%s: %zu bytes", what, n);
    uint32_t m = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    if (m != magic) die("OCDBT-001", "%s: magic 0x%08x, expected 0x%08x", what, m, magic);
    if (n < 18) die("OCDBT-002", "%s: %zu bytes, shorter than an envelope", what, n);
    Cur c = {p, n - 4, 4, what};
    if (u64le(&c) != n) die("OCDBT-002", "%s: length field differs from its size %zu", what, n);
    uint32_t want = (uint32_t)p[n - 4] | (uint32_t)p[n - 3] << 8 | (uint32_t)p[n - 2] << 16 | (uint32_t)p[n - 1] << 24;
    if (crc32c(p, n - 4) != want) die("OCDBT-005", "%s: CRC-32C mismatch", what);
    if (varint(&c) != 0) die("OCDBT-003", "%s: format version is not 0", what);
    uint64_t comp = varint(&c);
    if (comp > 1) die("OCDBT-004", "%s: compression format %llu", what, (unsigned long long)comp);
    size_t len = c.n - c.pos;
    if (comp == 1) return unzstd(p + c.pos, len, bound, body_n, "OCDBT-006", what);
    if (len > bound) die("OCDBT-006", "%s: body of %zu bytes", what, len);
    uint8_t *b = xmalloc(len);
    memcpy(b, p + c.pos, len);
    *body_n = len;
    return b;
}

/* §6: data file table */
typedef struct { size_t n; char **path; size_t *len, *base; } Table;

static void table(Cur *c, Table *t) {
    size_t n = count(c, varint(c), 2);
    uint64_t *pre = varints(c, n ? n - 1 : 0), *suf = varints(c, n), *base = varints(c, n);
    t->n = n;
    t->path = xmalloc(n * sizeof(char *));
    t->len = xmalloc(n * sizeof(size_t));
    t->base = xmalloc(n * sizeof(size_t));
    for (size_t i = 0; i < n; i++) {
        size_t p = i ? (size_t)pre[i - 1] : 0;
        if (i && pre[i - 1] > t->len[i - 1]) die("OCDBT-020", "%s: path prefix too long", c->what);
        if (suf[i] > 65535 || p + suf[i] > 65535) die("OCDBT-020", "%s: path too long", c->what);
        need(c, (size_t)suf[i]);
        t->len[i] = p + (size_t)suf[i];
        t->path[i] = xmalloc(t->len[i] + 1);
        if (p) memcpy(t->path[i], t->path[i - 1], p);
        memcpy(t->path[i] + p, c->p + c->pos, (size_t)suf[i]);
        t->path[i][t->len[i]] = 0;
        c->pos += (size_t)suf[i];
        if (base[i] > t->len[i]) die("OCDBT-020", "%s: base path longer than the path", c->what);
        t->base[i] = (size_t)base[i];
    }
    free(pre); free(suf); free(base);
}

/* ---- a database: every (key, value) of the latest generation, in key order ---- */
typedef struct { uint8_t *key; size_t klen; uint8_t *val; char *file; uint64_t off, vlen; } Entry;
typedef struct { char *dir; size_t bound; Entry *e; size_t n, cap; } Db;

/* the file a reference names: `trans` + path (§6), checked (OCDBT-021, OCDBT-023) */
static char *ref_path(Db *db, const char *trans, Table *t, uint64_t id, const char *what) {
    if (id >= t->n) die("OCDBT-021", "%s: data_file_id %llu, table has %zu", what, (unsigned long long)id, t->n);
    char *rel = cat(trans, t->path[id], t->len[id]);
    const char *s = rel;
    if (!*s || *s == '/') die("OCDBT-023", "%s: data file path '%s'", what, rel);
    for (;;) {
        const char *e = strchr(s, '/');
        size_t k = e ? (size_t)(e - s) : strlen(s);
        if (!k || (k == 1 && s[0] == '.') || (k == 2 && s[0] == '.' && s[1] == '.') || memchr(s, '\\', k))
            die("OCDBT-023", "%s: data file path '%s'", what, rel);
        if (!e) break;
        s = e + 1;
    }
    char *full = cat(db->dir, "/", 1), *f2 = cat(full, rel, strlen(rel));
    free(full); free(rel);
    return f2;
}

static int keycmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn) {
    int r = memcmp(a, b, an < bn ? an : bn);
    return r ? r : (an > bn) - (an < bn);
}

static void node(Db *db, const char *trans, Table *pt, uint64_t id, uint64_t off, uint64_t len,
                 int height, const uint8_t *prefix, size_t plen, int depth) {
    char what[64];
    snprintf(what, sizeof what, "B+tree node (height %d)", height);
    if (depth > 64) die("OCDBT-040", "B+tree deeper than 64");
    char *file = ref_path(db, trans, pt, id, what);
    size_t raw_n, n;
    uint8_t *raw = read_file(file, off, len, &raw_n, "OCDBT-022");
    if (!raw) die("OCDBT-022", "%s: data file missing", file);
    uint8_t *body = envelope(raw, raw_n, MAGIC_BTREE, db->bound, &n, what);
    free(raw); free(file);
    /* the node's transitive path: the parent's plus the base path of the entry's file */
    char *mytrans = cat(trans, pt->path[id], pt->base[id]);
    Cur c = {body, n, 0, what};
    if (u8(&c) != height) die("OCDBT-040", "%s: height differs from its parent's", what);
    Table t;
    table(&c, &t);
    size_t k = count(&c, varint(&c), 2);
    if (!k) die("OCDBT-040", "%s: no entries", what);
    uint64_t *pre = varints(&c, k - 1), *suf = varints(&c, k), *scp = height ? varints(&c, k) : NULL;
    uint8_t **key = xmalloc(k * sizeof *key);
    size_t *klen = xmalloc(k * sizeof *klen);
    for (size_t i = 0; i < k; i++) {
        size_t p = i ? (size_t)pre[i - 1] : 0;
        if (i && p > klen[i - 1]) die("OCDBT-041", "%s: key prefix longer than the previous key", what);
        need(&c, (size_t)suf[i]);
        klen[i] = plen + p + (size_t)suf[i];
        key[i] = xmalloc(klen[i]);
        memcpy(key[i], prefix, plen);
        if (p) memcpy(key[i] + plen, key[i - 1] + plen, p);
        memcpy(key[i] + plen + p, c.p + c.pos, (size_t)suf[i]);
        c.pos += (size_t)suf[i];
        if (i && keycmp(key[i], klen[i], key[i - 1], klen[i - 1]) <= 0) die("OCDBT-041", "%s: keys out of order", what);
    }
    if (height == 0) { /* §8.2 leaf entries */
        uint64_t *vlen = varints(&c, k);
        uint8_t *kind = xmalloc(k);
        size_t nind = 0;
        for (size_t i = 0; i < k; i++) {
            kind[i] = u8(&c);
            if (kind[i] > 1) die("OCDBT-043", "%s: value_kind %d", what, kind[i]);
            nind += kind[i];
        }
        uint64_t *fid = varints(&c, nind), *foff = varints(&c, nind);
        for (size_t i = 0, j = 0; i < k; i++) {
            if (db->n == db->cap) {
                db->cap = db->cap ? db->cap * 2 : 256;
                db->e = realloc(db->e, db->cap * sizeof(Entry));
                if (!db->e) unsupported("out of memory");
            }
            Entry *e = &db->e[db->n];
            if (db->n && keycmp(key[i], klen[i], db->e[db->n - 1].key, db->e[db->n - 1].klen) <= 0)
                die("OCDBT-044", "%s: key outside its subtree's interval", what);
            e->key = key[i]; e->klen = klen[i]; e->vlen = vlen[i]; e->val = NULL; e->file = NULL;
            if (kind[i]) {
                e->file = ref_path(db, mytrans, &t, fid[j], "leaf entry");
                e->off = foff[j++];
            } else {
                need(&c, (size_t)vlen[i]);
                e->val = xmalloc((size_t)vlen[i]);
                memcpy(e->val, c.p + c.pos, (size_t)vlen[i]);
                c.pos += (size_t)vlen[i];
            }
            db->n++;
        }
        if (c.pos != c.n) die("OCDBT-007", "%s: %zu bytes left over", what, c.n - c.pos);
    } else { /* §8.3 interior entries: read the columns, then descend in key order */
        for (size_t i = 0; i < k; i++)
            if (scp[i] > klen[i] - plen) die("OCDBT-042", "%s: subtree_common_prefix_length too long", what);
        uint64_t *fid = varints(&c, k), *foff = varints(&c, k), *flen = varints(&c, k);
        free(varints(&c, k)); free(varints(&c, k)); free(varints(&c, k)); /* statistics */
        if (c.pos != c.n) die("OCDBT-007", "%s: %zu bytes left over", what, c.n - c.pos);
        for (size_t i = 0; i < k; i++) /* child prefix: ours + the first bytes of its key */
            node(db, mytrans, &t, fid[i], foff[i], flen[i], height - 1, key[i], plen + (size_t)scp[i], depth + 1);
    }
    free(body);
}

/* §5: open the database at `dir` (manifest kind 0) and collect its latest generation */
static int db_open(Db *db, const char *dir) {
    memset(db, 0, sizeof *db);
    db->dir = cat(dir, "", 0);
    char *mpath = cat(dir, "/manifest.ocdbt", 15);
    size_t raw_n, n;
    uint8_t *raw = read_file(mpath, 0, SIZE_MAX, &raw_n, "OCDBT-050");
    free(mpath);
    if (!raw) return 0;
    uint8_t *body = envelope(raw, raw_n, MAGIC_MANIFEST, (size_t)1 << 30, &n, "manifest");
    Cur c = {body, n, 0, "manifest"};
    need(&c, 17);
    c.pos += 16; /* uuid */
    uint8_t kind = u8(&c);
    if (kind > 1) die("OCDBT-010", "manifest kind %d", kind);
    if (kind == 1) unsupported("numbered manifests (manifest kind 1)");
    uint64_t inline_max = varint(&c), node_max = varint(&c);
    uint8_t arity = u8(&c);
    if (arity < 1 || arity > 16) die("OCDBT-011", "version_tree_arity_log2 %d", arity);
    uint64_t method = varint(&c);
    if (method > 1) die("OCDBT-012", "compression method %llu", (unsigned long long)method);
    if (method == 1) { need(&c, 4); c.pos += 4; }
    /* §5.1: the bound of a decoded node, at most 1 GiB */
    uint64_t b = (uint64_t)1 << 30;
    if (node_max && node_max < b && inline_max < b)
        b = 2 * node_max + 4 * inline_max + ((uint64_t)1024 << arity) + ((uint64_t)1 << 20);
    db->bound = (size_t)(b < ((uint64_t)1 << 30) ? b : ((uint64_t)1 << 30));
    Table t;
    table(&c, &t);
    /* §7.1 inline versions: the last is the latest generation */
    size_t nv = count(&c, varint(&c), 15);
    if (!nv) die("OCDBT-031", "manifest: no inline version");
    uint64_t *gen = varints(&c, nv);
    uint8_t *height = xmalloc(nv);
    for (size_t i = 0; i < nv; i++) height[i] = u8(&c);
    uint64_t *fid = varints(&c, nv), *off = varints(&c, nv), *len = varints(&c, nv);
    free(varints(&c, nv)); free(varints(&c, nv)); free(varints(&c, nv));
    for (size_t i = 0; i < nv; i++) u64le(&c);
    for (size_t i = 1; i < nv; i++)
        if (gen[i] <= gen[i - 1]) die("OCDBT-030", "manifest: generations out of order");
    /* §7.2 version tree nodes (manifest form): older generations, not needed for the latest */
    size_t nc = count(&c, varint(&c), 15);
    for (int col = 0; col < 5; col++) free(varints(&c, nc));
    for (size_t i = 0; i < nc; i++) u64le(&c);
    for (size_t i = 0; i < nc; i++) u8(&c);
    if (c.pos != c.n) die("OCDBT-007", "manifest: %zu bytes left over", c.n - c.pos);
    size_t v = nv - 1;
    if (off[v] == UINT64_MAX && len[v] == UINT64_MAX) { /* an empty tree (§7.1, OCDBT-033) */
        if (height[v]) die("OCDBT-033", "manifest: empty tree of height %d", height[v]);
        return 1;
    }
    node(db, "", &t, fid[v], off[v], len[v], height[v], (const uint8_t *)"", 0, 0);
    free(body); free(raw);
    return 1;
}

/* the value of `key` (NULL: absent) */
static uint8_t *db_get(Db *db, const char *key, size_t *n) {
    size_t lo = 0, hi = db->n, kl = strlen(key);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int r = keycmp(db->e[mid].key, db->e[mid].klen, (const uint8_t *)key, kl);
        if (!r) {
            Entry *e = &db->e[mid];
            if (e->val) {
                uint8_t *v = xmalloc((size_t)e->vlen);
                memcpy(v, e->val, (size_t)e->vlen);
                *n = (size_t)e->vlen;
                return v;
            }
            uint8_t *v = read_file(e->file, e->off, e->vlen, n, "OCDBT-022");
            if (!v) die("OCDBT-022", "%s: data file missing", e->file);
            return v;
        }
        if (r < 0) lo = mid + 1; else hi = mid;
    }
    return NULL;
}

/* ---- the array store of an item: the root database, per-process databases, or files ---- */
typedef struct { const char *item; Db *dbs; size_t ndb; } Store;

static void store_open(Store *s, const char *item) {
    s->item = item;
    s->dbs = xmalloc(sizeof(Db));
    s->ndb = 0;
    if (db_open(&s->dbs[0], item)) { s->ndb = 1; return; }
    /* no root manifest: the per-process databases, each in turn (spec/ocdbt.md §10) */
    for (int p = 0; p < 1024; p++) {
        char d[4096];
        snprintf(d, sizeof d, "%s/ocdbt.process_%d", item, p);
        if (!is_dir(d)) break;
        s->dbs = realloc(s->dbs, (s->ndb + 1) * sizeof(Db));
        if (!db_open(&s->dbs[s->ndb], d)) die("OCDBT-050", "%s: no manifest.ocdbt", d);
        s->ndb++;
    }
}

static uint8_t *store_get(Store *s, const char *key, size_t *n) {
    for (size_t i = 0; i < s->ndb; i++) {
        uint8_t *v = db_get(&s->dbs[i], key, n);
        if (v) return v;
    }
    if (s->ndb) return NULL;
    for (const char *q = key; (q = strstr(q, "..")); q += 2) /* no ".." segment (PATH-003) */
        if ((q == key || q[-1] == '/') && (q[2] == '/' || !q[2])) die("PATH-003", "key '%s' leaves the item", key);
    char *path = cat(s->item, "/", 1), *p2 = cat(path, key, strlen(key));
    uint8_t *v = read_file(p2, 0, SIZE_MAX, n, "LOAD-041");
    free(path); free(p2);
    return v;
}

/* ---- a small JSON parser (RFC 8259) ---- */
typedef struct J J;
struct J { char t; char *s; size_t sn; double num; int isint; long long i; J **v; char **k; size_t n; };
typedef struct { const char *p, *end; const char *what; } JP;

static void jws(JP *j) { while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++; }
static void jbad(JP *j) { die("JSON-001", "%s: not valid JSON", j->what); }
static void jutf8(char **o, unsigned cp) {
    char *s = *o;
    if (cp < 0x80) *s++ = (char)cp;
    else if (cp < 0x800) { *s++ = (char)(0xC0 | cp >> 6); *s++ = (char)(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) { *s++ = (char)(0xE0 | cp >> 12); *s++ = (char)(0x80 | (cp >> 6 & 0x3F)); *s++ = (char)(0x80 | (cp & 0x3F)); }
    else { *s++ = (char)(0xF0 | cp >> 18); *s++ = (char)(0x80 | (cp >> 12 & 0x3F)); *s++ = (char)(0x80 | (cp >> 6 & 0x3F)); *s++ = (char)(0x80 | (cp & 0x3F)); }
    *o = s;
}
static unsigned jhex4(JP *j) {
    if (j->end - j->p < 4) jbad(j);
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = *j->p++;
        v = v * 16 + (unsigned)(ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : (jbad(j), 0));
    }
    return v;
}
static char *jstring(JP *j, size_t *len) {
    j->p++; /* opening quote */
    char *out = xmalloc((size_t)(j->end - j->p) * 2 + 1), *o = out;
    for (;;) {
        if (j->p >= j->end) jbad(j);
        unsigned char ch = (unsigned char)*j->p++;
        if (ch == '"') break;
        if (ch < 0x20) jbad(j);
        if (ch != '\\') { *o++ = (char)ch; continue; }
        if (j->p >= j->end) jbad(j);
        char e = *j->p++;
        const char *map = e ? strchr("\"\"\\\\//b\bf\fn\nr\rt\t", e) : NULL;
        if (e == 'u') {
            unsigned cp = jhex4(j);
            if (cp >= 0xD800 && cp < 0xDC00 && j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u') {
                const char *save = j->p;
                j->p += 2;
                unsigned lo = jhex4(j);
                if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else j->p = save;
            }
            jutf8(&o, cp); /* a lone surrogate is kept as its 3-byte form */
        } else if (map && (map - "\"\"\\\\//b\bf\fn\nr\rt\t") % 2 == 0) *o++ = map[1];
        else jbad(j);
    }
    *o = 0;
    *len = (size_t)(o - out);
    return out;
}
static J *jvalue(JP *j, int depth) {
    if (depth > 128) jbad(j);
    jws(j);
    if (j->p >= j->end) jbad(j);
    J *v = calloc(1, sizeof(J));
    if (!v) unsupported("out of memory");
    char ch = *j->p;
    if (ch == '{' || ch == '[') {
        v->t = ch;
        j->p++;
        jws(j);
        char close = ch == '{' ? '}' : ']';
        if (j->p < j->end && *j->p == close) { j->p++; return v; }
        for (;;) {
            v->v = realloc(v->v, (v->n + 1) * sizeof(J *));
            v->k = realloc(v->k, (v->n + 1) * sizeof(char *));
            if (ch == '{') {
                jws(j);
                size_t kl;
                if (j->p >= j->end || *j->p != '"') jbad(j);
                v->k[v->n] = jstring(j, &kl);
                jws(j);
                if (j->p >= j->end || *j->p++ != ':') jbad(j);
            }
            v->v[v->n++] = jvalue(j, depth + 1);
            jws(j);
            if (j->p < j->end && *j->p == ',') { j->p++; continue; }
            if (j->p < j->end && *j->p == close) { j->p++; return v; }
            jbad(j);
        }
    }
    if (ch == '"') { v->t = 's'; v->s = jstring(j, &v->sn); return v; }
    static const char *lit[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++)
        if ((size_t)(j->end - j->p) >= strlen(lit[i]) && !strncmp(j->p, lit[i], strlen(lit[i]))) {
            v->t = "tfn"[i];
            j->p += strlen(lit[i]);
            return v;
        }
    if (ch != '-' && (ch < '0' || ch > '9')) jbad(j);
    char *e;
    v->t = 'd';
    v->num = strtod(j->p, &e);
    if (e == j->p || e > j->end) jbad(j);
    v->isint = !memchr(j->p, '.', (size_t)(e - j->p)) && !memchr(j->p, 'e', (size_t)(e - j->p)) && !memchr(j->p, 'E', (size_t)(e - j->p));
    v->i = v->isint ? strtoll(j->p, NULL, 10) : 0;
    j->p = e;
    return v;
}
static J *jparse(const uint8_t *p, size_t n, const char *what) {
    JP j = {(const char *)p, (const char *)p + n, what};
    J *v = jvalue(&j, 0);
    jws(&j);
    if (j.p != j.end) jbad(&j);
    return v;
}
static J *jget(J *o, const char *k) {
    if (!o || o->t != '{') return NULL;
    for (size_t i = 0; i < o->n; i++)
        if (!strcmp(o->k[i], k)) return o->v[i];
    return NULL;
}

/* ---- output: result.json, .npy files ---- */
static void json_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

/* zarr v2 dtype (spec/arrays.md §7) -> name, bytes, .npy descr */
typedef struct { const char *zarr, *name; int size; const char *npy; } Type;
static const Type TYPES[] = {
    {"|b1", "bool", 1, "|b1"}, {"|i1", "int8", 1, "|i1"}, {"<i2", "int16", 2, "<i2"},
    {"<i4", "int32", 4, "<i4"}, {"<i8", "int64", 8, "<i8"}, {"|u1", "uint8", 1, "|u1"},
    {"<u2", "uint16", 2, "<u2"}, {"<u4", "uint32", 4, "<u4"}, {"<u8", "uint64", 8, "<u8"},
    {"<f2", "float16", 2, "<f2"}, {"<f4", "float32", 4, "<f4"}, {"<f8", "float64", 8, "<f8"},
    {"<c8", "complex64", 8, "<c8"}, {"<c16", "complex128", 16, "<c16"},
    {"bfloat16", "bfloat16", 2, "<u2"}, /* raw bits: the .npy holds the unsigned integer */
    {"float8_e3m4", 0, 1, "|u1"}, {"float8_e4m3", 0, 1, "|u1"}, {"float8_e4m3fn", 0, 1, "|u1"},
    {"float8_e4m3fnuz", 0, 1, "|u1"}, {"float8_e4m3b11fnuz", 0, 1, "|u1"}, {"float8_e5m2", 0, 1, "|u1"},
    {"float8_e5m2fnuz", 0, 1, "|u1"}, {"float8_e8m0fnu", 0, 1, "|u1"}, {"float4_e2m1fn", 0, 1, "|u1"},
    {"float6_e2m3fn", 0, 1, "|u1"}, {"float6_e3m2fn", 0, 1, "|u1"}, {"int2", 0, 1, "|u1"},
    {"int4", 0, 1, "|u1"}, {"uint2", 0, 1, "|u1"}, {"uint4", 0, 1, "|u1"},
};

static int g_narrays;
static void write_npy(const char *rel, const char *descr, const long long *shape, int rank, const uint8_t *data, size_t n) {
    char path[4096], hdr[512];
    snprintf(path, sizeof path, "%s/%s", g_out, rel);
    int h = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int d = 0; d < rank; d++) h += snprintf(hdr + h, sizeof hdr - (size_t)h, "%lld%s", shape[d], rank == 1 ? "," : d + 1 < rank ? ", " : "");
    h += snprintf(hdr + h, sizeof hdr - (size_t)h, "), }");
    while ((10 + h + 1) % 64) hdr[h++] = ' ';
    hdr[h++] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(h & 0xFF, f); fputc(h >> 8, f);
    fwrite(hdr, 1, (size_t)h, f);
    fwrite(data, 1, n, f);
    fclose(f);
}

/* where the keys of a param start (spec/key-paths.md, arrays §1): "<name>/", "<name>" when it
 * ends with "/", "" for the empty name; a zarr directory drops leading and trailing "/" first */
static void array_prefix(const char *param, int per_leaf, char *out, size_t cap) {
    size_t a = 0, b = strlen(param);
    if (per_leaf) { while (a < b && param[a] == '/') a++; while (b > a && param[b - 1] == '/') b--; }
    if (b - a + 2 > cap) unsupported("a param name over 8 KiB");
    memcpy(out, param + a, b - a);
    out[b - a] = 0;
    if (b > a && out[b - a - 1] != '/') strcat(out, "/");
}

/* decode the zarr v2 array `param` of the store; writes its .npy; returns its Type */
static const Type *read_array(Store *s, const char *param, int must_store, int zarr3, long long *shape, int *rank, char *file) {
    char key[8300], pre[8200];
    array_prefix(param, s->ndb == 0, pre, sizeof pre);
    snprintf(key, sizeof key, "%s%s", pre, zarr3 ? "zarr.json" : ".zarray");
    size_t n;
    uint8_t *raw = store_get(s, key, &n);
    if (raw && zarr3) unsupported("%s: zarr v3", param);
    if (!raw) die("LOAD-040", "%s: no array under the param name (%s)", param, key);
    J *z = jparse(raw, n, key);
    J *fmt = jget(z, "zarr_format"), *jshape = jget(z, "shape"), *jchunks = jget(z, "chunks"), *jdt = jget(z, "dtype");
    if (!fmt || fmt->t != 'd' || fmt->i != 2 || !jshape || !jchunks || !jdt || !jget(z, "compressor") || !jget(z, "fill_value"))
        die("ZARR-002", "%s: not a zarr v2 .zarray", key);
    if (jshape->t != '[' || jchunks->t != '[' || jdt->t != 's' || jshape->n != jchunks->n || jshape->n > 32)
        die("ZARR-005", "%s: shape and chunks must be lists of integers of one length", key);
    const Type *ty = NULL;
    for (size_t i = 0; i < sizeof TYPES / sizeof *TYPES; i++)
        if (!strcmp(TYPES[i].zarr, jdt->s)) ty = &TYPES[i];
    if (!ty) {
        if (jdt->s[0] == '>') unsupported("%s: big-endian dtype %s", key, jdt->s);
        die("ZARR-001", "%s: dtype %s", key, jdt->s);
    }
    J *comp = jget(z, "compressor"), *order = jget(z, "order"), *filt = jget(z, "filters"), *sep = jget(z, "dimension_separator");
    int zstd = 0;
    if (comp->t == '{') {
        J *id = jget(comp, "id");
        if (!id || id->t != 's') die("ZARR-004", "%s: compressor without id", key);
        if (!strcmp(id->s, "zstd")) zstd = 1;
        else if (!strcmp(id->s, "gzip") || !strcmp(id->s, "zlib")) unsupported("%s: compressor %s", key, id->s);
        else die("ZARR-004", "%s: compressor %s", key, id->s);
    } else if (comp->t != 'n') die("ZARR-004", "%s: compressor", key);
    if (order && (order->t != 's' || (strcmp(order->s, "C") && strcmp(order->s, "F")))) die("ZARR-004", "%s: order", key);
    if (order && !strcmp(order->s, "F")) unsupported("%s: Fortran order", key);
    if (filt && !(filt->t == 'n' || (filt->t == '[' && !filt->n))) die("ZARR-004", "%s: filters", key);
    char dsep = '.';
    if (sep) {
        if (sep->t != 's' || (strcmp(sep->s, ".") && strcmp(sep->s, "/"))) die("ZARR-006", "%s: dimension_separator", key);
        dsep = sep->s[0];
    }
    int r = (int)jshape->n;
    long long chunks[32], grid[32], idx[32];
    size_t total = (size_t)ty->size, cbytes = (size_t)ty->size;
    for (int d = 0; d < r; d++) {
        J *a = jshape->v[d], *b = jchunks->v[d];
        if (a->t != 'd' || !a->isint || a->i < 0 || b->t != 'd' || !b->isint || b->i < 1)
            die("ZARR-005", "%s: shape and chunks must be integers >= 0 and >= 1", key);
        shape[d] = a->i; chunks[d] = b->i;
        if (shape[d] > (1LL << 40) || chunks[d] > (1LL << 40)) unsupported("%s: too large", key);
        total *= (size_t)shape[d];
        cbytes *= (size_t)chunks[d];
        if (total > ((size_t)1 << 32) || cbytes > ((size_t)1 << 32)) unsupported("%s: more than 4 GiB", key);
        grid[d] = (shape[d] + chunks[d] - 1) / chunks[d];
        idx[d] = 0;
    }
    *rank = r;
    uint8_t *out = xmalloc(total);
    int empty = total == 0; /* a zero-size array has no chunk (ZARR-009) */
    while (!empty) { /* every chunk of the grid, in C order */
        char ck[8300];
        int kl = snprintf(ck, sizeof ck, "%s", pre);
        if (!r) snprintf(ck + kl, sizeof ck - (size_t)kl, "0");
        for (int d = 0; d < r && kl < (int)sizeof ck - 24; d++) {
            if (d) ck[kl++] = dsep;
            kl += snprintf(ck + kl, sizeof ck - (size_t)kl, "%lld", idx[d]);
        }
        size_t vn, cn;
        uint8_t *v = store_get(s, ck, &vn), *chunk;
        if (!v) {
            if (must_store) die("LOAD-041", "chunk %s is missing", ck);
            J *fill = jget(z, "fill_value");
            if (fill->t != 'n' && !(fill->t == 'd' && fill->num == 0)) unsupported("%s: absent chunk with a non-zero fill value", key);
            chunk = calloc(1, cbytes ? cbytes : 1); /* null or 0: zero */
        } else if (zstd) {
            chunk = unzstd(v, vn, cbytes, &cn, "ZARR-003", ck);
            if (cn != cbytes) die("ZARR-003", "%s: decodes to %zu bytes, expected %zu", ck, cn, cbytes);
            free(v);
        } else {
            if (vn != cbytes) die("ZARR-003", "%s: %zu bytes, expected %zu", ck, vn, cbytes);
            chunk = v;
        }
        /* copy the part of the chunk inside the array, one run of the last dimension at a time */
        long long local[32] = {0};
        for (;;) {
            size_t src = 0, dst = 0;
            int inside = 1;
            for (int d = 0; d < r; d++) {
                long long g = idx[d] * chunks[d] + local[d];
                if (g >= shape[d]) inside = 0;
                src = src * (size_t)chunks[d] + (size_t)local[d];
                dst = dst * (size_t)shape[d] + (size_t)g;
            }
            long long run = r ? (shape[r - 1] - idx[r - 1] * chunks[r - 1] < chunks[r - 1] ? shape[r - 1] - idx[r - 1] * chunks[r - 1] : chunks[r - 1]) : 1;
            if (inside) memcpy(out + dst * (size_t)ty->size, chunk + src * (size_t)ty->size, (size_t)run * (size_t)ty->size);
            int d = r - 2;
            while (d >= 0 && ++local[d] == chunks[d]) local[d--] = 0;
            if (d < 0) break;
        }
        free(chunk);
        int d = r - 1;
        while (d >= 0 && ++idx[d] == grid[d]) idx[d--] = 0;
        if (d < 0) break;
    }
    sprintf(file, "arrays/%04d.npy", g_narrays++);
    write_npy(file, ty->npy, shape, r, out, total);
    free(out); free(raw);
    return ty;
}

/* the value of a string leaf in _strings.json: the member named by the param name, else the
 * JSON pointer "/" + param name (spec/json-documents.md §7) */
static J *string_of(J *doc, const char *param) {
    J *v = jget(doc, param);
    if (v) return v;
    char *copy = cat(param, "", 0), *save, *tok = strtok_r(copy, "/", &save);
    v = doc;
    while (tok && v) { v = jget(v, tok); tok = strtok_r(NULL, "/", &save); }
    return v;
}

static int run_pytree(const char *item) {
    char path[4096];
    size_t n;
    snprintf(path, sizeof path, "%s/_METADATA", item);
    uint8_t *raw = read_file(path, 0, SIZE_MAX, &n, "META-001");
    if (!raw) {
        snprintf(path, sizeof path, "%s/checkpoint", item);
        if (read_file(path, 0, SIZE_MAX, &n, "MSGPACK-001")) unsupported("an item without _METADATA (the tree is in the msgpack file)");
        die("LOAD-050", "%s: not a pytree item (no _METADATA)", item);
    }
    J *meta = jparse(raw, n, "_METADATA"), *tree = jget(meta, "tree_metadata");
    if (!tree || tree->t != '{') die("META-001", "_METADATA: no tree_metadata object");
    J *flag = jget(meta, "store_array_data_equal_to_fill_value"), *z3 = jget(meta, "use_zarr3");
    int must_store = flag && flag->t == 't', zarr3 = z3 && z3->t == 't';
    char **names = xmalloc(tree->n * sizeof(char *)); /* param names, for PATH-001 */
    Store s;
    store_open(&s, item);
    J *strings = NULL;
    char tmp[4096], arrays[4096];
    snprintf(tmp, sizeof tmp, "%s/result.json.tmp", g_out);
    snprintf(arrays, sizeof arrays, "%s/arrays", g_out);
    mkdir(arrays, 0777);
    FILE *f = fopen(tmp, "w");
    if (!f) { perror(tmp); exit(2); }
    fputs("{\"format\": \"ockpt-conformance-output/1\", \"reader\": \"ockpt_c_reader\", \"leaves\": [", f);
    for (size_t i = 0; i < tree->n; i++) {
        J *e = tree->v[i], *keys = jget(e, "key_metadata"), *vm = jget(e, "value_metadata");
        J *vt = jget(vm, "value_type"), *skip = jget(vm, "skip_deserialize");
        if (!keys || keys->t != '[' || !vt || vt->t != 's') die("META-002", "_METADATA: entry %s", tree->k[i]);
        char param[8192] = "";
        size_t pl = 0;
        fputs(i ? ",\n {\"path\": [" : "\n {\"path\": [", f);
        for (size_t k = 0; k < keys->n; k++) {
            J *key = jget(keys->v[k], "key"), *kt = jget(keys->v[k], "key_type");
            if (!key || key->t != 's' || !kt || kt->t != 'd') die("META-002", "_METADATA: key of %s", tree->k[i]);
            if (kt->i != 1 && kt->i != 2) die("META-004", "_METADATA: key_type %lld", kt->i);
            if (k) fputs(", ", f);
            if (kt->i == 1) {
                int ok = key->sn > 0 && key->sn < 19 && (key->s[0] != '0' || key->sn == 1);
                for (size_t q = 0; q < key->sn; q++) ok = ok && key->s[q] >= '0' && key->s[q] <= '9';
                if (!ok) die("META-005", "_METADATA: sequence index '%s'", key->s);
                fputs(key->s, f);
            } else json_str(f, key->s, key->sn);
            if (pl + key->sn + 2 > sizeof param) unsupported("a param name over 8 KiB");
            if (k) param[pl++] = '.';
            memcpy(param + pl, key->s, key->sn);
            pl += key->sn;
            param[pl] = 0;
        }
        fputs("], ", f);
        for (size_t q = 0; q < i; q++) { /* equal, or one a "/"-prefix of the other */
            size_t a = strlen(names[q]);
            const char *x = a <= pl ? names[q] : param, *y = a <= pl ? param : names[q];
            size_t xl = strlen(x);
            if (!strncmp(x, y, xl) && (!y[xl] || y[xl] == '/' || (xl && x[xl - 1] == '/')))
                die("PATH-001", "param names '%s' and '%s' collide", names[q], param);
        }
        names[i] = cat(param, "", 0);
        const char *t = vt->s;
        int is_array = !strcmp(t, "jax.Array") || !strcmp(t, "np.ndarray"), is_scalar = !strcmp(t, "scalar");
        if ((is_array || is_scalar || !strcmp(t, "string")) && skip && skip->t == 't')
            unsupported("%s: a value inline in the msgpack file (aggregated)", param);
        if (is_array || is_scalar) {
            long long shape[32];
            int rank;
            char file[64];
            const Type *ty = read_array(&s, param, must_store, zarr3, shape, &rank, file);
            const char *name = ty->name ? ty->name : ty->zarr;
            if (is_scalar && rank) die("VAL-006", "%s: a scalar leaf with a %d-d array", param, rank);
            fprintf(f, "\"kind\": \"%s\", \"dtype\": \"%s\", \"file\": \"%s\"", is_scalar ? "scalar" : "array", name, file);
            if (!ty->name || !strcmp(ty->zarr, "bfloat16")) fprintf(f, ", \"npy_dtype\": \"%s\"", ty->size == 2 ? "uint16" : "uint8");
            if (!is_scalar) {
                fputs(", \"shape\": [", f);
                for (int d = 0; d < rank; d++) fprintf(f, d ? ", %lld" : "%lld", shape[d]);
                fputc(']', f);
            }
        } else if (!strcmp(t, "string")) {
            if (!strings) {
                snprintf(path, sizeof path, "%s/_strings.json", item);
                uint8_t *sraw = read_file(path, 0, SIZE_MAX, &n, "STR-001");
                if (!sraw) unsupported("%s: string leaves without _strings.json at the item root", param);
                strings = jparse(sraw, n, "_strings.json");
                if (strings->t != '{') die("STR-001", "_strings.json is not an object");
            }
            J *v = string_of(strings, param);
            if (!v || v->t != 's') die("STR-002", "%s: no string in _strings.json", param);
            fputs("\"kind\": \"string\", \"value\": ", f);
            json_str(f, v->s, v->sn);
        } else if (!strcmp(t, "None")) fputs("\"kind\": \"none\"", f);
        else if (!strcmp(t, "Dict") || !strcmp(t, "NamedTuple")) fputs("\"kind\": \"empty_dict\"", f);
        else if (!strcmp(t, "List") || !strcmp(t, "Tuple")) fputs("\"kind\": \"empty_list\"", f);
        else unsupported("%s: value_type %s", param, t);
        fputc('}', f);
    }
    fputs("\n]}\n", f);
    fclose(f);
    char final[4096];
    snprintf(final, sizeof final, "%s/result.json", g_out);
    if (rename(tmp, final)) { perror(final); exit(2); }
    return 0;
}

/* the keys of a bare database: result.json (g_out) or one per line on stdout */
static int run_ocdbt(const char *dir) {
    Db db;
    if (!db_open(&db, dir)) die("OCDBT-050", "%s: no manifest.ocdbt", dir);
    FILE *f = stdout;
    char path[4096];
    if (g_out) {
        snprintf(path, sizeof path, "%s/result.json", g_out);
        f = fopen(path, "w");
        if (!f) { perror(path); exit(2); }
        fputs("{\"format\": \"ockpt-conformance-output/1\", \"reader\": \"ockpt_c_reader\", \"keys\": [", f);
    }
    for (size_t i = 0; i < db.n; i++) {
        Entry *e = &db.e[i];
        if (!g_out) {
            fwrite(e->key, 1, e->klen, f);
            printf("\t%llu\t%s\n", (unsigned long long)e->vlen, e->val ? "inline" : e->file + strlen(db.dir) + 1);
            continue;
        }
        fprintf(f, "%s\n {\"key_hex\": \"", i ? "," : "");
        for (size_t k = 0; k < e->klen; k++) fprintf(f, "%02x", e->key[k]);
        fprintf(f, "\", \"value_length\": %llu}", (unsigned long long)e->vlen);
    }
    if (g_out) { fputs("\n]}\n", f); fclose(f); }
    return 0;
}

int main(int argc, char **argv) {
    const char *kind = "pytree";
    int a = 1;
    if (argc == 3 && !strcmp(argv[1], "--list")) return run_ocdbt(argv[2]);
    if (argc > 2 && !strcmp(argv[1], "--kind")) { kind = argv[2]; a = 3; }
    if (argc - a != 2) {
        fprintf(stderr, "usage: %s [--kind pytree|ocdbt] CHECKPOINT OUT\n       %s --list DATABASE\n", argv[0], argv[0]);
        return 2;
    }
    g_out = argv[a + 1];
    mkdir(g_out, 0777);
    if (!strcmp(kind, "ocdbt")) return run_ocdbt(argv[a]);
    if (strcmp(kind, "pytree")) unsupported("kind %s", kind);
    if (!is_dir(argv[a])) die("LOAD-050", "%s: not a directory", argv[a]);
    const char *base = strrchr(argv[a], '/');
    while (base && !base[1] && base > argv[a]) { /* a trailing "/" */
        const char *q = base - 1;
        while (q > argv[a] && *q != '/') q--;
        base = q;
    }
    if (strstr(base ? base : argv[a], ".orbax-checkpoint-tmp"))
        die("LAYOUT-001", "%s: a temporary name (an unfinished save)", argv[a]);
    return run_pytree(argv[a]);
}
