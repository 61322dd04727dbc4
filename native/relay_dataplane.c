/*
 * gamewire unity-relay native data plane (Node-API, Linux).
 *
 * One UDP socket, owned here. A worker thread receives in batches (recvmmsg). A RELAY message
 * whose sender is bound from that exact address and whose target is a linked, bound UDP peer is
 * forwarded from the same thread in batches (sendmmsg), without entering JavaScript. Every other
 * datagram goes to JavaScript in batches, where the relay's ordinary handlers run unchanged.
 *
 * JavaScript stays the source of truth: it pushes each bind, unbind, link and unlink into the
 * table below, and reads back last-seen times and counters. The worker never creates state.
 *
 * Every read of a datagram is bounds-checked against its received length; nothing here trusts
 * a length field before comparing it with what arrived.
 */
#define _GNU_SOURCE
#define NAPI_VERSION 8
#include <node_api.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ID_LEN 16
#define RELAY_HEADER_LEN 38
#define MAX_BATCH 256
/* Bytes handed to JavaScript and not yet processed: like a socket receive buffer (4 MiB). */
#define MAX_JS_PENDING (4u * 1024 * 1024)
/* What one datagram costs against that budget beyond its bytes, so empty ones count too. */
#define JS_DATAGRAM_COST 64

/* ---- allocation table: open addressing keyed by the 16 id bytes ------------------------------ */

typedef struct {
  uint8_t id[ID_LEN];
  uint8_t state; /* 0 empty, 1 live, 2 tombstone */
  uint8_t bound;
  uint32_t addr; /* network order */
  uint16_t port; /* network order */
  int64_t last_seen_ms;
  uint32_t npeers;
  uint32_t cap_peers;
  uint8_t *peers; /* npeers * ID_LEN */
  /* RELAYs forwarded here from (in) and to (out) this allocation, for the dashboard. */
  uint64_t packets_in;
  uint64_t bytes_in;
  uint64_t packets_out;
  uint64_t bytes_out;
} entry_t;

typedef struct {
  entry_t *slots;
  uint32_t cap; /* power of two */
  uint32_t live;
  uint32_t used; /* live + tombstones */
} table_t;

static uint32_t hash_id(const uint8_t *id) {
  /* FNV-1a over the 16 bytes: ids are random, any mixing is enough. */
  uint32_t h = 2166136261u;
  for (int i = 0; i < ID_LEN; i++) h = (h ^ id[i]) * 16777619u;
  return h;
}

static entry_t *table_find(table_t *t, const uint8_t *id) {
  if (t->cap == 0) return NULL;
  uint32_t mask = t->cap - 1;
  for (uint32_t i = hash_id(id) & mask, n = 0; n < t->cap; i = (i + 1) & mask, n++) {
    entry_t *e = &t->slots[i];
    if (e->state == 0) return NULL;
    if (e->state == 1 && memcmp(e->id, id, ID_LEN) == 0) return e;
  }
  return NULL;
}

static int table_rehash(table_t *t, uint32_t cap) {
  entry_t *slots = calloc(cap, sizeof(entry_t));
  if (slots == NULL) return -1;
  uint32_t mask = cap - 1;
  for (uint32_t k = 0; k < t->cap; k++) {
    entry_t *e = &t->slots[k];
    if (e->state != 1) continue;
    uint32_t i = hash_id(e->id) & mask;
    while (slots[i].state != 0) i = (i + 1) & mask;
    slots[i] = *e;
  }
  free(t->slots);
  t->slots = slots;
  t->cap = cap;
  t->used = t->live;
  return 0;
}

static entry_t *table_insert(table_t *t, const uint8_t *id) {
  entry_t *e = table_find(t, id);
  if (e != NULL) return e;
  if (t->cap == 0 || (t->used + 1) * 2 > t->cap) {
    /* Grow when live entries need it; otherwise rehashing at the same size clears tombstones. */
    uint32_t cap = t->cap == 0 ? 64 : t->cap;
    while ((t->live + 1) * 2 > cap) cap *= 2;
    if (table_rehash(t, cap) != 0) return NULL;
  }
  uint32_t mask = t->cap - 1;
  uint32_t i = hash_id(id) & mask;
  while (t->slots[i].state == 1) i = (i + 1) & mask;
  e = &t->slots[i];
  if (e->state == 0) t->used++;
  memset(e, 0, sizeof(*e));
  memcpy(e->id, id, ID_LEN);
  e->state = 1;
  e->last_seen_ms = -1;
  t->live++;
  return e;
}

