/* Loading YAML text with libfyaml for vgpu's configuration files (the device plugin's
 * config, kubeconfig), safely: libfyaml 0.7.12 hangs on some invalid UTF-8 inside a
 * directive line and frees memory twice on some explicit ("? key") complex keys, so
 * such text is refused with a clear message before the parser sees it. No vgpu config
 * needs either. Syntax errors come back as "LINE:COLUMN: error: message" in err, for the
 * caller to prefix with its file name; diagnostics are never printed. */
#ifndef VGPU_YAML_YAML_H
#define VGPU_YAML_YAML_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

struct fy_document;

/* Parses text[len] into *out (the caller frees it with fy_document_destroy). Refusals:
 * -EINVAL with "LINE: byte 0xNN: not UTF-8 text without control characters",
 * "LINE: explicit keys ('? key') are not supported", or libfyaml's first error
 * ("LINE:COLUMN: error: ..."; an empty message when libfyaml gave none). Duplicate keys
 * are left for the caller to refuse when allow_duplicate_keys is set. */
int vgpu_yaml_load(const char *text, size_t len, bool allow_duplicate_keys,
                   struct fy_document **out, struct vg_err *err);

/* fy_document_destroy(*doc) at scope exit: `VG_AUTO_YAML_DOC struct fy_document *doc = NULL;`
 * (see base/auto.h). */
void vgpu_yaml_docp(struct fy_document **doc);
#define VG_AUTO_YAML_DOC __attribute__((cleanup(vgpu_yaml_docp)))

#endif
