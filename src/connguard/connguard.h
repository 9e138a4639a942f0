/* connguard: what every listening endpoint of vgpu keeps about its connections, so that a
 * flood of half-open or slow ones is closed in time and never starves the endpoint or the
 * process (docs/security.md, "Endpoints under connection floods").
 *
 * A guard belongs to one listener. The server tells it about each accepted socket
 * (connguard_admit), when a connection starts serving a complete request (connguard_busy),
 * when it waits for the next one (connguard_idle) and when it closes (connguard_release).
 * The guard enforces:
 *  - a head deadline: a new connection that has not delivered a complete request (TLS
 *    handshake, HTTP/2 preface, request head) within head_ms is closed;
 *  - an idle deadline: a connection between requests is closed after idle_ms;
 *  - a cap on connections, derived from RLIMIT_NOFILE (connguard_caps) so that one listener
 *    cannot take the descriptors its neighbours need;
 *  - fairness: one peer (an IP address; for a unix socket the peer's pid) holds at most
 *    max_per_peer connections; a peer at its share, or any peer when the listener is full,
 *    makes room by evicting the oldest connection that is not serving a request, taken from
 *    the peer that holds the most; when every connection is busy the newcomer is refused.
 *  - accept errors: EMFILE, ENFILE, ENOBUFS and ENOMEM pause accepting with a growing
 *    back-off (connguard_accept_failed) instead of spinning on a listening socket that
 *    stays readable.
 * The guard closes a connection with shutdown(2): the server that owns the socket sees the
 * end of the stream and frees the connection its usual way, so the guard never frees
 * anything it does not own. Sockets are known by descriptor and inode, so a descriptor
 * closed behind the guard's back (evhttp frees its connections itself) and reused is never
 * mistaken for the old connection. One thread: the event loop's. */
#ifndef VGPU_CONNGUARD_CONNGUARD_H
#define VGPU_CONNGUARD_CONNGUARD_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

struct event_base;
struct evconnlistener;
struct connguard;

#define CONNGUARD_HEAD_MS_DEFAULT 10000 /* TLS handshake + request head */
#define CONNGUARD_IDLE_MS_DEFAULT 60000 /* between two requests of one connection */

/* Why the guard closed or refused a connection (connguard_options.closed). */
enum connguard_why { CONNGUARD_TIMED_OUT, CONNGUARD_EVICTED, CONNGUARD_REFUSED };

struct connguard_options {
    const char *name;      /* the listener, in logs: "webhook", "extender", "metrics", ... */
    unsigned max_conns;    /* 0: connguard_caps(listeners, ceiling), read again as the
                              limit changes (prlimit on a running daemon) */
    unsigned listeners;    /* listeners sharing the process's descriptors; 0: 1 */
    unsigned ceiling;      /* at most this many connections; 0: no ceiling of its own */
    unsigned max_per_peer; /* 0: a quarter of the cap, at least 1 */
    unsigned head_ms;      /* 0: CONNGUARD_HEAD_MS_DEFAULT */
    unsigned idle_ms;      /* 0: CONNGUARD_IDLE_MS_DEFAULT */
    /* Optional: told of each connection the guard closes or refuses (for metrics). */
    void (*closed)(void *arg, enum connguard_why why);
    void *closed_arg;
};

/* The connection cap for each of `listeners` listeners of this process: what RLIMIT_NOFILE
 * allows once a reserve for everything else (the loop, API clients, files, logs) is set
 * aside, shared evenly, at most ceiling (0: no ceiling), at least 4. */
unsigned connguard_caps(unsigned listeners, unsigned ceiling);

/* A guard for one listener; NULL only when the loop cannot make a timer (the error says). */
struct connguard *connguard_new(struct event_base *base, const struct connguard_options *options,
                                struct vg_err *err);
void connguard_free(struct connguard *g);

/* A socket was accepted. 0: admitted (as a new connection, under the head deadline),
 * possibly after evicting another connection; -EBUSY: refused, the caller closes fd. */
int connguard_admit(struct connguard *g, int fd);
/* fd is serving a complete request: neither a deadline nor an eviction closes it. */
void connguard_busy(struct connguard *g, int fd);
/* fd waits for its next request: the idle deadline starts now. */
void connguard_idle(struct connguard *g, int fd);
/* fd is about to be closed by its owner. Unknown descriptors are ignored. */
void connguard_release(struct connguard *g, int fd);

/* An accept(2) failed with errno e. True when accepting should pause (the process is out of
 * descriptors or memory): the guard calls resume(arg) after a back-off that doubles from
 * 50 ms to 1 s while the errors go on. False for an error that concerns one peer only. */
bool connguard_accept_failed(struct connguard *g, int e, void (*resume)(void *arg), void *arg);
/* For an evconnlistener (evhttp's included): pauses and resumes it through the above. */
void connguard_watch_listener(struct connguard *g, struct evconnlistener *listener);

struct connguard_stats {
    unsigned connections;  /* held now */
    uint64_t refused;      /* refused at accept: every connection busy */
    uint64_t evicted;      /* closed to make room for another */
    uint64_t timed_out;    /* closed at the head or idle deadline */
    uint64_t accept_pause; /* accept paused for want of descriptors or memory */
};
void connguard_stats(const struct connguard *g, struct connguard_stats *out);

#endif