static void table_remove(table_t *t, const uint8_t *id) {
  entry_t *e = table_find(t, id);
  if (e == NULL) return;
  free(e->peers);
  e->peers = NULL;
  e->npeers = e->cap_peers = 0;
  e->state = 2;
  t->live--;
}

static void table_free(table_t *t) {
  for (uint32_t k = 0; k < t->cap; k++) free(t->slots[k].peers);
  free(t->slots);
  t->slots = NULL;
  t->cap = t->live = t->used = 0;
}

static int peers_has(const entry_t *e, const uint8_t *id) {
  for (uint32_t i = 0; i < e->npeers; i++)
    if (memcmp(e->peers + (size_t)i * ID_LEN, id, ID_LEN) == 0) return 1;
  return 0;
}

static int peers_add(entry_t *e, const uint8_t *id) {
  if (peers_has(e, id)) return 0;
  if (e->npeers == e->cap_peers) {
    uint32_t cap = e->cap_peers == 0 ? 4 : e->cap_peers * 2;
    uint8_t *p = realloc(e->peers, (size_t)cap * ID_LEN);
    if (p == NULL) return -1;
    e->peers = p;
    e->cap_peers = cap;
  }
  memcpy(e->peers + (size_t)e->npeers * ID_LEN, id, ID_LEN);
  e->npeers++;
  return 0;
}

static void peers_del(entry_t *e, const uint8_t *id) {
  for (uint32_t i = 0; i < e->npeers; i++) {
    if (memcmp(e->peers + (size_t)i * ID_LEN, id, ID_LEN) == 0) {
      e->npeers--;
      if (i != e->npeers) memcpy(e->peers + (size_t)i * ID_LEN, e->peers + (size_t)e->npeers * ID_LEN, ID_LEN);
      return;
    }
  }
}

/* ---- the data plane ------------------------------------------------------------------------- */

enum {
  C_RECEIVED,
  C_FORWARDED,
  C_TO_JS,
  C_DROP_BAD_SOURCE,
  C_DROP_BACKLOG,
  C_DROP_SEND_FAILED,
  C_BATCHES,
  C_BYTES_FORWARDED,
  C_COUNT
};

typedef struct js_batch {
  uint32_t count;
  uint32_t bytes;
  uint32_t cost;
  int32_t *meta; /* count * 4: offset, length, ipv4 (host order as int32), port */
  uint8_t *data;
} js_batch_t;

typedef struct {
  int fd;
  int wake_fd;
  uint32_t max_datagram;
  uint32_t batch;
  pthread_t thread;
  int running;
  pthread_mutex_t lock;
  table_t table;
  uint64_t counters[C_COUNT];
  uint32_t js_pending; /* cost of batches queued for JavaScript, not yet handed over */
  napi_threadsafe_function tsfn;
  /* worker-owned buffers */
  uint8_t *rbuf;
  struct mmsghdr *rmsgs;
  struct iovec *riov;
  struct sockaddr_in *raddr;
  struct mmsghdr *smsgs;
  struct iovec *siov;
  struct sockaddr_in *saddr;
} plane_t;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * The fast path's checks, exactly those of the JS relay for a RELAY it forwards: magic, version,
 * type, header length, the data length field, a sender bound from this address, a linked target
 * that is bound. Anything else returns 0 and goes to JavaScript, which decides (and answers
 * ERROR 3 or 5 where the JS relay does).
 */
