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
 *
 * Every byte of a checkpoint is untrusted (spec/limits.md): each length, count and offset read
 * from a file is checked against what is left of its buffer or the file's real size before it
 * is used or allocated, products of sizes are checked for overflow, text is parsed from
 * length-bounded buffers (never with a C string function that looks for a NUL the file need
 * not have), and only regular files inside the checkpoint are opened. build.py --sanitize
 * builds it with AddressSanitizer and UndefinedBehaviorSanitizer to check that it holds
 * (conformance/test_c_reader_hostile.py).
 */
#define _XOPEN_SOURCE 700 /* POSIX 2008 with realpath */
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

/* In a sanitizer build: the reader exits without freeing what it read (the process ends right
 * after), so leak reports would only be noise. ASAN_OPTIONS still overrides this. */
#if defined(__SANITIZE_ADDRESS__)
#define OCKPT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OCKPT_ASAN 1
#endif
#endif
#ifdef OCKPT_ASAN
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=0"; }
#endif

/* ---- limits (spec/limits.md §2; where this reader's own is lower: unsupported) ---- */
#define MAX_MANIFEST_FILE ((uint64_t)1 << 26) /* stored bytes of a manifest (OCDBT-006) */
#define MAX_NODE ((uint64_t)1 << 30)          /* decoded bytes of a manifest or node (OCDBT-006) */
#define MAX_KEY 65535u                        /* bytes of a key or data file path (OCDBT-008) */
#define MAX_DOC ((uint64_t)1 << 30)           /* bytes of a JSON document (JSON-003) */
#define MAX_ZARRAY ((uint64_t)1 << 24)        /* bytes of a .zarray (JSON-003) */
#define MAX_ARRAY ((uint64_t)1 << 40)         /* bytes of an array (ZARR-005) */
#define MAX_CHUNK ((uint64_t)1 << 34)         /* decoded bytes of a chunk (ZARR-005) */
#define MAX_GRID ((uint64_t)1 << 24)          /* chunks of an array's grid (ZARR-005) */
#define MAX_BTREE_HEIGHT 64                   /* (OCDBT-040) */
/* this reader's own: it holds a value, an array or a chunk whole in memory, and every key */
#define OWN_MAX_READ ((uint64_t)1 << 31)      /* bytes of one value or file read */
#define OWN_MAX_ARRAY ((uint64_t)1 << 32)     /* bytes of an array or a chunk */
#define OWN_MAX_KEY_BYTES ((uint64_t)1 << 30) /* bytes of all keys of a database */
#define OWN_MAX_ENTRIES ((size_t)1 << 26)     /* keys of a database */

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
    json_str(f, msg, strlen(msg)); /* bytes from the checkpoint (paths, names): kept UTF-8 */
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
static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) unsupported("out of memory (%zu bytes)", n);
    return p;
}
/* `n` items of `size` bytes, the product checked for overflow */
static void *xmalloc_n(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) unsupported("out of memory (%zu x %zu bytes)", n, size);
    return xmalloc(n * size);
}
static char *cat(const char *a, const char *b, size_t bn) {
    size_t an = strlen(a);
    char *s = xmalloc(an + bn + 1);
    memcpy(s, a, an); memcpy(s + an, b, bn); s[an + bn] = 0;
    return s;
}
/* *out = a * b, unless that exceeds `max` (no overflow: checked by division first) */
static int mul_within(uint64_t a, uint64_t b, uint64_t max, uint64_t *out) {
    if (b && a > max / b) return 0;
    *out = a * b;
    return 1;
}

/* ---- files ---- */
/* Only regular files inside the checkpoint are read (spec/directories.md §2.2): a name in a
 * checkpoint may be a FIFO (an open() for reading would wait for a writer for ever), a device,
 * a directory, or a symbolic link leading out of the checkpoint (PATH-004, PATH-005). */
static char *g_root; /* the real path of the directory read (NULL: not resolved) */

static const char *file_kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device" : "not a regular file";
}

