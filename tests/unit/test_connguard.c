/* connguard over real sockets: what a flood of connections meets (src/connguard). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "base/mem.h"
#include "connguard/connguard.h"

static void run_for(struct event_base *base, long ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
}

static int listener(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(fd, 64), 0);
    socklen_t sl = sizeof sa;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

/* A client from source address src (127.0.0.x), and the server's end of it. */
static void pair(int lfd, uint16_t port, const char *src, int *client, int *server)
{
    *client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(*client >= 0);
    struct sockaddr_in from = {.sin_family = AF_INET};
    assert_int_equal(inet_pton(AF_INET, src, &from.sin_addr), 1);
    assert_int_equal(bind(*client, (struct sockaddr *)&from, sizeof from), 0);
    struct sockaddr_in to = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(*client, (struct sockaddr *)&to, sizeof to), 0);
    for (int i = 0; i < 100 && (*server = accept(lfd, NULL, NULL)) < 0; i++)
        usleep(1000);
    assert_true(*server >= 0);
}

/* Whether the server has ended the client's connection (its end of stream is there). */
static bool ended(int client)
{
    char c;
    return recv(client, &c, 1, MSG_DONTWAIT) == 0;
}

static void test_caps_follow_the_file_limit(void **state)
{
    (void)state;
    struct rlimit saved, low;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
    low = saved;
    low.rlim_cur = 256;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    /* 256 less a reserve of 32 + 256/8, shared by two listeners. */
    assert_int_equal(connguard_caps(2, 0), 96);
    assert_int_equal(connguard_caps(1, 64), 64);
    low.rlim_cur = 40;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    assert_int_equal(connguard_caps(1, 0), 4); /* never none at all */
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

static void test_shares_and_eviction(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct vg_err err = {0};
    struct connguard_options o = {.name = "test", .max_conns = 4, .max_per_peer = 2};
    struct connguard *g = connguard_new(base, &o, &err);
    assert_non_null(g);
    uint16_t port;
    int lfd = listener(&port);
    int c[6], s[6];
    /* Peer A's two: admitted. A third from A evicts A's oldest, not anyone else's. */
    pair(lfd, port, "127.0.0.2", &c[0], &s[0]);
    assert_int_equal(connguard_admit(g, s[0]), 0);
    pair(lfd, port, "127.0.0.2", &c[1], &s[1]);
    assert_int_equal(connguard_admit(g, s[1]), 0);
    pair(lfd, port, "127.0.0.3", &c[2], &s[2]);
    assert_int_equal(connguard_admit(g, s[2]), 0);
    pair(lfd, port, "127.0.0.2", &c[3], &s[3]);
    assert_int_equal(connguard_admit(g, s[3]), 0);
    assert_true(ended(c[0]));
    assert_false(ended(c[1]));
    assert_false(ended(c[2]));
    close(s[0]);
    connguard_release(g, s[0]);
    /* A's two busy: a third from A is refused, nothing is evicted. */
    connguard_busy(g, s[1]);
    connguard_busy(g, s[3]);
    pair(lfd, port, "127.0.0.2", &c[4], &s[4]);
    assert_int_equal(connguard_admit(g, s[4]), -EBUSY);
    close(s[4]);
    assert_false(ended(c[1]) || ended(c[3]));
    /* B at its share too; the listener full (4): a newcomer from C evicts the oldest that
     * is not busy of the peer holding the most: B's. */
    pair(lfd, port, "127.0.0.3", &c[5], &s[5]);
    assert_int_equal(connguard_admit(g, s[5]), 0);
    int cc, sc;
    pair(lfd, port, "127.0.0.4", &cc, &sc);
    assert_int_equal(connguard_admit(g, sc), 0);
    assert_true(ended(c[2]));
    assert_false(ended(c[5]) || ended(c[1]) || ended(c[3]));
    struct connguard_stats st;
    connguard_stats(g, &st);
    assert_int_equal(st.evicted, 2);
    assert_int_equal(st.refused, 1);
    for (int i = 0; i < 6; i++)
        close(c[i]);
    close(s[1]);
    close(s[2]);
    close(s[3]);
    close(s[5]);
    close(cc);
    close(sc);
    close(lfd);
    connguard_free(g);
    event_base_free(base);
}

/* The table full and no memory to grow it: the newcomer is refused (counted), nobody is
 * evicted and the daemon does not abort; with memory back, the same peer is admitted. */
static void test_no_memory_refuses(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct vg_err err = {0};
    struct connguard_options o = {.name = "test", .max_conns = 64, .max_per_peer = 64};
    struct connguard *g = connguard_new(base, &o, &err);
    assert_non_null(g);
    uint16_t port;
    int lfd = listener(&port);
    enum { N = 17 }; /* one past the first allocation of 16 entries */
    int c[N + 1], s[N + 1];
    for (int i = 0; i < N - 1; i++) {
        pair(lfd, port, "127.0.0.2", &c[i], &s[i]);
        assert_int_equal(connguard_admit(g, s[i]), 0);
    }
    pair(lfd, port, "127.0.0.2", &c[N - 1], &s[N - 1]);
    vg_mem_fail_nth(1);
    assert_int_equal(connguard_admit(g, s[N - 1]), -EBUSY);
    assert_true(vg_mem_fail_fired());
    struct connguard_stats st;
    connguard_stats(g, &st);
    assert_int_equal(st.refused, 1);
    assert_int_equal(st.evicted, 0);
    for (int i = 0; i < N - 1; i++)
        assert_false(ended(c[i]));
    pair(lfd, port, "127.0.0.2", &c[N], &s[N]);
    assert_int_equal(connguard_admit(g, s[N]), 0);
    for (int i = 0; i <= N; i++) {
        close(c[i]);
        close(s[i]);
    }
    close(lfd);
    connguard_free(g);
    event_base_free(base);
}

static void test_deadlines(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct vg_err err = {0};
    struct connguard_options o = {
        .name = "test", .max_conns = 8, .max_per_peer = 8, .head_ms = 200, .idle_ms = 1200};
    struct connguard *g = connguard_new(base, &o, &err);
    assert_non_null(g);
    uint16_t port;
    int lfd = listener(&port);
    int c[3], s[3];
    for (int i = 0; i < 3; i++) {
        pair(lfd, port, "127.0.0.2", &c[i], &s[i]);
        assert_int_equal(connguard_admit(g, s[i]), 0);
    }
    connguard_idle(g, s[1]); /* answered a request: the idle deadline, not the head's */
    connguard_busy(g, s[2]); /* serving one: no deadline */
    run_for(base, 800);
    assert_true(ended(c[0]));
    assert_false(ended(c[1]));
    assert_false(ended(c[2]));
    run_for(base, 1000);
    assert_true(ended(c[1]));
    assert_false(ended(c[2]));
    struct connguard_stats st;
    connguard_stats(g, &st);
    assert_int_equal(st.timed_out, 2);
    assert_int_equal(st.connections, 1);
    for (int i = 0; i < 3; i++) {
        close(c[i]);
        close(s[i]);
    }
    close(lfd);
    connguard_free(g);
    event_base_free(base);
}

struct accept_test {
    int accepted;
};

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg)
{
    (void)l;
    (void)sa;
    (void)salen;
    ((struct accept_test *)arg)->accepted++;
    close(fd);
}