static int fast_path(plane_t *p, const uint8_t *m, uint32_t len, const struct sockaddr_in *from,
                     struct sockaddr_in *to, int64_t now) {
  if (len < RELAY_HEADER_LEN) return 0;
  if (m[0] != 0xda || m[1] != 0x72 || m[2] != 0 || m[3] != 10) return 0;
  uint32_t data_len = ((uint32_t)m[36] << 8) | m[37];
  if (data_len != len - RELAY_HEADER_LEN) return 0;
  entry_t *src = table_find(&p->table, m + 4);
  if (src == NULL || !src->bound || src->addr != from->sin_addr.s_addr || src->port != from->sin_port) return 0;
  if (!peers_has(src, m + 20)) return 0;
  entry_t *dst = table_find(&p->table, m + 20);
  if (dst == NULL || !dst->bound) return 0;
  src->last_seen_ms = now;
  src->packets_in++;
  src->bytes_in += len;
  dst->packets_out++;
  dst->bytes_out += len;
  memset(to, 0, sizeof(*to));
  to->sin_family = AF_INET;
  to->sin_addr.s_addr = dst->addr;
  to->sin_port = dst->port;
  return 1;
}

static void send_all(plane_t *p, uint32_t n) {
  uint32_t done = 0;
  int tries = 0;
  while (done < n) {
    int r = sendmmsg(p->fd, p->smsgs + done, n - done, 0);
    if (r > 0) {
      done += (uint32_t)r;
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && tries++ < 3) {
      struct pollfd pfd = {.fd = p->fd, .events = POLLOUT};
      poll(&pfd, 1, 2);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    /* This datagram cannot be sent (an unreachable peer, a full buffer): count it, go on. */
    __atomic_add_fetch(&p->counters[C_DROP_SEND_FAILED], 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&p->counters[C_FORWARDED], 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&p->counters[C_BYTES_FORWARDED], p->siov[done].iov_len, __ATOMIC_RELAXED);
    done++;
  }
}

static void *worker(void *arg) {
  plane_t *p = arg;
  uint32_t slot = p->max_datagram + 1; /* one more byte tells "too large" apart */
  struct pollfd pfds[2] = {{.fd = p->fd, .events = POLLIN}, {.fd = p->wake_fd, .events = POLLIN}};
  for (;;) {
    int pr = poll(pfds, 2, -1);
    if (pr < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (pfds[1].revents != 0) break;
    if ((pfds[0].revents & POLLIN) == 0) continue;
    for (uint32_t i = 0; i < p->batch; i++) {
      p->riov[i].iov_base = p->rbuf + (size_t)i * slot;
      p->riov[i].iov_len = slot;
      memset(&p->rmsgs[i].msg_hdr, 0, sizeof(struct msghdr));
      p->rmsgs[i].msg_hdr.msg_iov = &p->riov[i];
      p->rmsgs[i].msg_hdr.msg_iovlen = 1;
      p->rmsgs[i].msg_hdr.msg_name = &p->raddr[i];
      p->rmsgs[i].msg_hdr.msg_namelen = sizeof(struct sockaddr_in);
      p->rmsgs[i].msg_len = 0;
    }
    int n = recvmmsg(p->fd, p->rmsgs, p->batch, MSG_DONTWAIT, NULL);
    if (n <= 0) continue;
    __atomic_add_fetch(&p->counters[C_BATCHES], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&p->counters[C_RECEIVED], (uint64_t)n, __ATOMIC_RELAXED);
    int64_t now = now_ms();
    uint32_t nsend = 0;
    uint32_t njs = 0;
    uint32_t js_bytes = 0;
    /* First pass under the table lock: classify, and build the forward batch. */
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < n; i++) {
      uint32_t len = p->rmsgs[i].msg_len;
      uint8_t *m = p->riov[i].iov_base;
      if (p->rmsgs[i].msg_hdr.msg_namelen != sizeof(struct sockaddr_in) || p->raddr[i].sin_family != AF_INET) {
        p->rmsgs[i].msg_len = UINT32_MAX; /* marks "dropped" (cannot happen on an AF_INET socket) */
        __atomic_add_fetch(&p->counters[C_DROP_BAD_SOURCE], 1, __ATOMIC_RELAXED);
        continue;
      }
      /* Too large (truncated to max + 1 bytes): JavaScript drops and counts it, as it does anyway. */
      if (len > p->max_datagram || (p->rmsgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0) {
        if (len > p->max_datagram + 1) p->rmsgs[i].msg_len = len = p->max_datagram + 1;
        njs++;
        js_bytes += len;
        continue;
      }
      if (fast_path(p, m, len, &p->raddr[i], &p->saddr[nsend], now)) {
        p->siov[nsend].iov_base = m;
        p->siov[nsend].iov_len = len;
        memset(&p->smsgs[nsend].msg_hdr, 0, sizeof(struct msghdr));
        p->smsgs[nsend].msg_hdr.msg_iov = &p->siov[nsend];
        p->smsgs[nsend].msg_hdr.msg_iovlen = 1;
        p->smsgs[nsend].msg_hdr.msg_name = &p->saddr[nsend];
        p->smsgs[nsend].msg_hdr.msg_namelen = sizeof(struct sockaddr_in);
        nsend++;
        p->rmsgs[i].msg_len = UINT32_MAX - 1; /* marks "forwarded" */
      } else {
        njs++;
        js_bytes += len;
      }
    }
    pthread_mutex_unlock(&p->lock);
    if (nsend > 0) {
      uint64_t sent_bytes = 0;
      for (uint32_t k = 0; k < nsend; k++) sent_bytes += p->siov[k].iov_len;
      __atomic_add_fetch(&p->counters[C_FORWARDED], nsend, __ATOMIC_RELAXED);
      __atomic_add_fetch(&p->counters[C_BYTES_FORWARDED], sent_bytes, __ATOMIC_RELAXED);
      send_all(p, nsend);
    }
    if (njs == 0) continue;
    uint32_t cost = js_bytes + JS_DATAGRAM_COST * njs;
    if (__atomic_load_n(&p->js_pending, __ATOMIC_RELAXED) + cost > MAX_JS_PENDING) {
      /* JavaScript is this far behind: drop, as a full receive buffer would, and count. */
      __atomic_add_fetch(&p->counters[C_DROP_BACKLOG], njs, __ATOMIC_RELAXED);
      continue;
    }
    /* Second pass: copy what JavaScript handles into one batch it receives at once. */
    js_batch_t *b = malloc(sizeof(js_batch_t));
    uint8_t *data = malloc(js_bytes == 0 ? 1 : js_bytes);
    int32_t *meta = malloc(sizeof(int32_t) * 4 * njs);
    if (b == NULL || data == NULL || meta == NULL) {
      free(b);
      free(data);
      free(meta);
      __atomic_add_fetch(&p->counters[C_DROP_BACKLOG], njs, __ATOMIC_RELAXED);
      continue;
    }
    uint32_t off = 0;
    uint32_t k = 0;
    for (int i = 0; i < n; i++) {
      uint32_t len = p->rmsgs[i].msg_len;
      if (len >= UINT32_MAX - 1) continue;
      memcpy(data + off, p->riov[i].iov_base, len);
      meta[k * 4 + 0] = (int32_t)off;
      meta[k * 4 + 1] = (int32_t)len;
      meta[k * 4 + 2] = (int32_t)ntohl(p->raddr[i].sin_addr.s_addr);
      meta[k * 4 + 3] = (int32_t)ntohs(p->raddr[i].sin_port);
      off += len;
      k++;
    }
    b->count = njs;
    b->bytes = js_bytes;
    b->cost = cost;
    __atomic_add_fetch(&p->js_pending, cost, __ATOMIC_RELAXED);
    b->data = data;
    b->meta = meta;
    napi_status st = napi_call_threadsafe_function(p->tsfn, b, napi_tsfn_nonblocking);
    if (st != napi_ok) {
      /* Closing: drop, count. */
      __atomic_sub_fetch(&p->js_pending, cost, __ATOMIC_RELAXED);
      __atomic_add_fetch(&p->counters[C_DROP_BACKLOG], njs, __ATOMIC_RELAXED);
      free(data);
      free(meta);
      free(b);
    } else {
      __atomic_add_fetch(&p->counters[C_TO_JS], njs, __ATOMIC_RELAXED);
    }
  }
  return NULL;
}

static void finalize_batch_data(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  free(data);
}

/* Runs on the JS thread: hands one batch to the JS callback as (Buffer data, Int32Array meta). */
static void call_js(napi_env env, napi_value js_cb, void *context, void *data) {
  plane_t *p = context;
  js_batch_t *b = data;
  if (env == NULL || js_cb == NULL) {
    /* The environment is going away: the plane may be gone already, touch only the batch. */
    free(b->data);
    free(b->meta);
    free(b);
    return;
  }
  /* Here the plane is alive: the queued function keeps its JS owner, and so the handle, alive. */
  __atomic_sub_fetch(&p->js_pending, b->cost, __ATOMIC_RELAXED);
  napi_value buf, meta_ab, meta, undefined;
  uint8_t *bytes = b->data;
  if (napi_create_external_buffer(env, b->bytes, bytes, finalize_batch_data, NULL, &buf) != napi_ok) {
    /* Some runtimes refuse external buffers: fall back to a copy. */
    void *copy;
    napi_create_buffer_copy(env, b->bytes, bytes, &copy, &buf);
    free(bytes);
  }
  void *meta_data;
  napi_create_arraybuffer(env, sizeof(int32_t) * 4 * b->count, &meta_data, &meta_ab);
  memcpy(meta_data, b->meta, sizeof(int32_t) * 4 * b->count);
  napi_create_typedarray(env, napi_int32_array, 4 * b->count, meta_ab, 0, &meta);
  free(b->meta);
  free(b);
  napi_get_undefined(env, &undefined);
  napi_value argv[2] = {buf, meta};
  napi_call_function(env, undefined, js_cb, 2, argv, NULL);
}

/* ---- Node-API surface ------------------------------------------------------------------------ */

#define CHECK(call)                                                                                  \
  do {                                                                                             \
    if ((call) != napi_ok) {                                                                       \
      napi_throw_error(env, "ERR_NATIVE_DATAPLANE", #call " failed");                              \
      return NULL;                                                                                 \
    }                                                                                              \
  } while (0)

static plane_t *plane_arg(napi_env env, napi_value v) {
  plane_t *p = NULL;
  if (napi_get_value_external(env, v, (void **)&p) != napi_ok || p == NULL) {
    napi_throw_type_error(env, "ERR_NATIVE_DATAPLANE", "not a data plane handle");
    return NULL;
  }
  return p;
}

static int id_arg(napi_env env, napi_value v, const uint8_t **out) {
  void *data;
  size_t len;
  if (napi_get_buffer_info(env, v, &data, &len) != napi_ok || len != ID_LEN) {
    napi_throw_type_error(env, "ERR_NATIVE_DATAPLANE", "an allocation id is 16 bytes");
    return -1;
  }
  *out = data;
  return 0;
}

static void plane_stop(plane_t *p) {
  if (p->running) {
    uint64_t one = 1;
    ssize_t w = write(p->wake_fd, &one, sizeof(one));
    (void)w;
    pthread_join(p->thread, NULL);
    p->running = 0;
  }
  if (p->fd >= 0) close(p->fd);
  if (p->wake_fd >= 0) close(p->wake_fd);
  p->fd = p->wake_fd = -1;
}

static void plane_free(plane_t *p) {
  plane_stop(p);
  pthread_mutex_lock(&p->lock);
  table_free(&p->table);
  pthread_mutex_unlock(&p->lock);
  pthread_mutex_destroy(&p->lock);
  free(p->rbuf);
  free(p->rmsgs);
  free(p->riov);
  free(p->raddr);
  free(p->smsgs);
  free(p->siov);
  free(p->saddr);
  free(p);
}

static void finalize_plane(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  plane_t *p = data;
  /* close() released the thread-safe function already, or the environment is going away. */
  plane_free(p);
}

/* open(host: string, port: number, maxDatagram: number, batch: number, onBatch: fn) → [handle, port] */
static napi_value js_open(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 5) {
    napi_throw_type_error(env, "ERR_NATIVE_DATAPLANE", "open(host, port, maxDatagram, batch, onBatch)");
    return NULL;
  }
  char host[64];
  size_t host_len;
  CHECK(napi_get_value_string_utf8(env, argv[0], host, sizeof(host), &host_len));
  uint32_t port, max_datagram, batch;
  CHECK(napi_get_value_uint32(env, argv[1], &port));
  CHECK(napi_get_value_uint32(env, argv[2], &max_datagram));
  CHECK(napi_get_value_uint32(env, argv[3], &batch));
  if (port > 65535 || max_datagram < RELAY_HEADER_LEN || max_datagram > 65507 || batch == 0 || batch > MAX_BATCH) {
    napi_throw_range_error(env, "ERR_NATIVE_DATAPLANE", "port, maxDatagram or batch out of range");
    return NULL;
  }
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
    napi_throw_error(env, "ERR_NATIVE_DATAPLANE_ADDRESS", "the native data plane binds IPv4 addresses only");
    return NULL;
  }
  plane_t *p = calloc(1, sizeof(plane_t));
  if (p == NULL) {
    napi_throw_error(env, "ERR_NATIVE_DATAPLANE", "out of memory");
    return NULL;
  }
  p->fd = p->wake_fd = -1;
  p->max_datagram = max_datagram;
  p->batch = batch;
  pthread_mutex_init(&p->lock, NULL);
  size_t slot = (size_t)max_datagram + 1;
  p->rbuf = malloc(slot * batch);
  p->rmsgs = calloc(batch, sizeof(struct mmsghdr));
  p->riov = calloc(batch, sizeof(struct iovec));
  p->raddr = calloc(batch, sizeof(struct sockaddr_in));
  p->smsgs = calloc(batch, sizeof(struct mmsghdr));
  p->siov = calloc(batch, sizeof(struct iovec));
  p->saddr = calloc(batch, sizeof(struct sockaddr_in));
  if (!p->rbuf || !p->rmsgs || !p->riov || !p->raddr || !p->smsgs || !p->siov || !p->saddr) {
    plane_free(p);
    napi_throw_error(env, "ERR_NATIVE_DATAPLANE", "out of memory");
    return NULL;
  }
  p->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  p->wake_fd = eventfd(0, EFD_CLOEXEC);
  int rcv = 4 * 1024 * 1024;
  if (p->fd >= 0) setsockopt(p->fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
  if (p->fd < 0 || p->wake_fd < 0 || bind(p->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    int err = errno;
    plane_free(p);
    char msg[128];
    snprintf(msg, sizeof(msg), "bind %s:%u failed: %s", host, port, strerror(err));
    napi_throw_error(env, err == EADDRINUSE ? "EADDRINUSE" : "ERR_NATIVE_DATAPLANE", msg);
    return NULL;
  }
  socklen_t sl = sizeof(sa);
  getsockname(p->fd, (struct sockaddr *)&sa, &sl);
  napi_value resource_name;
  CHECK(napi_create_string_utf8(env, "gamewire-relay-dataplane", NAPI_AUTO_LENGTH, &resource_name));
  if (napi_create_threadsafe_function(env, argv[4], NULL, resource_name, 0, 1, NULL, NULL, p, call_js,
                                      &p->tsfn) != napi_ok) {
    plane_free(p);
    napi_throw_error(env, "ERR_NATIVE_DATAPLANE", "cannot create the thread-safe function");
    return NULL;
  }
  if (pthread_create(&p->thread, NULL, worker, p) != 0) {
    napi_release_threadsafe_function(p->tsfn, napi_tsfn_abort);
    plane_free(p);
    napi_throw_error(env, "ERR_NATIVE_DATAPLANE", "cannot start the worker thread");
    return NULL;
  }
  p->running = 1;
  napi_value handle, port_v, result;
  CHECK(napi_create_external(env, p, finalize_plane, NULL, &handle));
  CHECK(napi_create_uint32(env, ntohs(sa.sin_port), &port_v));
  CHECK(napi_create_array_with_length(env, 2, &result));
  CHECK(napi_set_element(env, result, 0, handle));
  CHECK(napi_set_element(env, result, 1, port_v));
  return result;
}

/* close(handle): stops the worker, closes the socket, lets pending JS batches drain. */
static napi_value js_close(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  plane_t *p = plane_arg(env, argv[0]);
  if (p == NULL) return NULL;
  if (p->running || p->fd >= 0) {
    plane_stop(p);
    napi_release_threadsafe_function(p->tsfn, napi_tsfn_release);
  }
  return NULL;
}

/* send(handle, buffer, port, ipv4 string) → 0 or -errno. Non-blocking. */
static napi_value js_send(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  plane_t *p = plane_arg(env, argv[0]);
  if (p == NULL) return NULL;
  void *data;
  size_t len;
  uint32_t port;
  char host[64];
  size_t host_len;
  CHECK(napi_get_buffer_info(env, argv[1], &data, &len));
  CHECK(napi_get_value_uint32(env, argv[2], &port));
  CHECK(napi_get_value_string_utf8(env, argv[3], host, sizeof(host), &host_len));
  struct sockaddr_in to;
  memset(&to, 0, sizeof(to));
  to.sin_family = AF_INET;
  to.sin_port = htons((uint16_t)port);
  int rc = 0;
  if (port > 65535 || inet_pton(AF_INET, host, &to.sin_addr) != 1) rc = -EINVAL;
  else if (p->fd < 0) rc = -EBADF;
  else if (sendto(p->fd, data, len, 0, (struct sockaddr *)&to, sizeof(to)) < 0) rc = -errno;
  napi_value out;
  CHECK(napi_create_int32(env, rc, &out));
  return out;
}

/* bind(handle, id, ipv4, port): the allocation is bound over UDP from ipv4:port. */
static napi_value js_bind(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  plane_t *p = plane_arg(env, argv[0]);
  const uint8_t *id;
  if (p == NULL || id_arg(env, argv[1], &id) != 0) return NULL;
  char host[64];
  size_t host_len;
  uint32_t port;
  CHECK(napi_get_value_string_utf8(env, argv[2], host, sizeof(host), &host_len));
  CHECK(napi_get_value_uint32(env, argv[3], &port));
  struct in_addr addr;
  if (port > 65535 || inet_pton(AF_INET, host, &addr) != 1) {
    napi_throw_range_error(env, "ERR_NATIVE_DATAPLANE", "bind needs an IPv4 address and a port");
    return NULL;
  }
  pthread_mutex_lock(&p->lock);
  entry_t *e = table_insert(&p->table, id);
  if (e != NULL) {
    e->bound = 1;
    e->addr = addr.s_addr;
    e->port = htons((uint16_t)port);
  }
  pthread_mutex_unlock(&p->lock);
  if (e == NULL) napi_throw_error(env, "ERR_NATIVE_DATAPLANE", "out of memory");
  return NULL;
}

/* unbind(handle, id): no longer bound over UDP here (links stay). */
static napi_value js_unbind(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  plane_t *p = plane_arg(env, argv[0]);
  const uint8_t *id;
  if (p == NULL || id_arg(env, argv[1], &id) != 0) return NULL;
  pthread_mutex_lock(&p->lock);
  entry_t *e = table_find(&p->table, id);
  if (e != NULL) e->bound = 0;
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

/* forget(handle, id): the allocation is gone (expired or deleted). */
static napi_value js_forget(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  plane_t *p = plane_arg(env, argv[0]);
  const uint8_t *id;
  if (p == NULL || id_arg(env, argv[1], &id) != 0) return NULL;
  pthread_mutex_lock(&p->lock);
  table_remove(&p->table, id);
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

/* link(handle, a, b, linked: boolean): a and b may relay to each other (or no longer). */
static napi_value js_link(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  plane_t *p = plane_arg(env, argv[0]);
  const uint8_t *a, *b;
  if (p == NULL || id_arg(env, argv[1], &a) != 0 || id_arg(env, argv[2], &b) != 0) return NULL;
  bool linked;
  CHECK(napi_get_value_bool(env, argv[3], &linked));
  int failed = 0;
  pthread_mutex_lock(&p->lock);
  if (linked) {
    entry_t *ea = table_insert(&p->table, a);
    /* Inserting b may move a (rehash): look it up again afterwards. */
    entry_t *eb = ea == NULL ? NULL : table_insert(&p->table, b);
    ea = table_find(&p->table, a);
    if (ea == NULL || eb == NULL || peers_add(ea, b) != 0 || peers_add(table_find(&p->table, b), a) != 0) failed = 1;
  } else {
    entry_t *ea = table_find(&p->table, a);
    entry_t *eb = table_find(&p->table, b);
    if (ea != NULL) peers_del(ea, b);
    if (eb != NULL) peers_del(eb, a);
  }
  pthread_mutex_unlock(&p->lock);
  if (failed) napi_throw_error(env, "ERR_NATIVE_DATAPLANE", "out of memory");
  return NULL;
}

/* lastSeen(handle, id) → ms on the monotonic clock of now(), or -1. */
static napi_value js_last_seen(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  plane_t *p = plane_arg(env, argv[0]);
  const uint8_t *id;
  if (p == NULL || id_arg(env, argv[1], &id) != 0) return NULL;
  pthread_mutex_lock(&p->lock);
  entry_t *e = table_find(&p->table, id);
  int64_t t = e == NULL ? -1 : e->last_seen_ms;
  pthread_mutex_unlock(&p->lock);
  napi_value out;
  CHECK(napi_create_int64(env, t, &out));
  return out;
}

static napi_value js_now(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value out;
  CHECK(napi_create_int64(env, now_ms(), &out));
  return out;
}

/* counters(handle, id) → [packetsIn, bytesIn, packetsOut, bytesOut] forwarded here, or null. */
static napi_value js_counters(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  plane_t *p = plane_arg(env, argv[0]);
  const uint8_t *id;
  if (p == NULL || id_arg(env, argv[1], &id) != 0) return NULL;
  uint64_t c[4] = {0, 0, 0, 0};
  int found = 0;
  pthread_mutex_lock(&p->lock);
  entry_t *e = table_find(&p->table, id);
  if (e != NULL) {
    found = 1;
    c[0] = e->packets_in;
    c[1] = e->bytes_in;
    c[2] = e->packets_out;
    c[3] = e->bytes_out;
  }
  pthread_mutex_unlock(&p->lock);
  napi_value out;
  if (!found) {
    CHECK(napi_get_null(env, &out));
    return out;
  }
  CHECK(napi_create_array_with_length(env, 4, &out));
  for (uint32_t i = 0; i < 4; i++) {
    napi_value v;
    CHECK(napi_create_double(env, (double)c[i], &v));
    CHECK(napi_set_element(env, out, i, v));
  }
  return out;
}

/* stats(handle) → [received, forwarded, toJs, dropBadSource, dropBacklog, dropSendFailed, batches, bytesForwarded, tableSize] */
static napi_value js_stats(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  plane_t *p = plane_arg(env, argv[0]);
  if (p == NULL) return NULL;
  napi_value arr;
  CHECK(napi_create_array_with_length(env, C_COUNT + 1, &arr));
  for (int i = 0; i < C_COUNT; i++) {
    napi_value v;
    CHECK(napi_create_double(env, (double)__atomic_load_n(&p->counters[i], __ATOMIC_RELAXED), &v));
    CHECK(napi_set_element(env, arr, (uint32_t)i, v));
  }
  pthread_mutex_lock(&p->lock);
  uint32_t live = p->table.live;
  pthread_mutex_unlock(&p->lock);
  napi_value v;
  CHECK(napi_create_uint32(env, live, &v));
  CHECK(napi_set_element(env, arr, C_COUNT, v));
  return arr;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"open", NULL, js_open, NULL, NULL, NULL, napi_default, NULL},
      {"close", NULL, js_close, NULL, NULL, NULL, napi_default, NULL},
      {"send", NULL, js_send, NULL, NULL, NULL, napi_default, NULL},
      {"bind", NULL, js_bind, NULL, NULL, NULL, napi_default, NULL},
      {"unbind", NULL, js_unbind, NULL, NULL, NULL, napi_default, NULL},
      {"forget", NULL, js_forget, NULL, NULL, NULL, napi_default, NULL},
      {"link", NULL, js_link, NULL, NULL, NULL, napi_default, NULL},
      {"lastSeen", NULL, js_last_seen, NULL, NULL, NULL, napi_default, NULL},
      {"now", NULL, js_now, NULL, NULL, NULL, napi_default, NULL},
      {"stats", NULL, js_stats, NULL, NULL, NULL, napi_default, NULL},
      {"counters", NULL, js_counters, NULL, NULL, NULL, napi_default, NULL},
  };
  if (napi_define_properties(env, exports, sizeof(props) / sizeof(props[0]), props) != napi_ok) return NULL;
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