/* the real path of `path` if it lies inside g_root (NULL: nothing there) */
static char *resolve_inside(const char *path, const char *rule) {
    char *real = realpath(path, NULL);
    if (!real) {
        if (errno == ENOENT || errno == ENOTDIR) return NULL;
        if (errno == ELOOP) die("PATH-005", "%s: a symbolic link loop", path);
        die(rule, "%s: %s", path, strerror(errno));
    }
    size_t rn = g_root ? strlen(g_root) : 0;
    if (rn > 1 && (strncmp(real, g_root, rn) || (real[rn] && real[rn] != '/')))
        die("PATH-004", "%s: a symbolic link leading out of the checkpoint", path);
    return real;
}

/* a descriptor of the regular file at `path` and its size; -1 if nothing is there */
static int open_regular(const char *path, uint64_t *size, const char *rule) {
    char *real = resolve_inside(path, rule);
    if (!real) return -1;
    /* O_NONBLOCK: a FIFO opens at once (refused below) instead of waiting for a writer;
     * O_NOFOLLOW: the name resolved above is not swapped for a link in between */
    int fd = open(real, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    free(real);
    if (fd < 0) {
        if (errno == ENOENT) return -1;
        if (errno == ELOOP || errno == ENXIO) die("PATH-005", "%s: not a regular file", path);
        die(rule, "%s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st)) die(rule, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) die("PATH-005", "%s: %s, not a regular file", path, file_kind(st.st_mode));
    *size = (uint64_t)st.st_size;
    return fd;
}

/* The bytes [off, off+len) of the open file `fd` of `size` bytes (closed after). The range is
 * checked against the file's real size before anything is allocated: no length written in a
 * checkpoint makes the reader allocate more than the file holds. */
static uint8_t *read_fd(int fd, const char *path, uint64_t size, uint64_t off, uint64_t len,
                        size_t *n, const char *rule) {
    if (off > size || len > size - off)
        die(rule, "%s: range %llu+%llu lies past its end (%llu bytes)", path,
            (unsigned long long)off, (unsigned long long)len, (unsigned long long)size);
    if (len > OWN_MAX_READ) unsupported("%s: a value of %llu bytes", path, (unsigned long long)len);
    uint8_t *buf = xmalloc((size_t)len);
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, buf + got, (size_t)len - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) die(rule, "%s: read failed", path); /* shrunk while read */
        got += (size_t)r;
    }
    close(fd);
    *n = (size_t)len;
    return buf;
}
/* the bytes [off, off+len) of a file (NULL: absent) */
static uint8_t *read_range(const char *path, uint64_t off, uint64_t len, size_t *n, const char *rule) {
    uint64_t size;
    int fd = open_regular(path, &size, rule);
    return fd < 0 ? NULL : read_fd(fd, path, size, off, len, n, rule);
}
/* a whole file (NULL: absent), refused with `max_rule` when larger than `max` bytes */
static uint8_t *read_whole(const char *path, uint64_t max, const char *max_rule, size_t *n, const char *rule) {
    uint64_t size;
    int fd = open_regular(path, &size, rule);
    if (fd < 0) return NULL;
    if (size > max) die(max_rule, "%s: %llu bytes, more than %llu", path, (unsigned long long)size, (unsigned long long)max);
    return read_fd(fd, path, size, 0, size, n, rule);
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
    if (!ds || ZSTD_isError(ZSTD_initDStream(ds))) unsupported("out of memory (zstd)");
    size_t cap = 1 << 16, len = 0;
    uint8_t *out = xmalloc(cap);
    ZSTD_inBuffer in = {src, n, 0};
    for (;;) {
        if (len == cap) {
            if (cap >= bound + 1) die(rule, "%s: decodes to more than %zu bytes", what, bound);
            cap = cap * 2 > bound + 1 ? bound + 1 : cap * 2;
            out = xrealloc(out, cap);
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
    uint64_t *v = xmalloc_n(n, sizeof *v);
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
    t->path = xmalloc_n(n, sizeof(char *));
    t->len = xmalloc_n(n, sizeof(size_t));
    t->base = xmalloc_n(n, sizeof(size_t));
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
typedef struct { char *dir; size_t bound; Entry *e; size_t n, cap; uint64_t key_bytes; } Db;

/* the file a reference names: `trans` + path (§6), checked (OCDBT-021, OCDBT-023) */
static char *ref_path(Db *db, const char *trans, Table *t, uint64_t id, const char *what) {
    if (id >= t->n) die("OCDBT-021", "%s: data_file_id %llu, table has %zu", what, (unsigned long long)id, t->n);
    /* a NUL would end the path early as a C string: a different file than the bytes name */
    if (memchr(t->path[id], 0, t->len[id])) die("OCDBT-023", "%s: data file path with a NUL byte", what);
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

/* §8.1 the full keys of a node's `k` entries: the node's key prefix, then the first `pre[i-1]`
 * bytes of the previous *relative* key, then the entry's suffix (read from `c`) */
static void node_keys(Db *db, Cur *c, size_t k, const uint64_t *pre, const uint64_t *suf,
                      const uint8_t *prefix, size_t plen, uint8_t **key, size_t *klen, const char *what) {
    for (size_t i = 0; i < k; i++) {
        /* bounded by the previous relative key (klen - plen), not its full key: a prefix length
         * up to the full length would copy bytes from past the end of the previous key */
        uint64_t p = i ? pre[i - 1] : 0;
        if (i && p > klen[i - 1] - plen) die("OCDBT-041", "%s: key prefix longer than the previous key", what);
        if (suf[i] > MAX_KEY || p + suf[i] > MAX_KEY) die("OCDBT-008", "%s: a key longer than %u bytes", what, MAX_KEY);
        need(c, (size_t)suf[i]);
        klen[i] = plen + (size_t)p + (size_t)suf[i];
        /* prefix compression lets a small node describe many long keys: all keys are counted */
        db->key_bytes += klen[i];
        if (db->key_bytes > OWN_MAX_KEY_BYTES) unsupported("%s: keys of more than %llu bytes in all", what, (unsigned long long)OWN_MAX_KEY_BYTES);
        key[i] = xmalloc(klen[i]);
        memcpy(key[i], prefix, plen);
        if (p) memcpy(key[i] + plen, key[i - 1] + plen, (size_t)p);
        memcpy(key[i] + plen + p, c->p + c->pos, (size_t)suf[i]);
        c->pos += (size_t)suf[i];
        if (i && keycmp(key[i], klen[i], key[i - 1], klen[i - 1]) <= 0) die("OCDBT-041", "%s: keys out of order", what);
    }
}

/* §8.2 the entries of a leaf, appended to the database in key order */
static void leaf_entries(Db *db, Cur *c, size_t k, uint8_t **key, size_t *klen, const char *trans, Table *t, const char *what) {
    uint64_t *vlen = varints(c, k);
    uint8_t *kind = xmalloc(k);
    size_t nind = 0;
    for (size_t i = 0; i < k; i++) {
        kind[i] = u8(c);
        if (kind[i] > 1) die("OCDBT-043", "%s: value_kind %d", what, kind[i]);
        nind += kind[i];
    }
    uint64_t *fid = varints(c, nind), *foff = varints(c, nind);
    for (size_t i = 0, j = 0; i < k; i++) {
        if (db->n == db->cap) {
            if (db->n >= OWN_MAX_ENTRIES) unsupported("a database of more than %zu keys", OWN_MAX_ENTRIES);
            db->cap = db->cap ? db->cap * 2 : 256;
            db->e = xrealloc(db->e, db->cap * sizeof(Entry));
        }
        Entry *e = &db->e[db->n];
        if (db->n && keycmp(key[i], klen[i], db->e[db->n - 1].key, db->e[db->n - 1].klen) <= 0)
            die("OCDBT-044", "%s: key outside its subtree's interval", what);
        e->key = key[i]; e->klen = klen[i]; e->vlen = vlen[i]; e->val = NULL; e->file = NULL;
        if (kind[i]) { /* out of line: checked against the file's size when read */
            e->file = ref_path(db, trans, t, fid[j], "leaf entry");
            e->off = foff[j++];
        } else {
            need(c, (size_t)vlen[i]);
            e->val = xmalloc((size_t)vlen[i]);
            memcpy(e->val, c->p + c->pos, (size_t)vlen[i]);
            c->pos += (size_t)vlen[i];
        }
        db->n++;
    }
    free(vlen); free(kind); free(fid); free(foff);
}

static void node(Db *db, const char *trans, Table *pt, uint64_t id, uint64_t off, uint64_t len,
                 int height, const uint8_t *prefix, size_t plen, int depth) {
    char what[64];
    snprintf(what, sizeof what, "B+tree node (height %d)", height);
    if (depth > MAX_BTREE_HEIGHT) die("OCDBT-040", "B+tree deeper than %d", MAX_BTREE_HEIGHT);
    char *file = ref_path(db, trans, pt, id, what);
    size_t raw_n, n;
    uint8_t *raw = read_range(file, off, len, &raw_n, "OCDBT-022");
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
    uint8_t **key = xmalloc_n(k, sizeof *key);
    size_t *klen = xmalloc_n(k, sizeof *klen);
    node_keys(db, &c, k, pre, suf, prefix, plen, key, klen, what);
    if (height == 0) {
        leaf_entries(db, &c, k, key, klen, mytrans, &t, what);
        if (c.pos != c.n) die("OCDBT-007", "%s: %zu bytes left over", what, c.n - c.pos);
    } else { /* §8.3 interior entries: read the columns, then descend in key order */
        for (size_t i = 0; i < k; i++)
            if (scp[i] > klen[i] - plen) die("OCDBT-042", "%s: subtree_common_prefix_length too long", what);
        uint64_t *fid = varints(&c, k), *foff = varints(&c, k), *flen = varints(&c, k);
        free(varints(&c, k)); free(varints(&c, k)); free(varints(&c, k)); /* statistics */
        if (c.pos != c.n) die("OCDBT-007", "%s: %zu bytes left over", what, c.n - c.pos);
        for (size_t i = 0; i < k; i++) /* child prefix: ours + the first bytes of its key */
            node(db, mytrans, &t, fid[i], foff[i], flen[i], height - 1, key[i], plen + (size_t)scp[i], depth + 1);
        free(fid); free(foff); free(flen);
    }
    free(pre); free(suf); free(scp); free(key); free(klen); free(body); free(mytrans);
}

/* §5: open the database at `dir` (manifest kind 0) and collect its latest generation */
static int db_open(Db *db, const char *dir) {
    memset(db, 0, sizeof *db);
    db->dir = cat(dir, "", 0);
    char *mpath = cat(dir, "/manifest.ocdbt", 15);
    size_t raw_n, n;
    uint8_t *raw = read_whole(mpath, MAX_MANIFEST_FILE, "OCDBT-006", &raw_n, "OCDBT-050");
    free(mpath);
    if (!raw) return 0;
    uint8_t *body = envelope(raw, raw_n, MAGIC_MANIFEST, (size_t)MAX_NODE, &n, "manifest");
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
    /* §5.1: the bound of a decoded node, at most 1 GiB (both maxima below 2^30: no overflow) */
    uint64_t b = MAX_NODE;
    if (node_max && node_max < b && inline_max < b)
        b = 2 * node_max + 4 * inline_max + ((uint64_t)1024 << arity) + ((uint64_t)1 << 20);
    db->bound = (size_t)(b < MAX_NODE ? b : MAX_NODE);
    Table t;
    table(&c, &t);
    /* §7.1 inline versions: the last is the latest generation */
    size_t nv = count(&c, varint(&c), 15);
    if (!nv) die("OCDBT-031", "manifest: no inline version");
    uint64_t *gen = varints(&c, nv);
    uint8_t *height = xmalloc(nv);
    for (size_t i = 0; i < nv; i++) height[i] = u8(&c);
    if (height[nv - 1] > MAX_BTREE_HEIGHT) die("OCDBT-040", "manifest: B+tree of height %d", height[nv - 1]);
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

/* the value of `key` (NULL: absent), refused (`max_rule`) above `max` bytes before it is read */
static uint8_t *db_get(Db *db, const char *key, uint64_t max, const char *max_rule, size_t *n) {
    size_t lo = 0, hi = db->n, kl = strlen(key);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int r = keycmp(db->e[mid].key, db->e[mid].klen, (const uint8_t *)key, kl);
        if (!r) {
            Entry *e = &db->e[mid];
            if (e->vlen > max) die(max_rule, "%s: %llu bytes, more than %llu", key, (unsigned long long)e->vlen, (unsigned long long)max);
            if (e->val) {
                uint8_t *v = xmalloc((size_t)e->vlen);
                memcpy(v, e->val, (size_t)e->vlen);
                *n = (size_t)e->vlen;
                return v;
            }
            uint8_t *v = read_range(e->file, e->off, e->vlen, n, "OCDBT-022");
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
        s->dbs = xrealloc(s->dbs, (s->ndb + 1) * sizeof(Db));
        if (!db_open(&s->dbs[s->ndb], d)) die("OCDBT-050", "%s: no manifest.ocdbt", d);
        s->ndb++;
    }
}

/* the value of `key` in the store (NULL: absent), at most `max` bytes (else `max_rule`) */
static uint8_t *store_get(Store *s, const char *key, uint64_t max, const char *max_rule, size_t *n) {
    for (size_t i = 0; i < s->ndb; i++) {
        uint8_t *v = db_get(&s->dbs[i], key, max, max_rule, n);
        if (v) return v;
    }
    if (s->ndb) return NULL;
    for (const char *q = key; (q = strstr(q, "..")); q += 2) /* no ".." segment (PATH-003) */
        if ((q == key || q[-1] == '/') && (q[2] == '/' || !q[2])) die("PATH-003", "key '%s' leaves the item", key);
    char *path = cat(s->item, "/", 1), *p2 = cat(path, key, strlen(key));
    uint8_t *v = read_whole(p2, max, max_rule, n, "LOAD-041");
    free(path); free(p2);
    return v;
}

/* ---- UTF-8 (RFC 3629): JSON documents must be UTF-8; output files must stay UTF-8 ---- */
/* the length of the well-formed UTF-8 sequence at `p` (of `n` bytes left); 0: ill-formed
 * (overlong forms, surrogates and code points above U+10FFFF are ill-formed too) */
static size_t utf8_len(const uint8_t *p, size_t n) {
    uint8_t b = p[0];
    if (b < 0x80) return 1;
    size_t k = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (!k || n < k) return 0;
    uint8_t lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (b == 0xE0) lo = 0xA0;
    else if (b == 0xED) hi = 0x9F; /* not a surrogate */
    else if (b == 0xF0) lo = 0x90;
    else if (b == 0xF4) hi = 0x8F;
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return k;
}

/* ---- a small JSON parser (RFC 8259) ---- */
typedef struct J J;
struct J { char t; char *s; size_t sn; double num; int isint; long long i; J **v; char **k; size_t n; };
/* the text being parsed: [p, end), not NUL-terminated (the file's bytes as read) */
typedef struct { const char *p, *end; const char *what; } JP;

static void jws(JP *j) { while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++; }
static void jbad(JP *j) { die("JSON-001", "%s: not valid JSON", j->what); }
static int jdigit(JP *j, const char *q) { return q < j->end && *q >= '0' && *q <= '9'; }
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
/* the bytes of the string starting at j->p (after its opening quote) up to its closing quote:
 * the decoded string is never longer (an escape decodes to fewer bytes than it takes) */
static size_t jstring_span(JP *j) {
    size_t i = 0, left = (size_t)(j->end - j->p);
    while (i < left && j->p[i] != '"') i += j->p[i] == '\\' ? 2 : 1;
    if (i >= left) jbad(j); /* no closing quote */
    return i;
}
static char *jstring(JP *j, size_t *len) {
    j->p++; /* opening quote */
    char *out = xmalloc(jstring_span(j) + 1), *o = out;
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
            jutf8(&o, cp); /* a lone surrogate is kept as its 3-byte form (json_str writes it back as \uXXXX) */
        } else if (map && (map - "\"\"\\\\//b\bf\fn\nr\rt\t") % 2 == 0) *o++ = map[1];
        else jbad(j);
    }
    *o = 0;
    *len = (size_t)(o - out);
    return out;
}
/* A number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? checked here, within the
 * buffer. strtod/strtoll on the buffer itself would read past its end (no NUL after the last
 * digit of a file) and take more than JSON (hexadecimal, inf, nan, leading zeros): they get a
 * NUL-terminated copy of exactly the number's bytes. */
static void jnumber(JP *j, J *v) {
    const char *q = j->p;
    int isint = 1;
    if (q < j->end && *q == '-') q++;
    if (q < j->end && *q == '0') q++;
    else if (jdigit(j, q) && *q != '0') while (jdigit(j, q)) q++;
    else jbad(j);
    if (q < j->end && *q == '.') {
        isint = 0;
        if (!jdigit(j, ++q)) jbad(j);
        while (jdigit(j, q)) q++;
    }
    if (q < j->end && (*q == 'e' || *q == 'E')) {
        isint = 0;
        q++;
        if (q < j->end && (*q == '+' || *q == '-')) q++;
        if (!jdigit(j, q)) jbad(j);
        while (jdigit(j, q)) q++;
    }
    char *copy = cat("", j->p, (size_t)(q - j->p));
    v->t = 'd';
    v->num = strtod(copy, NULL);
    v->isint = isint;
    v->i = isint ? strtoll(copy, NULL, 10) : 0; /* saturates at LLONG_MIN/MAX: beyond every limit */
    free(copy);
    j->p = q;
}
/* the members of an object or the elements of an array, after its opening bracket */
static void jcontainer(JP *j, J *v, int depth);
static J *jvalue(JP *j, int depth) {
    if (depth > 128) jbad(j);
    jws(j);
    if (j->p >= j->end) jbad(j);
    J *v = calloc(1, sizeof(J));
    if (!v) unsupported("out of memory");
    char ch = *j->p;
    if (ch == '{' || ch == '[') { v->t = ch; j->p++; jcontainer(j, v, depth); return v; }
    if (ch == '"') { v->t = 's'; v->s = jstring(j, &v->sn); return v; }
    static const char *lit[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(lit[i]);
        if ((size_t)(j->end - j->p) >= n && !memcmp(j->p, lit[i], n)) {
            v->t = "tfn"[i];
            j->p += n;
            return v;
        }
    }
    jnumber(j, v);
    return v;
}
static void jcontainer(JP *j, J *v, int depth) {
    char close = v->t == '{' ? '}' : ']';
    size_t cap = 0;
    jws(j);
    if (j->p < j->end && *j->p == close) { j->p++; return; }
    for (;;) {
        if (v->n == cap) { /* grown by doubling: a long array costs linear time */
            cap = cap ? cap * 2 : 4;
            v->v = xrealloc(v->v, cap * sizeof(J *));
            if (v->t == '{') v->k = xrealloc(v->k, cap * sizeof(char *));
        }
        if (v->t == '{') {
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
        if (j->p < j->end && *j->p == close) { j->p++; return; }
        jbad(j);
    }
}
static J *jparse(const uint8_t *p, size_t n, const char *what) {
    for (size_t i = 0; i < n;) { /* RFC 8259 §8.1: JSON text is UTF-8 */
        size_t k = utf8_len(p + i, n - i);
        if (!k) die("JSON-001", "%s: not UTF-8 (byte %zu)", what, i);
        i += k;
    }
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
/* `s` as a JSON string. The bytes may come from the checkpoint (names, paths in messages) or
 * be cut by a message's length limit: output stays UTF-8, a lone surrogate decoded from a
 * \u escape is written back as that escape, any other ill-formed byte as U+FFFD. */
static void json_str(FILE *f, const char *s, size_t n) {
    const uint8_t *u = (const uint8_t *)s;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        uint8_t ch = u[i];
        size_t k = utf8_len(u + i, n - i);
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else if (k) fwrite(u + i, 1, k, f);
        else if (ch == 0xED && n - i >= 3 && u[i + 1] >= 0xA0 && u[i + 1] <= 0xBF && u[i + 2] >= 0x80 && u[i + 2] <= 0xBF) {
            fprintf(f, "\\u%04x", 0xD000u | (u[i + 1] & 0x3Fu) << 6 | (u[i + 2] & 0x3Fu));
            k = 3;
        } else fputs("\\ufffd", f);
        i += k ? k : 1;
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
/* append to the .npy header `hdr` (`h` bytes of `cap` used); refused past its end */
static void hdr_add(char *hdr, int *h, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(hdr + *h, cap - (size_t)*h, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= cap - (size_t)*h) unsupported("a .npy header over %zu bytes", cap);
    *h += k;
}
static void write_npy(const char *rel, const char *descr, const long long *shape, int rank, const uint8_t *data, size_t n) {
    /* 32 dimensions of up to 20 digits fit; hdr_add checks anyway (a snprintf past the end of
     * the buffer would be given a size that wrapped around) */
    char path[4096], hdr[1024];
    int h = 0;
    snprintf(path, sizeof path, "%s/%s", g_out, rel);
    hdr_add(hdr, &h, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int d = 0; d < rank; d++) hdr_add(hdr, &h, sizeof hdr, "%lld%s", shape[d], rank == 1 ? "," : d + 1 < rank ? ", " : "");
    hdr_add(hdr, &h, sizeof hdr, "), }");
    while ((10 + h + 1) % 64) hdr_add(hdr, &h, sizeof hdr, " ");
    hdr_add(hdr, &h, sizeof hdr, "\n");
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
/* The shape, chunk shape and chunk grid of an array (ZARR-005), with every product of sizes
 * checked against its limit before anything is allocated (a product that wrapped around in
 * 64 bits would let a huge array pass as a small one). Returns the array's bytes. */
static size_t array_sizes(const char *key, J *jshape, J *jchunks, size_t size, long long *shape,
                          long long *chunks, long long *grid, size_t *cbytes) {
    int r = (int)jshape->n, empty = 0;
    for (int d = 0; d < r; d++) {
        J *a = jshape->v[d], *b = jchunks->v[d];
        if (a->t != 'd' || !a->isint || a->i < 0 || b->t != 'd' || !b->isint || b->i < 1)
            die("ZARR-005", "%s: shape and chunks must be integers >= 0 and >= 1", key);
        shape[d] = a->i; chunks[d] = b->i;
        grid[d] = shape[d] / chunks[d] + (shape[d] % chunks[d] != 0); /* no shape + chunks - 1 */
        empty |= shape[d] == 0;
    }
    uint64_t total = size, cb = size, nchunks = 1;
    for (int d = 0; d < r; d++) {
        if (!mul_within(cb, (uint64_t)chunks[d], MAX_CHUNK, &cb))
            die("ZARR-005", "%s: chunks of more than %llu bytes", key, (unsigned long long)MAX_CHUNK);
        if (empty) continue; /* zero bytes and no chunk, whatever the other dimensions */
        if (!mul_within(total, (uint64_t)shape[d], MAX_ARRAY, &total))
            die("ZARR-005", "%s: more than %llu bytes", key, (unsigned long long)MAX_ARRAY);
        if (!mul_within(nchunks, (uint64_t)grid[d], MAX_GRID, &nchunks))
            die("ZARR-005", "%s: more than %llu chunks", key, (unsigned long long)MAX_GRID);
    }
    if (empty) total = 0;
    if (total > OWN_MAX_ARRAY || cb > OWN_MAX_ARRAY) unsupported("%s: more than 4 GiB", key);
    *cbytes = (size_t)cb;
    return (size_t)total;
}

/* the decoded bytes of chunk `ck` (`cbytes` of them); an absent chunk is the fill value */
static uint8_t *read_chunk(Store *s, const char *ck, J *z, int zstd, size_t cbytes, int must_store, const char *key) {
    size_t vn, cn;
    uint8_t *v = store_get(s, ck, UINT64_MAX, NULL, &vn), *chunk;
    if (!v) {
        if (must_store) die("LOAD-041", "chunk %s is missing", ck);
        J *fill = jget(z, "fill_value");
        if (fill->t != 'n' && !(fill->t == 'd' && fill->num == 0)) unsupported("%s: absent chunk with a non-zero fill value", key);
        chunk = calloc(1, cbytes ? cbytes : 1); /* null or 0: zero */
        if (!chunk) unsupported("out of memory (%zu bytes)", cbytes);
    } else if (zstd) {
        chunk = unzstd(v, vn, cbytes, &cn, "ZARR-003", ck);
        if (cn != cbytes) die("ZARR-003", "%s: decodes to %zu bytes, expected %zu", ck, cn, cbytes);
        free(v);
    } else {
        if (vn != cbytes) die("ZARR-003", "%s: %zu bytes, expected %zu", ck, vn, cbytes);
        chunk = v;
    }
    return chunk;
}

/* copy the part of chunk `idx` inside the array into `out`, one run along the last dimension
 * at a time; only the rows inside the array are visited (an edge chunk is cut) */
static void copy_chunk(uint8_t *out, const uint8_t *chunk, int r, const long long *shape,
                       const long long *chunks, const long long *idx, size_t size) {
    long long ext[32], local[32] = {0};
    for (int d = 0; d < r; d++) {
        long long left = shape[d] - idx[d] * chunks[d]; /* > 0: idx is inside the grid */
        ext[d] = left < chunks[d] ? left : chunks[d];
    }
    size_t run = (size_t)(r ? ext[r - 1] : 1) * size;
    for (;;) {
        size_t src = 0, dst = 0; /* in elements; below the chunk's and the array's sizes */
        for (int d = 0; d < r; d++) {
            src = src * (size_t)chunks[d] + (size_t)local[d];
            dst = dst * (size_t)shape[d] + (size_t)(idx[d] * chunks[d] + local[d]);
        }
        memcpy(out + dst * size, chunk + src * size, run);
        int d = r - 2;
        while (d >= 0 && ++local[d] == ext[d]) local[d--] = 0;
        if (d < 0) break;
    }
}

/* decode the zarr v2 array `param` of the store; writes its .npy; returns its Type */
static const Type *read_array(Store *s, const char *param, int must_store, int zarr3, long long *shape, int *rank, char *file) {
    char key[8300], pre[8200];
    array_prefix(param, s->ndb == 0, pre, sizeof pre);
    snprintf(key, sizeof key, "%s%s", pre, zarr3 ? "zarr.json" : ".zarray");
    size_t n;
    uint8_t *raw = store_get(s, key, MAX_ZARRAY, "JSON-003", &n);
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
    long long chunks[32], grid[32], idx[32] = {0};
    size_t cbytes, total = array_sizes(key, jshape, jchunks, (size_t)ty->size, shape, chunks, grid, &cbytes);
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
        uint8_t *chunk = read_chunk(s, ck, z, zstd, cbytes, must_store, key);
        copy_chunk(out, chunk, r, shape, chunks, idx, (size_t)ty->size);
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
    uint8_t *raw = read_whole(path, MAX_DOC, "JSON-003", &n, "META-001");
    if (!raw) {
        uint64_t size;
        snprintf(path, sizeof path, "%s/checkpoint", item);
        if (open_regular(path, &size, "MSGPACK-001") >= 0) unsupported("an item without _METADATA (the tree is in the msgpack file)");
        die("LOAD-050", "%s: not a pytree item (no _METADATA)", item);
    }
    J *meta = jparse(raw, n, "_METADATA"), *tree = jget(meta, "tree_metadata");
    if (!tree || tree->t != '{') die("META-001", "_METADATA: no tree_metadata object");
    J *flag = jget(meta, "store_array_data_equal_to_fill_value"), *z3 = jget(meta, "use_zarr3");
    int must_store = flag && flag->t == 't', zarr3 = z3 && z3->t == 't';
    char **names = xmalloc_n(tree->n, sizeof(char *)); /* param names, for PATH-001 */
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
                uint8_t *sraw = read_whole(path, MAX_DOC, "JSON-003", &n, "STR-001");
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
    if (argc == 3 && !strcmp(argv[1], "--list")) {
        g_root = realpath(argv[2], NULL); /* no file outside it is opened (PATH-004) */
        return run_ocdbt(argv[2]);
    }
    if (argc > 2 && !strcmp(argv[1], "--kind")) { kind = argv[2]; a = 3; }
    if (argc - a != 2) {
        fprintf(stderr, "usage: %s [--kind pytree|ocdbt] CHECKPOINT OUT\n       %s --list DATABASE\n", argv[0], argv[0]);
        return 2;
    }
    g_out = argv[a + 1];
    mkdir(g_out, 0777);
    g_root = realpath(argv[a], NULL);
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