/* Out of descriptors, accept fails while the listening socket stays readable: the guard
 * pauses accepting (a handful of tries over the back-off, not one per loop turn) and
 * resumes once descriptors are back. */
static void test_accept_backs_off(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct vg_err err = {0};
    struct connguard_options o = {.name = "test"};
    struct connguard *g = connguard_new(base, &o, &err);
    assert_non_null(g);
    uint16_t port;
    int lfd = listener(&port);
    struct accept_test t = {0};
    struct evconnlistener *l =
        evconnlistener_new(base, on_accept, &t, LEV_OPT_CLOSE_ON_FREE, -1, lfd);
    assert_non_null(l);
    connguard_watch_listener(g, l);
    int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in to = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(client, (struct sockaddr *)&to, sizeof to), 0);
    /* No descriptor left: the lowest free one is above the limit. */
    int top = dup(client);
    assert_true(top > 0);
    close(top);
    struct rlimit saved, low;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
    low = saved;
    low.rlim_cur = (rlim_t)top;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    run_for(base, 700);
    struct connguard_stats st;
    connguard_stats(g, &st);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
    assert_int_equal(t.accepted, 0);
    /* 50, 100, 200, 400 ms of pause: four or five tries in 700 ms, not thousands. */
    assert_true(st.accept_pause >= 2);
    assert_true(st.accept_pause <= 6);
    run_for(base, 1200);
    assert_int_equal(t.accepted, 1); /* resumed */
    close(client);
    evconnlistener_free(l);
    connguard_free(g);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_caps_follow_the_file_limit),
        cmocka_unit_test(test_shares_and_eviction),
        cmocka_unit_test(test_no_memory_refuses),
        cmocka_unit_test(test_deadlines),
        cmocka_unit_test(test_accept_backs_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
