#define _GNU_SOURCE /* memmem */
#include "yaml/yaml.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <libfyaml.h>

/* YAML streams are Unicode; libfyaml 0.7.12 also spins forever on some invalid UTF-8
 * inside a directive line ("%\xdb\xfe"), so text is checked before it gets there.
 * Returns the 1-based line of the first bad byte, or 0 when the text is clean. */
static int bad_text_line(const unsigned char *t, size_t len, unsigned *byte)
{
    int line = 1;
    for (size_t i = 0; i < len;) {
        unsigned c = t[i];
        if (c == '\n') {
            line++;
            i++;
            continue;
        }
        if (c < 0x80) {
            if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f) {
                *byte = c;
                return line;
            }
            i++;
            continue;
        }
        size_t n;
        unsigned lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf)
            n = 1;
        else if (c >= 0xe0 && c <= 0xef) {
            n = 2;
            lo = c == 0xe0 ? 0xa0 : 0x80;
            hi = c == 0xed ? 0x9f : 0xbf;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3;
            lo = c == 0xf0 ? 0x90 : 0x80;
            hi = c == 0xf4 ? 0x8f : 0xbf;
        } else {
            *byte = c;
            return line;
        }
        if (i + n >= len) {
            *byte = c;
            return line;
        }
        for (size_t j = 1; j <= n; j++) {
            unsigned d = t[i + j];
            if (d < (j == 1 ? lo : 0x80) || d > (j == 1 ? hi : 0xbf)) {
                *byte = d;
                return line;
            }
        }
        i += n + 1;
    }
    return 0;
}

/* The line of the first explicit key ("? key"), or 0. No device plugin config needs
 * complex keys, and libfyaml 0.7.12 frees memory twice on some of them, so they are
 * refused before the parser sees them. A '?' counts when it starts a line (after
 * indentation and "- " markers) or follows '{', '[' or ',', and is followed by a blank. */
static int explicit_key_line(const char *t, size_t len)
{
    int line = 1;
    bool key_position = true;
    for (size_t i = 0; i < len; i++) {
        char c = t[i];
        if (c == '\n') {
            line++;
            key_position = true;
            continue;
        }
        if (c == '?' && key_position &&
            (i + 1 == len || t[i + 1] == ' ' || t[i + 1] == '\t' || t[i + 1] == '\n' ||
             t[i + 1] == '\r'))
            return line;
        if (c == '{' || c == '[' || c == ',')
            key_position = true;
        else if (c == '-' && key_position && (i + 1 == len || t[i + 1] == ' '))
            key_position = true;
        else if (c != ' ' && c != '\t')
            key_position = false;
    }
    return 0;
}

/* libfyaml's diagnostics, kept instead of printed: the first error with its place. */
struct diag_capture {
    char first[200];
    bool is_error;
};

static void diag_output(struct fy_diag *diag, void *user, const char *buf, size_t len)
{
    (void)diag;
    struct diag_capture *capture = user;
    /* A diagnostic starts with its place; the pieces that follow it echo the source line,
     * whose text (say "error:") says nothing about the diagnostic. */
    if (len < 8 || memcmp(buf, "<memory-", 8) != 0)
        return;
    /* Keep the first error; a warning only until an error comes. */
    if (capture->first[0] != '\0' && (capture->is_error || memmem(buf, len, "error:", 6) == NULL))
        return;
    capture->is_error = memmem(buf, len, "error:", 6) != NULL;
    size_t n = len < sizeof capture->first - 1 ? len : sizeof capture->first - 1;
    memcpy(capture->first, buf, n);
    capture->first[n] = '\0';
    char *nl = strchr(capture->first, '\n');
    if (nl != NULL)
        *nl = '\0';
}

int vgpu_yaml_load(const char *text, size_t len, bool allow_duplicate_keys,
                   struct fy_document **out, struct vg_err *err)
{
    *out = NULL;
    unsigned byte = 0;
    int line = bad_text_line((const unsigned char *)text, len, &byte);
    if (line > 0)
        return vg_err_set(err, -EINVAL,
                          "%d: byte 0x%02x: not UTF-8 text without control characters", line, byte);
    line = explicit_key_line(text, len);
    if (line > 0)
        return vg_err_set(err, -EINVAL, "%d: explicit keys ('? key') are not supported", line);

    struct diag_capture capture = {.is_error = false};
    struct fy_diag_cfg diag_cfg;
    fy_diag_cfg_default(&diag_cfg);
    diag_cfg.fp = NULL;
    diag_cfg.output_fn = diag_output;
    diag_cfg.user = &capture;
    diag_cfg.level = FYET_ERROR;
    diag_cfg.colorize = false;
    diag_cfg.show_source = false;
    diag_cfg.show_type = false;
    diag_cfg.show_module = false;
    diag_cfg.show_position = true;
    struct fy_diag *diag = fy_diag_create(&diag_cfg);
    if (diag == NULL)
        return vg_err_set(err, -ENOMEM, "cannot create a YAML diagnostic object");
    struct fy_parse_cfg parse_cfg = {
        .flags = FYPCF_DEFAULT_VERSION_AUTO | FYPCF_DISABLE_RECYCLING | FYPCF_QUIET |
                 (allow_duplicate_keys ? FYPCF_ALLOW_DUPLICATE_KEYS : 0),
        .diag = diag,
    };
    struct fy_document *doc = fy_document_build_from_string(&parse_cfg, text, len);
    fy_diag_destroy(diag);
    if (doc == NULL) {
        /* libfyaml names in-memory input "<memory-@...>:LINE:COLUMN: ..."; keep the rest. */
        const char *msg = capture.first;
        if (strncmp(msg, "<memory-", 8) == 0 && strstr(msg, ">:") != NULL)
            msg = strstr(msg, ">:") + 2;
        return vg_err_set(err, -EINVAL, "%s", msg[0] != '\0' ? msg : "1: not a YAML document");
    }
    *out = doc;
    return 0;
}

void vgpu_yaml_docp(struct fy_document **doc)
{
    if (*doc != NULL)
        fy_document_destroy(*doc);
    *doc = NULL;
}
