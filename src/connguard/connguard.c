/* connguard (connguard.h): deadlines, caps and per-peer fairness for one listener.
 *
 * The table is a flat array of at most max_conns entries, scanned in full: listeners hold
 * hundreds of connections at most, and every scan is one pass over a few cache lines per
 * entry. A timer sweeps the table while it is not empty, twice a second: it forgets
 * connections whose descriptor no longer names the socket admitted (closed by their owner
 * without a release) and closes those past their deadline. */
#define _GNU_SOURCE /* struct ucred */
#include "connguard/connguard.h"

#include <errno.h>
#include <limits.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/str.h"

#define SWEEP_MS         500
#define BACKOFF_FIRST_MS 50
#define BACKOFF_MAX_MS   1000
#define CAP_MIN          4
#define CAP_MAX          4096

enum conn_state { CONN_NEW, CONN_IDLE, CONN_BUSY };

/* Who is at the other end: an IPv4 or IPv6 address (an IPv4-mapped one counts as IPv4),
 * or for a unix socket the connecting process. Ports do not count: one host is one peer. */
struct peer {
    uint8_t family;
    uint8_t bytes[16];
};

struct entry {
    int fd;
    dev_t dev;
    ino_t ino;
    struct peer peer;
    enum conn_state state;
    uint64_t since_ms;    /* admitted, or last made idle: the age eviction goes by */
    uint64_t deadline_ms; /* for NEW and IDLE */
};

struct connguard {
    struct event_base *base;
    char name[32];
    unsigned fixed_max, fixed_per_peer, listeners, ceiling; /* as asked */
    unsigned max_conns, max_per_peer, head_ms, idle_ms;     /* in force */
    void (*closed)(void *arg, enum connguard_why why);
    void *closed_arg;
    struct entry *entries;
    unsigned count;
    size_t size; /* entries allocated */
    struct event *sweep;
    struct event *resume_ev;
    void (*resume)(void *arg);
    void *resume_arg;
    unsigned backoff_ms;
    uint64_t last_fail_ms;
    struct connguard_stats stats;
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

unsigned connguard_caps(unsigned listeners, unsigned ceiling)
{
    struct rlimit rl;
    uint64_t limit = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        limit = (uint64_t)rl.rlim_cur;
    else if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        limit = (uint64_t)1 << 20;
    /* Descriptors the rest of the process needs: the loop's own, API clients and their
     * watches, files read while serving, logs; more of them in a larger process. */
    uint64_t reserve = 32 + limit / 8;
    uint64_t avail = limit > reserve ? limit - reserve : 0;
    uint64_t cap = avail / (listeners > 0 ? listeners : 1);
    if (ceiling > 0 && cap > ceiling)
        cap = ceiling;
    if (cap > CAP_MAX)
        cap = CAP_MAX;
    if (cap < CAP_MIN)
        cap = CAP_MIN;
    return (unsigned)cap;
}

static bool peer_of(int fd, struct peer *p)
{
    memset(p, 0, sizeof *p);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
        return false;
    if (ss.ss_family == AF_INET) {
        p->family = 4;
        memcpy(p->bytes, &((struct sockaddr_in *)&ss)->sin_addr, 4);
    } else if (ss.ss_family == AF_INET6) {
        const struct in6_addr *a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            p->family = 4;
            memcpy(p->bytes, &a->s6_addr[12], 4);
        } else {
            p->family = 6;
            memcpy(p->bytes, a, 16);
        }
    } else if (ss.ss_family == AF_UNIX) {
        struct ucred cred;
        socklen_t cl = sizeof cred;
        p->family = 1;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0)
            memcpy(p->bytes, &cred.pid, sizeof cred.pid);
    } else {
        p->family = 0xff;
    }
    return true;
}

static bool same_peer(const struct peer *a, const struct peer *b)
{
    return a->family == b->family && memcmp(a->bytes, b->bytes, sizeof a->bytes) == 0;
}

/* Whether fd still names the socket admitted as e. */
static bool entry_live(const struct entry *e)
{
    struct stat sb;
    return fstat(e->fd, &sb) == 0 && sb.st_dev == e->dev && sb.st_ino == e->ino;
}

static void entry_remove(struct connguard *g, unsigned i)
{
    g->entries[i] = g->entries[g->count - 1];
    g->count--;
}

static struct entry *find(struct connguard *g, int fd)
{
    for (unsigned i = 0; i < g->count; i++)
        if (g->entries[i].fd == fd)
            return &g->entries[i];
    return NULL;
}

static void note(struct connguard *g, enum connguard_why why)
{
    if (why == CONNGUARD_TIMED_OUT)
        g->stats.timed_out++;
    else if (why == CONNGUARD_EVICTED)
        g->stats.evicted++;
    else
        g->stats.refused++;
    if (g->closed != NULL)
        g->closed(g->closed_arg, why);
}

