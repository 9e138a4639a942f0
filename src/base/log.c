#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int vg_log_max_level = VG_LOG_INFO;
bool vg_log_json = false;
int vg_log_fd = 2;

#define LINE_MAX_BYTES 2048

static const char *const level_names[] = {"error", "warn", "info", "debug"};

int vg_log_level_from_name(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (name != NULL && strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

/* Appends to a bounded buffer; once full, further appends are dropped and the line is
 * marked as cut by vg_log_format. */
struct out {
    char *buf;
    int size, len;
};

static void put(struct out *o, const char *s, int n)
{
    if (n < 0)
        n = (int)strlen(s);
    int room = o->size - o->len;
    if (n > room)
        n = room;
    if (n > 0) {
        memcpy(o->buf + o->len, s, (size_t)n);
        o->len += n;
    }
}

static void put_json_string(struct out *o, const char *s, int n)
{
    put(o, "\"", 1);
    for (int i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(o, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            put(o, esc, 6);
        } else {
            put(o, (const char *)&s[i], 1);
        }
    }
    put(o, "\"", 1);
}

static const char *basename_of(const char *path)
{
    const char *src = strstr(path, "src/");
    if (src != NULL)
        return src;
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Splits "k=v k2=\"a b\"" into pairs and writes them as JSON members. */
static void put_kv_json(struct out *o, const char *kv)
{
    const char *p = kv;
    while (*p) {
        while (*p == ' ')
            p++;
        const char *key = p;
        while (*p && *p != '=' && *p != ' ')
            p++;
        int key_len = (int)(p - key);
        if (key_len == 0)
            break;
        const char *val = p;
        int val_len = 0;
        if (*p == '=') {
            p++;
            if (*p == '"') {
                val = ++p;
                while (*p && *p != '"')
                    p++;
                val_len = (int)(p - val);
                if (*p == '"')
                    p++;
            } else {
                val = p;
                while (*p && *p != ' ')
                    p++;
                val_len = (int)(p - val);
            }
        }
        put(o, ",", 1);
        put_json_string(o, key, key_len);
        put(o, ":", 1);
        put_json_string(o, val, val_len);
    }
}

int vg_log_format(char *buf, int size, bool json, enum vg_log_level level, long long ts_ms,
                  const char *file, int line, const char *msg, const char *kv)
{
    struct out o = {buf, size - 1, 0}; /* keep one byte for the newline */
    char ts[40], where[160];
    time_t secs = (time_t)(ts_ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof ts - n, ".%03lldZ", ts_ms % 1000);
    snprintf(where, sizeof where, "%s:%d", basename_of(file), line);
    const char *lvl = level_names[(unsigned)level < 4 ? level : VG_LOG_DEBUG];
    if (json) {
        put(&o, "{\"level\":", -1);
        put_json_string(&o, lvl, (int)strlen(lvl));
        put(&o, ",\"ts\":", -1);
        put_json_string(&o, ts, (int)strlen(ts));
        put(&o, ",\"src\":", -1);
        put_json_string(&o, where, (int)strlen(where));
        put(&o, ",\"msg\":", -1);
        put_json_string(&o, msg, (int)strlen(msg));
        put_kv_json(&o, kv);
        put(&o, "}", 1);
    } else {
        put(&o, lvl, -1);
        put(&o, " ", 1);
        put(&o, ts, -1);
        put(&o, " ", 1);
        put(&o, where, -1);
        put(&o, " ", 1);
        put(&o, msg, -1);
        if (*kv) {
            put(&o, " ", 1);
            put(&o, kv, -1);
        }
    }
    buf[o.len++] = '\n';
    return o.len;
}

void vg_log_emit(enum vg_log_level level, const char *file, int line, const char *msg,
                 const char *kv_fmt, ...)
{
    char kv[LINE_MAX_BYTES / 2], buf[LINE_MAX_BYTES];
    va_list ap;
    va_start(ap, kv_fmt);
    int n = vsnprintf(kv, sizeof kv, kv_fmt, ap);
    va_end(ap);
    if (n < 0)
        kv[0] = '\0';
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long ts_ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    int len = vg_log_format(buf, sizeof buf, vg_log_json, level, ts_ms, file, line, msg, kv);
    /* One write per line; a short write to a log is not worth retrying. */
    ssize_t w = write(vg_log_fd, buf, (size_t)len);
    (void)w;
}
