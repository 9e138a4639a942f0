/* gRPC wire pieces that need no socket: message framing and its reassembly, the
 * grpc-timeout header, percent-encoding of grpc-message, and status codes and their
 * mappings from HTTP status and HTTP/2 RST_STREAM codes.
 *
 * Every function here is pure (no I/O, no clock) so the unit tests and the fuzz target
 * can drive it byte by byte. The reassembler is what the server and the client feed
 * DATA frame payloads into: it enforces the message ceiling as soon as a 5-byte prefix
 * announces a length, so an oversized message is refused before any of it is buffered. */
#ifndef VGPU_GRPC_WIRE_H
#define VGPU_GRPC_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* The gRPC default both ways: larger messages get RESOURCE_EXHAUSTED. */
#define VGRPC_MESSAGE_MAX        ((size_t)4 * 1024 * 1024)
/* Bytes in front of every message: compressed flag + 4-byte big-endian length. */
#define VGRPC_PREFIX_LEN         5
/* Longest grpc-message we keep after decoding; longer text is cut (never an error). */
#define VGRPC_STATUS_MESSAGE_MAX 1024
/* grpc-timeout: at most 8 digits and a unit, e.g. "100m" or "30S". */
#define VGRPC_TIMEOUT_TEXT_MAX   10

enum vgrpc_status_code {
    VGRPC_STATUS_OK = 0,
    VGRPC_STATUS_CANCELLED = 1,
    VGRPC_STATUS_UNKNOWN = 2,
    VGRPC_STATUS_INVALID_ARGUMENT = 3,
    VGRPC_STATUS_DEADLINE_EXCEEDED = 4,
    VGRPC_STATUS_NOT_FOUND = 5,
    VGRPC_STATUS_ALREADY_EXISTS = 6,
    VGRPC_STATUS_PERMISSION_DENIED = 7,
    VGRPC_STATUS_RESOURCE_EXHAUSTED = 8,
    VGRPC_STATUS_FAILED_PRECONDITION = 9,
    VGRPC_STATUS_ABORTED = 10,
    VGRPC_STATUS_OUT_OF_RANGE = 11,
    VGRPC_STATUS_UNIMPLEMENTED = 12,
    VGRPC_STATUS_INTERNAL = 13,
    VGRPC_STATUS_UNAVAILABLE = 14,
    VGRPC_STATUS_DATA_LOSS = 15,
    VGRPC_STATUS_UNAUTHENTICATED = 16,
};

/* "OK", "CANCELLED", ...; "UNKNOWN_CODE" outside 0..16. */
const char *vgrpc_status_name(int code);

/* The gRPC spec's mapping for a response without grpc-status (HTTP status != 200). */
enum vgrpc_status_code vgrpc_status_from_http(int http_status);

/* The gRPC spec's mapping for a stream reset by the peer (HTTP/2 error code). */
enum vgrpc_status_code vgrpc_status_from_rst(uint32_t h2_error_code);

/* Writes the 5-byte prefix for a message of len bytes (len <= UINT32_MAX). */
void vgrpc_frame_prefix(uint8_t out[VGRPC_PREFIX_LEN], size_t len);

/* Called once per complete message; data is valid only during the call (NULL when
 * len == 0). Returns VGRPC_STATUS_OK to go on, any other status to stop the reader
 * with that status. */
typedef enum vgrpc_status_code (*vgrpc_message_sink)(void *arg, const uint8_t *data, size_t len);

/* Reassembles messages from DATA payloads split anywhere. Holds at most one message. */
struct vgrpc_reader {
    size_t max;                       /* ceiling on one message's length */
    uint8_t prefix[VGRPC_PREFIX_LEN]; /* prefix bytes seen so far */
    size_t prefix_len;
    uint8_t *body; /* message being filled, owned */
    size_t body_len;
    size_t body_want;
    bool in_body;
    bool failed;                 /* sticky: further input is refused */
    unsigned long long messages; /* complete messages delivered */
};

void vgrpc_reader_init(struct vgrpc_reader *r, size_t max);
void vgrpc_reader_release(struct vgrpc_reader *r);

/* Feeds bytes; calls sink for each complete message. Returns VGRPC_STATUS_OK, or the
 * status that ends the call (message in err): UNIMPLEMENTED for a compressed message,
 * INTERNAL for a bad flag byte, RESOURCE_EXHAUSTED past the ceiling, or the sink's. */
enum vgrpc_status_code vgrpc_reader_feed(struct vgrpc_reader *r, const uint8_t *data, size_t len,
                                         vgrpc_message_sink sink, void *arg, struct vg_err *err);

/* At end of stream: INTERNAL when a message is cut short, else OK. */
enum vgrpc_status_code vgrpc_reader_finish(const struct vgrpc_reader *r, struct vg_err *err);

/* Parses a grpc-timeout value ("1S", "250m", "99999999n") into milliseconds, rounding
 * up (a non-zero timeout never becomes 0 ms); -EINVAL with a message when malformed. */
int vgrpc_timeout_parse(const char *text, uint64_t *out_ms, struct vg_err *err);

/* Formats milliseconds as a grpc-timeout value in the finest unit that fits in 8
 * digits. buf needs VGRPC_TIMEOUT_TEXT_MAX + 1 bytes. */
void vgrpc_timeout_format(uint64_t ms, char buf[VGRPC_TIMEOUT_TEXT_MAX + 1]);

/* Percent-encodes a grpc-message: bytes outside 0x20..0x7e and '%' become %XX. Returns
 * the encoded length, or -ENOSPC when out (size bytes, NUL included) is too small. */
int vgrpc_percent_encode(const char *in, size_t in_len, char *out, size_t size);

/* Decodes %XX sequences; a malformed sequence is kept as it is (the spec asks decoders
 * never to fail). Output is cut at size - 1 bytes and always NUL-terminated. Returns the
 * decoded length. */
size_t vgrpc_percent_decode(const char *in, size_t in_len, char *out, size_t size);

#endif