/* Ends connection i: its owner sees the stream end and frees it. */
static void close_entry(struct connguard *g, unsigned i, const char *why)
{
    struct entry *e = &g->entries[i];
    if (entry_live(e)) {
        vg_log(VG_LOG_DEBUG, "closing a connection", "listener=%s why=%s state=%s", g->name, why,
               e->state == CONN_NEW    ? "new"
               : e->state == CONN_IDLE ? "idle"
                                       : "busy");
        (void)shutdown(e->fd, SHUT_RDWR);
    }
    entry_remove(g, i);
}

static void forget_stale(struct connguard *g)
{
    for (unsigned i = 0; i < g->count;)
        if (!entry_live(&g->entries[i]))
            entry_remove(g, i);
        else
            i++;
}

static void arm_sweep(struct connguard *g)
{
    if (g->sweep != NULL && !evtimer_pending(g->sweep, NULL)) {
        struct timeval tv = {SWEEP_MS / 1000, (SWEEP_MS % 1000) * 1000};
        evtimer_add(g->sweep, &tv);
    }
}

static void sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct connguard *g = arg;
    forget_stale(g);
    uint64_t now = now_ms();
    for (unsigned i = 0; i < g->count;) {
        struct entry *e = &g->entries[i];
        if (e->state != CONN_BUSY && now >= e->deadline_ms) {
            note(g, CONNGUARD_TIMED_OUT);
            close_entry(g, i, e->state == CONN_NEW ? "head deadline" : "idle deadline");
        } else {
            i++;
        }
    }
    if (g->count > 0)
        arm_sweep(g);
}

/* The oldest connection not serving a request, of peer p if given, else of the peer that
 * holds the most connections (ties: the oldest connection). -1 when there is none. */
static int pick_victim(const struct connguard *g, const struct peer *p)
{
    int best = -1;
    unsigned best_held = 0;
    for (unsigned i = 0; i < g->count; i++) {
        const struct entry *e = &g->entries[i];
        if (e->state == CONN_BUSY || (p != NULL && !same_peer(&e->peer, p)))
            continue;
        unsigned held = 0;
        if (p == NULL)
            for (unsigned j = 0; j < g->count; j++)
                held += same_peer(&g->entries[j].peer, &e->peer);
        if (best < 0 || held > best_held ||
            (held == best_held && e->since_ms < g->entries[best].since_ms)) {
            best = (int)i;
            best_held = held;
        }
    }
    return best;
}

/* The caps in force: fixed ones, or what RLIMIT_NOFILE allows now. */
static void update_caps(struct connguard *g)
{
    g->max_conns = g->fixed_max > 0 ? g->fixed_max : connguard_caps(g->listeners, g->ceiling);
    g->max_per_peer = g->fixed_per_peer > 0 ? g->fixed_per_peer : g->max_conns / 4;
    if (g->max_per_peer == 0)
        g->max_per_peer = 1;
}

int connguard_admit(struct connguard *g, int fd)
{
    update_caps(g);
    struct stat sb;
    struct peer p;
    if (fstat(fd, &sb) != 0 || !peer_of(fd, &p))
        return -EBUSY; /* gone already */
    struct entry *old = find(g, fd);
    if (old != NULL) /* a descriptor closed behind our back, now reused */
        entry_remove(g, (unsigned)(old - g->entries));
    /* Room first, so that a refusal for want of memory evicts nobody; the caps below
     * bound the table, UINT_MAX is what its counter holds. */
    if (vg_array_grow(&g->entries, &g->size, (size_t)g->count + 1, sizeof *g->entries, UINT_MAX,
                      "connection table", NULL) < 0) {
        note(g, CONNGUARD_REFUSED);
        return -EBUSY;
    }
    unsigned mine = 0;
    for (unsigned i = 0; i < g->count; i++)
        mine += same_peer(&g->entries[i].peer, &p);
    if (mine >= g->max_per_peer || g->count >= g->max_conns) {
        forget_stale(g);
        mine = 0;
        for (unsigned i = 0; i < g->count; i++)
            mine += same_peer(&g->entries[i].peer, &p);
    }
    if (mine >= g->max_per_peer) {
        int v = pick_victim(g, &p);
        if (v < 0) {
            note(g, CONNGUARD_REFUSED);
            return -EBUSY;
        }
        note(g, CONNGUARD_EVICTED);
        close_entry(g, (unsigned)v, "peer at its share");
    } else if (g->count >= g->max_conns) {
        int v = pick_victim(g, NULL);
        if (v < 0) {
            note(g, CONNGUARD_REFUSED);
            return -EBUSY;
        }
        note(g, CONNGUARD_EVICTED);
        close_entry(g, (unsigned)v, "listener full");
    }
    uint64_t now = now_ms();
    g->entries[g->count++] = (struct entry){.fd = fd,
                                            .dev = sb.st_dev,
                                            .ino = sb.st_ino,
                                            .peer = p,
                                            .state = CONN_NEW,
                                            .since_ms = now,
                                            .deadline_ms = now + g->head_ms};
    arm_sweep(g);
    return 0;
}

void connguard_busy(struct connguard *g, int fd)
{
    struct entry *e = find(g, fd);
    if (e != NULL)
        e->state = CONN_BUSY;
}

void connguard_idle(struct connguard *g, int fd)
{
    struct entry *e = find(g, fd);
    if (e == NULL)
        return;
    e->state = CONN_IDLE;
    e->since_ms = now_ms();
    e->deadline_ms = e->since_ms + g->idle_ms;
    arm_sweep(g);
}

void connguard_release(struct connguard *g, int fd)
{
    struct entry *e = find(g, fd);
    if (e != NULL)
        entry_remove(g, (unsigned)(e - g->entries));
}

static void resume_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct connguard *g = arg;
    if (g->resume != NULL)
        g->resume(g->resume_arg);
}

bool connguard_accept_failed(struct connguard *g, int e, void (*resume)(void *arg), void *arg)
{
    if (e != EMFILE && e != ENFILE && e != ENOBUFS && e != ENOMEM)
        return false;
    uint64_t now = now_ms();
    /* Errors that go on double the pause; a quiet second starts it again from the bottom. */
    if (g->backoff_ms == 0 || now > g->last_fail_ms + 2u * BACKOFF_MAX_MS)
        g->backoff_ms = BACKOFF_FIRST_MS;
    else if (g->backoff_ms < BACKOFF_MAX_MS)
        g->backoff_ms = g->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : g->backoff_ms * 2;
    g->last_fail_ms = now;
    g->stats.accept_pause++;
    vg_log(VG_LOG_WARN, "cannot accept a connection; pausing", "listener=%s err=\"%s\" ms=%u",
           g->name, VG_STRERROR(e), g->backoff_ms);
    g->resume = resume;
    g->resume_arg = arg;
    struct timeval tv = {g->backoff_ms / 1000, (suseconds_t)(g->backoff_ms % 1000) * 1000};
    if (g->resume_ev == NULL || evtimer_add(g->resume_ev, &tv) != 0)
        return false; /* no way to come back: keep accepting rather than stop for good */
    return true;
}

static void listener_resume(void *arg)
{
    (void)evconnlistener_enable(arg);
}

/* An evconnlistener's error callback gets its accept callback's argument (for evhttp's,
 * the server), not ours: the guard of each watched listener is found here. */
#define WATCHED_MAX 16
static struct {
    struct evconnlistener *listener;
    struct connguard *guard;
} watched[WATCHED_MAX];

static void listener_error(struct evconnlistener *listener, void *arg)
{
    (void)arg;
    int e = EVUTIL_SOCKET_ERROR();
    for (unsigned i = 0; i < WATCHED_MAX; i++)
        if (watched[i].listener == listener) {
            if (connguard_accept_failed(watched[i].guard, e, listener_resume, listener))
                (void)evconnlistener_disable(listener);
            return;
        }
}

void connguard_watch_listener(struct connguard *g, struct evconnlistener *listener)
{
    for (unsigned i = 0; i < WATCHED_MAX; i++)
        if (watched[i].listener == NULL || watched[i].listener == listener) {
            watched[i].listener = listener;
            watched[i].guard = g;
            evconnlistener_set_error_cb(listener, listener_error);
            return;
        }
    vg_log(VG_LOG_WARN, "too many listeners watched; accept errors are not paused", "listener=%s",
           g->name);
}

struct connguard *connguard_new(struct event_base *base, const struct connguard_options *o,
                                struct vg_err *err)
{
    struct connguard *g = xcalloc(1, sizeof *g);
    g->base = base;
    (void)vg_strlcpy(g->name, o->name != NULL ? o->name : "listener", sizeof g->name);
    g->fixed_max = o->max_conns;
    g->fixed_per_peer = o->max_per_peer;
    g->listeners = o->listeners > 0 ? o->listeners : 1;
    g->ceiling = o->ceiling;
    update_caps(g);
    g->head_ms = o->head_ms > 0 ? o->head_ms : CONNGUARD_HEAD_MS_DEFAULT;
    g->idle_ms = o->idle_ms > 0 ? o->idle_ms : CONNGUARD_IDLE_MS_DEFAULT;
    g->closed = o->closed;
    g->closed_arg = o->closed_arg;
    g->sweep = evtimer_new(base, sweep_cb, g);
    g->resume_ev = evtimer_new(base, resume_cb, g);
    if (g->sweep == NULL || g->resume_ev == NULL) {
        connguard_free(g);
        vg_err_set(err, -ENOMEM, "%s: cannot create the connection timers", o->name);
        return NULL;
    }
    return g;
}

void connguard_free(struct connguard *g)
{
    if (g == NULL)
        return;
    if (g->sweep != NULL)
        event_free(g->sweep);
    if (g->resume_ev != NULL)
        event_free(g->resume_ev);
    for (unsigned i = 0; i < WATCHED_MAX; i++)
        if (watched[i].guard == g) {
            watched[i].listener = NULL;
            watched[i].guard = NULL;
        }
    free(g->entries);
    free(g);
}

void connguard_stats(const struct connguard *g, struct connguard_stats *out)
{
    *out = g->stats;
    out->connections = g->count;
}
