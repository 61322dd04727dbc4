/*
 * gamewire unity-relay native data plane (Node-API, Linux).
 *
 * Two UDP sockets, owned here: the relay's plain UDP port and, optionally, its DTLS port. A worker
 * thread receives on both in batches (recvmmsg). A RELAY message whose sender is bound from that
 * exact address (UDP) or through that exact DTLS association, and whose target is a linked, bound
 * peer, is forwarded from the same thread in batches (sendmmsg), without entering JavaScript:
 * unchanged to a UDP peer, sealed with the peer's keys and next sequence number to a DTLS peer.
 * Every other datagram goes to JavaScript in batches, where the relay's ordinary handlers run
 * unchanged; application records of an association it holds are handed over decrypted.
 *
 * JavaScript stays the source of truth: it pushes each bind, unbind, link and unlink into the
 * table below, hands established DTLS associations over (keys, sequence numbers, replay window)
 * and takes them back (the state they reached) whenever it needs them; it reads back last-seen
 * times and counters. The worker never creates state.
 *
 * Every read of a datagram is bounds-checked against its received length; nothing here trusts
 * a length field before comparing it with what arrived.
 */
#define _GNU_SOURCE
#define NAPI_VERSION 8
#include <node_api.h>

#include "dtls_record.h"

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
#include <netinet/udp.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
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
/* Drop notices wait at most this long for a batch to go with (then they go on their own). */
#define NOTICE_MS 5
/* Sources × reasons of drop notices that can wait at once. */
#define MAX_NOTICES 64

/* Linux's UDP offloads and busy polling, named here for C libraries older than them (glibc 2.28). */
#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SO_BUSY_POLL
#define SO_BUSY_POLL 46
#endif
#ifndef SO_PREFER_BUSY_POLL
#define SO_PREFER_BUSY_POLL 69
#endif
/* One UDP_SEGMENT send: at most this many datagrams (the kernel's limit before 6.11), and bytes. */
#define GSO_MAX_SEGMENTS 64
#define GSO_MAX_BYTES 65000
/* Destinations of one batch's sends, hashed (a power of two, at least twice MAX_BATCH). */
#define DEST_HASH 512
#define GSO_CMSG_SPACE CMSG_SPACE(sizeof(uint16_t))
#define GRO_CMSG_SPACE CMSG_SPACE(sizeof(int))
/* A receive slot with UDP_GRO: the largest datagram the kernel may coalesce into one receive,
 * plus 320 bytes so that the slots' first bytes do not all fall into the same cache sets. */
#define GRO_SLOT (65536 + 320)
/* Flags of a received datagram (an entry). */
#define ENTRY_TRUNC 1    /* cut short: longer than the socket's max_len (or than the slot) */
#define ENTRY_BAD_SRC 2  /* not from an IPv4 address (cannot happen on an AF_INET socket) */

/* ---- allocation table: open addressing keyed by the 16 id bytes ------------------------------ */

enum { BOUND_NONE = 0, BOUND_UDP = 1, BOUND_DTLS = 2 };

typedef struct {
  uint8_t id[ID_LEN];
  uint8_t state; /* 0 empty, 1 live, 2 tombstone */
  uint8_t bound; /* BOUND_* */
  uint32_t addr; /* network order (BOUND_UDP) */
  uint16_t port; /* network order (BOUND_UDP) */
  uint32_t assoc_id; /* the DTLS association it is bound through (BOUND_DTLS) */
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
  /* The two halves multiplied and folded (a few instructions, where FNV-1a's 16 dependent
   * multiplies showed in profiles): ids are random, and structured ones still spread. */
  uint64_t a, b;
  memcpy(&a, id, 8);
  memcpy(&b, id + 8, 8);
  uint64_t h = (a ^ (b * 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 31;
  h *= 0x94d049bb133111ebull;
  return (uint32_t)(h >> 32);
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

/* ---- DTLS associations held by the native side ------------------------------------------------
 *
 * Each is found by its remote address and port (a datagram's source) and by the id JavaScript
 * gave it (a binding names it). Chained hashing in two bucket arrays; every node is its own
 * allocation, so pointers stay valid until the node is removed (always under the plane lock).
 */

typedef struct assoc {
  /* The plane lock guards the chains and membership; the fields below `mu` are guarded by `mu`,
   * so the worker opens and seals records with the plane lock released. */
  struct assoc *next_addr;
  struct assoc *next_id;
  /* References: one while in the table, one per worker batch (or JavaScript call) using it. The
   * last to let go frees it. `dead` (atomic) is set when it leaves the table: the worker then
   * stops using it, and JavaScript reads its final state under `mu`. */
  int refs;
  int dead;
  pthread_mutex_t mu;
  /* Immutable once in the table. */
  uint32_t id;
  uint32_t addr; /* network order */
  uint16_t port; /* network order */
  uint16_t epoch;
  /* Set when a datagram from this peer that authenticated under this association's keys (an
   * alert, a handshake record, several records) went to JavaScript as it arrived: from then on
   * everything from it does, in order, until JavaScript has taken the association back and handed
   * it over again (so nothing is decrypted here that JavaScript must see first). Nothing that
   * fails authentication ever sets it: junk from a spoofed source cannot move the association. */
  uint8_t suspended;
  /* An application record authenticated: the peer has our Finished. */
  uint8_t app_seen;
  /* JavaScript has a new handshake in progress from this address and port (a reconnection that
   * proved its address with a cookie): its epoch-0 flight and its epoch-1 Finished, which does not
   * authenticate under this association's keys, go to JavaScript instead of being dropped. */
  uint8_t expect_hs;
  /* The keys as JavaScript handed them over: the only copy while the association is held here
   * (JavaScript zeroes its own); dtlsDetach writes them back. Wiped when the node is freed. */
  uint8_t key_len;
  uint8_t iv_len;
  uint8_t read_key[32];
  uint8_t read_iv[12];
  uint8_t write_key[32];
  uint8_t write_iv[12];
  uint32_t max_plaintext;
  uint64_t write_seq; /* next sequence number to send */
  dtls_replay_t replay;
  int64_t last_rx_ms; /* -1: nothing received here yet */
  dtls_dir_t rd;
  dtls_dir_t wr;
} assoc_t;

typedef struct {
  assoc_t **by_addr;
  assoc_t **by_id;
  uint32_t nbuckets; /* power of two, or 0 */
  uint32_t count;
} assocs_t;

static uint32_t mix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return h;
}

static uint32_t addr_hash(uint32_t addr, uint16_t port) {
  return mix32(addr ^ ((uint32_t)port * 0x9e3779b9u));
}

static assoc_t *assoc_by_addr(const assocs_t *t, uint32_t addr, uint16_t port) {
  if (t->nbuckets == 0) return NULL;
  for (assoc_t *a = t->by_addr[addr_hash(addr, port) & (t->nbuckets - 1)]; a != NULL; a = a->next_addr)
    if (a->addr == addr && a->port == port) return a;
  return NULL;
}

static assoc_t *assoc_by_id(const assocs_t *t, uint32_t id) {
  if (t->nbuckets == 0) return NULL;
  for (assoc_t *a = t->by_id[mix32(id) & (t->nbuckets - 1)]; a != NULL; a = a->next_id)
    if (a->id == id) return a;
  return NULL;
}

static void assoc_free(assoc_t *a) {
  dtls_dir_free(&a->rd);
  dtls_dir_free(&a->wr);
  pthread_mutex_destroy(&a->mu);
  explicit_bzero(a, sizeof(*a));
  free(a);
}

static assoc_t *assoc_new(void) {
  assoc_t *a = calloc(1, sizeof(assoc_t));
  if (a == NULL) return NULL;
  if (pthread_mutex_init(&a->mu, NULL) != 0) {
    free(a);
    return NULL;
  }
  a->refs = 1;
  return a;
}

static void assoc_ref(assoc_t *a) {
  __atomic_add_fetch(&a->refs, 1, __ATOMIC_RELAXED);
}

static void assoc_unref(assoc_t *a) {
  if (a != NULL && __atomic_sub_fetch(&a->refs, 1, __ATOMIC_ACQ_REL) == 0) assoc_free(a);
}

static int assoc_dead(assoc_t *a) {
  return __atomic_load_n(&a->dead, __ATOMIC_ACQUIRE);
}

/* It left the table (under the plane lock): nobody finds it any more; users still holding it see `dead`. */
static void assoc_retire(assoc_t *a) {
  __atomic_store_n(&a->dead, 1, __ATOMIC_RELEASE);
  assoc_unref(a);
}

/* Unlinks `a` from both chains (it must be in them). */
static void assocs_unlink(assocs_t *t, assoc_t *a) {
  uint32_t mask = t->nbuckets - 1;
  for (assoc_t **pp = &t->by_addr[addr_hash(a->addr, a->port) & mask]; *pp != NULL; pp = &(*pp)->next_addr) {
    if (*pp == a) {
      *pp = a->next_addr;
      break;
    }
  }
  for (assoc_t **pp = &t->by_id[mix32(a->id) & mask]; *pp != NULL; pp = &(*pp)->next_id) {
    if (*pp == a) {
      *pp = a->next_id;
      break;
    }
  }
  t->count--;
}

static int assocs_grow(assocs_t *t) {
  uint32_t n = t->nbuckets == 0 ? 64 : t->nbuckets * 2;
  assoc_t **by_addr = calloc(n, sizeof(assoc_t *));
  assoc_t **by_id = calloc(n, sizeof(assoc_t *));
  if (by_addr == NULL || by_id == NULL) {
    free(by_addr);
    free(by_id);
    return -1;
  }
  for (uint32_t k = 0; k < t->nbuckets; k++) {
    for (assoc_t *a = t->by_addr[k], *next; a != NULL; a = next) {
      next = a->next_addr;
      uint32_t i = addr_hash(a->addr, a->port) & (n - 1);
      a->next_addr = by_addr[i];
      by_addr[i] = a;
    }
    for (assoc_t *a = t->by_id[k], *next; a != NULL; a = next) {
      next = a->next_id;
      uint32_t i = mix32(a->id) & (n - 1);
      a->next_id = by_id[i];
      by_id[i] = a;
    }
  }
  free(t->by_addr);
  free(t->by_id);
  t->by_addr = by_addr;
  t->by_id = by_id;
  t->nbuckets = n;
  return 0;
}

/* Inserts `a`, replacing any association with the same id or the same address and port. */
static int assocs_put(assocs_t *t, assoc_t *a) {
  assoc_t *old = assoc_by_id(t, a->id);
  if (old != NULL) {
    assocs_unlink(t, old);
    assoc_retire(old);
  }
  old = assoc_by_addr(t, a->addr, a->port);
  if (old != NULL) {
    assocs_unlink(t, old);
    assoc_retire(old);
  }
  if (t->count + 1 > t->nbuckets && assocs_grow(t) != 0) return -1;
  uint32_t mask = t->nbuckets - 1;
  uint32_t i = addr_hash(a->addr, a->port) & mask;
  a->next_addr = t->by_addr[i];
  t->by_addr[i] = a;
  uint32_t j = mix32(a->id) & mask;
  a->next_id = t->by_id[j];
  t->by_id[j] = a;
  t->count++;
  return 0;
}

static void assocs_free(assocs_t *t) {
  for (uint32_t k = 0; k < t->nbuckets; k++) {
    for (assoc_t *a = t->by_addr[k], *next; a != NULL; a = next) {
      next = a->next_addr;
      assoc_retire(a);
    }
  }
  free(t->by_addr);
  free(t->by_id);
  memset(t, 0, sizeof(*t));
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
  /* The DTLS socket. Forwards are counted in C_FORWARDED and C_BYTES_FORWARDED too. */
  C_DTLS_RECEIVED,
  C_DTLS_TO_JS,
  C_DTLS_DECRYPTED_TO_JS,
  C_DTLS_FORWARDED_IN,
  C_DTLS_SEALED_OUT,
  C_DTLS_DROP_REPLAY,
  C_DTLS_DROP_BAD_MAC,
  C_DTLS_DROP_TOO_LARGE,
  C_DTLS_SEALED_FOR_JS, /* records JavaScript sent through dtlsSeal */
  /* Datagrams from the address of an association held here that did not authenticate under its
   * keys (and were not a ClientHello or part of a handshake JavaScript expects), dropped here
   * without changing anything: by why. */
  C_DTLS_JUNK_TRUNCATED,   /* a header or fragment cut short, or larger than the receive slot */
  C_DTLS_JUNK_VERSION,     /* not DTLS 1.0 or 1.2 */
  C_DTLS_JUNK_EPOCH,       /* neither epoch 0 nor the association's */
  C_DTLS_JUNK_BAD_MAC,     /* a record of the association's epoch (not a single application record) failing authentication */
  C_DTLS_JUNK_REPLAY,      /* such a record already seen */
  C_DTLS_JUNK_TOO_LARGE,   /* such a record over the plaintext limit */
  C_DTLS_JUNK_PLAINTEXT,   /* epoch-0 records other than a ClientHello, once the peer has our Finished */
  C_DTLS_SUSPENDED,        /* associations handed back because an authenticated record needs JavaScript */
  C_DTLS_ATTACHED,         /* hand-overs JavaScript → native (dtlsAttach accepted) */
  C_DTLS_DETACHED,         /* hand-overs native → JavaScript (dtlsDetach returned a state) */
  C_DROP_JS_CALL,          /* datagrams of batches dropped because a Node-API call failed on the JS thread */
  C_GSO_SENDS,             /* UDP_SEGMENT sends (each two datagrams or more to one destination) */
  C_GSO_DATAGRAMS,         /* datagrams in them */
  C_GSO_FALLBACKS,         /* UDP_SEGMENT sends the kernel refused, sent again one datagram at a time */
  C_GRO_RECEIVED,          /* coalesced receives (UDP_GRO), each split back into its datagrams */
  C_GRO_DATAGRAMS,         /* datagrams in them */
  C_COALESCED,             /* wake-ups after which the worker slept to let the next batch gather */
  C_DIRECT_RECEIVES,       /* of those, the ones whose receives (straight after the sleep, no poll) found datagrams */
  C_COUNT
};

/* What JavaScript receives per datagram: 6 int32 each. */
enum { META_OFFSET, META_LENGTH, META_IPV4, META_PORT, META_KIND, META_ASSOC, META_WIDTH };
/* META_KIND: which socket, and whether the bytes are a datagram or a record's plaintext. */
enum { KIND_UDP = 0, KIND_DTLS_DATAGRAM = 1, KIND_DTLS_RECORD = 2, KIND_DTLS_DROP = 3 };
/*
 * META_ASSOC of a KIND_DTLS_DROP: why a record was dropped (no bytes follow), in the JavaScript
 * server's terms; META_OFFSET is then how many such drops from that source this notice stands
 * for (one notice per reason and source per batch, so a flood costs JavaScript one call a batch).
 * META_ASSOC of a KIND_DTLS_DATAGRAM: the id of the association held here that inspected the
 * datagram and still holds it (JavaScript need not take it back for it), or 0.
 */
enum {
  DROP_REPLAY = 1,
  DROP_BAD_MAC = 2,
  DROP_TOO_LARGE = 3,
  DROP_TRUNCATED = 4,
  DROP_BAD_VERSION = 5,
  DROP_BAD_EPOCH = 6,
  DROP_UNEXPECTED_PLAINTEXT = 7,
  DROP_REASONS = 8
};

typedef struct js_batch {
  uint32_t count;
  uint32_t bytes;
  uint32_t cost;
  uint32_t datagrams; /* what the notices and datagrams stand for, for C_DROP_JS_CALL */
  int32_t *meta; /* count * META_WIDTH */
  uint8_t *data;
} js_batch_t;

/* What happened to each datagram of a received batch. The last four are steps within a batch. */
enum {
  DISP_JS = 0,
  DISP_DONE = 1,
  DISP_JS_RECORD = 2,
  DISP_JS_DROP = 3,
  DISP_OPEN = 4,      /* from the address of an association held here: open it (its lock, not the plane's) */
  DISP_ROUTE = 5,     /* opened: a RELAY to check against the table */
  DISP_SEAL = 6,      /* to seal for the association in seal_to (its lock) */
  DISP_SEALED = 7     /* sealed and queued: to count */
};

/*
 * One socket's receive side: recvmmsg vectors over `batch` slots of `slot` bytes, and the datagrams
 * found in them (entries, at most `batch` at a time). Without UDP_GRO a slot holds one datagram;
 * with it, a slot may hold several coalesced by the kernel (all but the last of the size its
 * UDP_GRO control message names), each its own entry. Everything below `addr` is per entry.
 */
typedef struct {
  int fd;
  uint32_t slot;    /* bytes a slot receives: max_len, or 65536 with UDP_GRO */
  uint32_t max_len; /* a datagram longer than this is cut to it and marked truncated */
  int gro;          /* UDP_GRO is on for this socket */
  uint32_t dirty;   /* headers the last recvmmsg filled: the only ones it changed (rx_prepare) */
  uint8_t *buf;
  struct mmsghdr *msgs;
  struct iovec *iov;
  struct sockaddr_in *addr;
  uint8_t *ctrl; /* per slot, GRO_CMSG_SPACE bytes (UDP_GRO only) */
  /* per entry: its bytes, its length, the source (a slot's address), and ENTRY_* flags */
  uint8_t **dat;
  uint32_t *len;
  const struct sockaddr_in **peer;
  uint8_t *eflags;
  /* per datagram: disposition, and for DISP_JS_RECORD where the plaintext is and whose it is
   * (for DISP_JS_DROP: js_assoc is the reason; for DISP_JS: the id of the association that
   * inspected it and still holds it, or 0) */
  uint8_t *disp;
  uint32_t *js_off;
  uint32_t *js_len;
  uint32_t *js_assoc;
  /* per datagram, references held during the batch: the association it came from (DTLS), the
   * association a RELAY is sealed for */
  assoc_t **from;
  assoc_t **seal_to;
} rx_t;

/* Drops from one source for one reason, waiting to be told to JavaScript. */
typedef struct {
  uint32_t ip; /* host order */
  uint16_t port;
  uint8_t reason;
  uint32_t count;
} notice_t;

/* One socket's send side for a batch: sendmmsg vectors. */
typedef struct {
  struct mmsghdr *msgs;
  struct iovec *iov;
  struct sockaddr_in *addr;
  uint32_t *relay_len; /* the RELAY's own length (a sealed record is longer) */
  uint32_t n;
  /* UDP_SEGMENT (GSO): the batch's datagrams grouped by destination, each run of equal sizes to
   * one destination one message. Per grouped position: the iovec, the datagram it came from. */
  struct mmsghdr *gmsgs;
  struct iovec *giov;
  uint32_t *gfrom;
  uint32_t *gfirst; /* per message: its first grouped position, and how many datagrams */
  uint32_t *gcount;
  uint8_t *gctrl; /* per message: GSO_CMSG_SPACE bytes */
  uint32_t *next; /* per datagram: the next one to the same destination, or UINT32_MAX */
  uint32_t *head; /* per destination, in order of first appearance: first and last datagram */
  uint32_t *tail;
  uint32_t *hgen; /* DEST_HASH slots: the send that filled it (no clearing per batch), and its destination */
  uint32_t *hdest;
  uint32_t gen;
} tx_t;

/* Counted by the worker alone during a batch, added to the shared counters once per batch. */
typedef struct {
  uint64_t forwarded;
  uint64_t bytes;
  uint64_t sealed;
  uint64_t dtls_in;
} tally_t;

typedef struct {
  int wake_fd;
  int stopping; /* set (atomically) before wake_fd is written: the worker's hot loop does not poll */
  uint32_t max_datagram;
  uint32_t max_to_dtls; /* largest RELAY sealed for a DTLS peer (bigger ones: JavaScript drops them) */
  uint32_t batch;
  pthread_t thread;
  int running;
  pthread_mutex_t lock;
  table_t table;
  assocs_t assocs;
  uint64_t counters[C_COUNT];
  uint32_t js_pending; /* cost of batches queued for JavaScript, not yet handed over */
  napi_threadsafe_function tsfn;
  /*
   * Lifetime, all on the JavaScript thread: the plane is freed when both its handle (the external)
   * and its thread-safe function are finalized, whichever comes last (`refs`). The worker is
   * stopped before either lets go, so it never calls into a released function or freed memory.
   */
  int refs;
  int tsfn_live;     /* created and not yet finalized */
  int tsfn_released; /* this side released its reference (close, the handle's finalizer, a failed open) */
  /* worker-owned buffers */
  rx_t udp;  /* fd < 0: no plain UDP socket */
  rx_t dtls; /* fd < 0: no DTLS socket */
  tx_t tx_udp;
  tx_t tx_dtls;
  uint8_t *seal_buf; /* batch * seal_slot: records sealed for DTLS peers */
  uint32_t seal_slot;
  uint8_t *scratch; /* dtls slot bytes: where records are opened only to authenticate them */
  /* JavaScript-thread scratch for dtlsSeal (only that thread uses it) */
  uint8_t *js_seal_buf;
  uint32_t js_seal_cap;
  /* Kernel offloads and tuning, chosen at open from what GAMEWIRE_NATIVE_TUNING asks and what the
   * kernel accepts (see js_open); GSO turns itself off when sends with it keep failing. */
  int gso;                   /* runs of equal-size datagrams to one destination: one UDP_SEGMENT send (worker) */
  uint32_t gso_failures;     /* GSO sends failed in a row (worker) */
  int gro;                   /* UDP_GRO on the plain UDP socket */
  int busy_poll_us;          /* SO_BUSY_POLL on the sockets, 0: none */
  int drain;                 /* receive again before polling: 0 no, 1 after a full batch, 2 after any */
  int linger_us;             /* after handling what poll found, sleep this long (0: not) */
  int spin_us;               /* after handling what poll found, keep receiving this long (0: not) */
  int coalesce_us;           /* adaptive coalescing: the longest sleep after a wake-up (0: off) */
  uint32_t coalesce_min_pps; /* ... taken only while datagrams arrive at least this fast */
  unsigned long timer_slack_ns; /* the worker's timer slack while it coalesces */
  int direct;                /* after a coalescing sleep, receive without polling first */
  tally_t tally; /* worker only */
  notice_t notices[MAX_NOTICES]; /* worker only */
  uint32_t nnotices;
  int64_t notices_since_ms;
} plane_t;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void count(plane_t *p, int c, uint64_t n) {
  __atomic_add_fetch(&p->counters[c], n, __ATOMIC_RELAXED);
}

static void tx_add(tx_t *tx, uint8_t *data, uint32_t len, uint32_t relay_len, uint32_t addr, uint16_t port) {
  uint32_t k = tx->n++;
  tx->relay_len[k] = relay_len;
  tx->iov[k].iov_base = data;
  tx->iov[k].iov_len = len;
  memset(&tx->addr[k], 0, sizeof(struct sockaddr_in));
  tx->addr[k].sin_family = AF_INET;
  tx->addr[k].sin_addr.s_addr = addr;
  tx->addr[k].sin_port = port;
  memset(&tx->msgs[k].msg_hdr, 0, sizeof(struct msghdr));
  tx->msgs[k].msg_hdr.msg_iov = &tx->iov[k];
  tx->msgs[k].msg_hdr.msg_iovlen = 1;
  tx->msgs[k].msg_hdr.msg_name = &tx->addr[k];
  tx->msgs[k].msg_hdr.msg_namelen = sizeof(struct sockaddr_in);
}

/*
 * The RELAY checks of the JS relay for a message it forwards: magic, version, type, header length,
 * the data length field, and the size limit. The sender and target checks follow in the callers.
 */
static int is_forwardable_relay(const plane_t *p, const uint8_t *m, uint32_t len) {
  if (len < RELAY_HEADER_LEN || len > p->max_datagram) return 0;
  if (m[0] != 0xda || m[1] != 0x72 || m[2] != 0 || m[3] != 10) return 0;
  uint32_t data_len = ((uint32_t)m[36] << 8) | m[37];
  return data_len == len - RELAY_HEADER_LEN;
}

/* Counts a forward of `len` bytes from `src` to `dst` (either may be gone by now). Plane lock held. */
static void count_forward(plane_t *p, entry_t *src, entry_t *dst, uint32_t len, int64_t now) {
  if (src != NULL) {
    src->last_seen_ms = now;
    src->packets_in++;
    src->bytes_in += len;
  }
  if (dst != NULL) {
    dst->packets_out++;
    dst->bytes_out += len;
  }
  p->tally.forwarded++;
  p->tally.bytes += len;
}

/*
 * Routes the RELAY `m` (datagram or plaintext `i` of the batch) to its target `dst`: queued
 * unchanged for a UDP peer (DISP_DONE), or, for a DTLS peer the native side holds, that
 * association referenced in seal_to[i] to be sealed for with the plane lock released (DISP_SEAL).
 * 0 when the target cannot be served here (JavaScript decides). Plane lock held.
 */
static int route_to(plane_t *p, rx_t *rx, uint32_t i, entry_t *src, entry_t *dst, uint8_t *m, uint32_t len,
                    int64_t now) {
  if (dst->bound == BOUND_UDP) {
    if (p->udp.fd < 0) return 0;
    tx_add(&p->tx_udp, m, len, len, dst->addr, dst->port);
    count_forward(p, src, dst, len, now);
    return DISP_DONE;
  }
  if (dst->bound == BOUND_DTLS) {
    /* No DTLS socket: no seal buffer either. */
    if (p->seal_buf == NULL || p->dtls.fd < 0 || len > p->max_to_dtls) return 0;
    assoc_t *t = assoc_by_id(&p->assocs, dst->assoc_id);
    if (t == NULL || len > t->max_plaintext) return 0;
    assoc_ref(t);
    rx->seal_to[i] = t;
    return DISP_SEAL;
  }
  return 0;
}

/*
 * Seals the RELAY `m` for seal_to[i] with its next sequence number and queues it: 1, or 0 when it
 * cannot (the association left meanwhile, its sequence numbers are spent). Its lock, not the plane's.
 */
static int seal_for(plane_t *p, rx_t *rx, uint32_t i, const uint8_t *m, uint32_t len) {
  assoc_t *t = rx->seal_to[i];
  uint8_t *seal = p->seal_buf + (size_t)i * p->seal_slot;
  int ok = 0;
  pthread_mutex_lock(&t->mu);
  if (!assoc_dead(t) && t->write_seq <= DTLS_MAX_SEQ) {
    long r = dtls_seal(&t->wr, 23, t->epoch, t->write_seq, m, len, seal, p->seal_slot);
    if (r >= 0) {
      t->write_seq++;
      tx_add(&p->tx_dtls, seal, (uint32_t)r, len, t->addr, t->port);
      ok = 1;
    }
  }
  pthread_mutex_unlock(&t->mu);
  return ok;
}

/*
 * A datagram from the plain UDP socket: a RELAY whose sender is bound from exactly this address and
 * port, to a linked, bound target. Anything else returns 0 and goes to JavaScript, which decides
 * (and answers ERROR 3 or 5 where the JS relay does). Plane lock held.
 */
static int udp_route(plane_t *p, rx_t *rx, uint32_t i, uint8_t *m, uint32_t len, int64_t now) {
  const struct sockaddr_in *from = rx->peer[i];
  if (!is_forwardable_relay(p, m, len)) return 0;
  entry_t *src = table_find(&p->table, m + 4);
  if (src == NULL || src->bound != BOUND_UDP || src->addr != from->sin_addr.s_addr || src->port != from->sin_port)
    return 0;
  if (!peers_has(src, m + 20)) return 0;
  entry_t *dst = table_find(&p->table, m + 20);
  if (dst == NULL) return 0;
  rx->js_off[i] = 0;
  rx->js_len[i] = len;
  return route_to(p, rx, i, src, dst, m, len, now);
}

/* A datagram from the address of an association held here, dropped here as junk (counted). */
static int junk(plane_t *p, rx_t *rx, uint32_t i, int counter, uint32_t reason) {
  count(p, counter, 1);
  rx->js_assoc[i] = reason;
  return DISP_JS_DROP;
}

/*
 * Any datagram from the address of association `a` other than a single application record of its
 * epoch: what the JavaScript server would have to see, or junk.
 *
 * - Every record's header must be whole and name DTLS 1.0 or 1.2, and its epoch must be 0 or the
 *   association's; otherwise the datagram is junk.
 * - Each record of the association's epoch is checked like an application record (size, replay
 *   window, authentication under the association's read keys, in a scratch buffer, and wiped:
 *   JavaScript opens it again). One that fails makes the datagram junk, except a handshake record
 *   while JavaScript expects a new handshake from this address (its Finished, under keys not known
 *   here) or before the peer has shown it has our Finished (its last flight again, Finished
 *   included). When at least one authenticates, the association is suspended and the datagram
 *   goes to JavaScript, which takes the association back: an alert, a close, a retransmitted
 *   Finished, a renegotiation attempt, several records. Nothing unauthenticated can do that.
 * - A datagram of epoch-0 records only goes to JavaScript, the association staying here, when one
 *   of them is a ClientHello (a reconnection or Unity's probe), when JavaScript expects a new
 *   handshake from this address, or while the peer has not shown it has our Finished (its last
 *   flight again, JavaScript resends ours); otherwise it is junk.
 */
static int dtls_inspect(plane_t *p, assoc_t *a, rx_t *rx, uint32_t i, const uint8_t *m, uint32_t len) {
  const dtls_suite_t *s = a->rd.suite;
  uint32_t off = 0;
  int epoch0 = 0, hello = 0, authentic = 0;
  /* While JavaScript may need unauthenticated handshake records from this address: a new
   * handshake it expects, or our Finished not yet acknowledged (the client's last flight again,
   * with its already-seen Finished). */
  int lenient = a->expect_hs || !a->app_seen;
  while (off < len) {
    if (len - off < DTLS_HEADER_LEN) return junk(p, rx, i, C_DTLS_JUNK_TRUNCATED, DROP_TRUNCATED);
    const uint8_t *r = m + off;
    uint16_t version = (uint16_t)(((uint16_t)r[1] << 8) | r[2]);
    if (version != 0xfefd && version != 0xfeff) return junk(p, rx, i, C_DTLS_JUNK_VERSION, DROP_BAD_VERSION);
    uint32_t fragment = ((uint32_t)r[11] << 8) | r[12];
    if (fragment > len - off - DTLS_HEADER_LEN) return junk(p, rx, i, C_DTLS_JUNK_TRUNCATED, DROP_TRUNCATED);
    uint16_t epoch = (uint16_t)(((uint16_t)r[3] << 8) | r[4]);
    uint32_t rec_len = DTLS_HEADER_LEN + fragment;
    if (epoch == 0) {
      epoch0 = 1;
      if (r[0] == 22 && fragment >= 1 && r[DTLS_HEADER_LEN] == 1) hello = 1;
    } else if (epoch == a->epoch) {
      int handshake = r[0] == 22;
      if ((long)fragment - (long)dtls_overhead(s) + DTLS_HEADER_LEN > (long)a->max_plaintext) {
        if (!(handshake && lenient)) return junk(p, rx, i, C_DTLS_JUNK_TOO_LARGE, DROP_TOO_LARGE);
      } else {
        uint64_t seq = 0;
        for (int k = 0; k < 6; k++) seq = (seq << 8) | r[5 + k];
        long n = -1;
        if (dtls_replay_fresh(&a->replay, seq)) {
          n = dtls_open(&a->rd, r, rec_len, p->scratch);
          if (n > 0) explicit_bzero(p->scratch, (size_t)n);
          if (n >= 0) authentic = 1;
        } else if (!(handshake && lenient)) {
          return junk(p, rx, i, C_DTLS_JUNK_REPLAY, DROP_REPLAY);
        }
        if (n < 0 && !(handshake && lenient)) return junk(p, rx, i, C_DTLS_JUNK_BAD_MAC, DROP_BAD_MAC);
      }
    } else {
      return junk(p, rx, i, C_DTLS_JUNK_EPOCH, DROP_BAD_EPOCH);
    }
    off += rec_len;
  }
  if (authentic) {
    a->suspended = 1;
    count(p, C_DTLS_SUSPENDED, 1);
    return DISP_JS;
  }
  if (!epoch0 || hello || lenient) {
    /* Inspected here, and the association stays here: JavaScript need not take it back. */
    rx->js_assoc[i] = a->id;
    return DISP_JS;
  }
  return junk(p, rx, i, C_DTLS_JUNK_PLAINTEXT, DROP_UNEXPECTED_PLAINTEXT);
}

/*
 * A datagram from the DTLS socket, from the address of association `a` (referenced). Returns its
 * disposition. Handled here: one application_data record filling the datagram, fresh in its replay
 * window, within the size limit and authentic; it is then routed (DISP_ROUTE: a RELAY, checked
 * against the table next) or handed to JavaScript decrypted. Such a record that is replayed, too
 * large or not authentic is dropped, as the JavaScript server would, and JavaScript is told (with
 * no bytes) so its drop counters and events stay the same on both planes. Anything else from this
 * address is inspected (`dtls_inspect`): junk is dropped here; what JavaScript must see goes to it.
 * A suspended association's datagrams, and those of one that left meanwhile, go to JavaScript as
 * they arrived. Runs under the association's lock only: the plane lock is not held.
 */
static int dtls_open_from(plane_t *p, assoc_t *a, rx_t *rx, uint32_t i, uint32_t len, int truncated, int64_t now) {
  uint8_t *m = rx->dat[i];
  if (assoc_dead(a) || a->suspended) return DISP_JS;
  if (truncated) return junk(p, rx, i, C_DTLS_JUNK_TRUNCATED, DROP_TRUNCATED);
  int whole = len >= DTLS_HEADER_LEN && (((uint32_t)m[11] << 8) | m[12]) == len - DTLS_HEADER_LEN;
  uint16_t version = whole ? (uint16_t)(((uint16_t)m[1] << 8) | m[2]) : 0;
  uint16_t epoch = whole ? (uint16_t)(((uint16_t)m[3] << 8) | m[4]) : 0;
  if (!whole || m[0] != 23 || (version != 0xfefd && version != 0xfeff) || epoch != a->epoch)
    return dtls_inspect(p, a, rx, i, m, len);
  const dtls_suite_t *s = a->rd.suite;
  uint32_t fragment = len - DTLS_HEADER_LEN;
  /* The JavaScript server's order: size, then replay, then authentication. */
  if ((long)fragment - (long)dtls_overhead(s) + DTLS_HEADER_LEN > (long)a->max_plaintext) {
    count(p, C_DTLS_DROP_TOO_LARGE, 1);
    rx->js_assoc[i] = DROP_TOO_LARGE;
    return DISP_JS_DROP;
  }
  uint64_t seq = 0;
  for (int k = 0; k < 6; k++) seq = (seq << 8) | m[5 + k];
  if (!dtls_replay_fresh(&a->replay, seq)) {
    count(p, C_DTLS_DROP_REPLAY, 1);
    rx->js_assoc[i] = DROP_REPLAY;
    return DISP_JS_DROP;
  }
  uint8_t *pt = m + DTLS_HEADER_LEN + s->explicit_nonce_len;
  long n = dtls_open(&a->rd, m, len, pt);
  if (n < 0) {
    count(p, C_DTLS_DROP_BAD_MAC, 1);
    rx->js_assoc[i] = DROP_BAD_MAC;
    return DISP_JS_DROP;
  }
  dtls_replay_mark(&a->replay, seq);
  a->last_rx_ms = now;
  a->app_seen = 1;
  uint32_t plen = (uint32_t)n;
  rx->js_off[i] = (uint32_t)(pt - m);
  rx->js_len[i] = plen;
  rx->js_assoc[i] = a->id;
  return is_forwardable_relay(p, pt, plen) ? DISP_ROUTE : DISP_JS_RECORD;
}

/*
 * An opened RELAY from association `assoc_id`: forwarded when its sender allocation is bound
 * through this very association and its target is linked and bound (over UDP, or through another
 * association held here); otherwise JavaScript gets the plaintext. Plane lock held.
 */
static int dtls_route(plane_t *p, rx_t *rx, uint32_t i, uint32_t assoc_id, int64_t now) {
  uint8_t *pt = rx->dat[i] + rx->js_off[i];
  uint32_t plen = rx->js_len[i];
  entry_t *src = table_find(&p->table, pt + 4);
  if (src == NULL || src->bound != BOUND_DTLS || src->assoc_id != assoc_id || !peers_has(src, pt + 20))
    return DISP_JS_RECORD;
  entry_t *dst = table_find(&p->table, pt + 20);
  if (dst == NULL) return DISP_JS_RECORD;
  int d = route_to(p, rx, i, src, dst, pt, plen, now);
  if (d == DISP_DONE) p->tally.dtls_in++;
  return d != 0 ? d : DISP_JS_RECORD;
}

/* A datagram (position k of the batch) the kernel refused: counted, and no longer a forward. */
static void send_failed(plane_t *p, tx_t *tx, uint32_t k) {
  count(p, C_DROP_SEND_FAILED, 1);
  __atomic_sub_fetch(&p->counters[C_FORWARDED], 1, __ATOMIC_RELAXED);
  __atomic_sub_fetch(&p->counters[C_BYTES_FORWARDED], tx->relay_len[k], __ATOMIC_RELAXED);
}

/* sendmmsg until every message is out; `failed` handles a message the kernel refuses (then skipped). */
static void send_msgs(plane_t *p, int fd, tx_t *tx, struct mmsghdr *msgs, uint32_t n,
                      void (*failed)(plane_t *, int, tx_t *, uint32_t, int)) {
  uint32_t done = 0;
  int tries = 0;
  while (done < n) {
    int r = sendmmsg(fd, msgs + done, n - done, 0);
    if (r > 0) {
      done += (uint32_t)r;
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && tries++ < 3) {
      struct pollfd pfd = {.fd = fd, .events = POLLOUT};
      poll(&pfd, 1, 2);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    /* This message cannot be sent (an unreachable peer, a full buffer, an offload refused). */
    failed(p, fd, tx, done, r < 0 ? errno : EIO);
    done++;
  }
}

static void plain_failed(plane_t *p, int fd, tx_t *tx, uint32_t m, int err) {
  (void)fd;
  (void)err;
  send_failed(p, tx, m);
}

/* A UDP_SEGMENT message refused: its datagrams go one at a time. Several refusals in a row (a
 * route or device without the offload): GSO is off for this plane from then on. */
static void gso_failed(plane_t *p, int fd, tx_t *tx, uint32_t m, int err) {
  uint32_t first = tx->gfirst[m], n = tx->gcount[m];
  if (n == 1) {
    send_failed(p, tx, tx->gfrom[first]);
    return;
  }
  count(p, C_GSO_FALLBACKS, 1);
  __atomic_sub_fetch(&p->counters[C_GSO_SENDS], 1, __ATOMIC_RELAXED);
  __atomic_sub_fetch(&p->counters[C_GSO_DATAGRAMS], n, __ATOMIC_RELAXED);
  if ((err == EIO || err == EINVAL || err == ENOPROTOOPT || err == EOPNOTSUPP) && ++p->gso_failures >= 8)
    __atomic_store_n(&p->gso, 0, __ATOMIC_RELAXED);
  for (uint32_t j = 0; j < n; j++) {
    uint32_t k = tx->gfrom[first + j];
    ssize_t r;
    do {
      r = sendto(fd, tx->iov[k].iov_base, tx->iov[k].iov_len, 0, (struct sockaddr *)&tx->addr[k],
                 sizeof(struct sockaddr_in));
    } while (r < 0 && errno == EINTR);
    if (r < 0) send_failed(p, tx, k);
  }
}

/*
 * The batch with UDP_SEGMENT: its datagrams grouped by destination (the order to each destination
 * kept), each run of datagrams of one size to one destination (the last may be shorter, as the
 * kernel allows) one message, up to GSO_MAX_SEGMENTS datagrams and GSO_MAX_BYTES bytes. A lone
 * datagram is a message of its own, without the option.
 */
static void send_gso(plane_t *p, int fd, tx_t *tx) {
  uint32_t n = tx->n, ndest = 0;
  uint32_t gen = ++tx->gen;
  if (gen == 0) {
    memset(tx->hgen, 0, sizeof(uint32_t) * DEST_HASH);
    gen = tx->gen = 1;
  }
  for (uint32_t k = 0; k < n; k++) {
    uint32_t addr = tx->addr[k].sin_addr.s_addr;
    uint16_t port = tx->addr[k].sin_port;
    uint32_t h = addr_hash(addr, port) & (DEST_HASH - 1);
    uint32_t d = UINT32_MAX;
    while (tx->hgen[h] == gen) {
      uint32_t c = tx->hdest[h];
      const struct sockaddr_in *a = &tx->addr[tx->head[c]];
      if (a->sin_addr.s_addr == addr && a->sin_port == port) {
        d = c;
        break;
      }
      h = (h + 1) & (DEST_HASH - 1);
    }
    tx->next[k] = UINT32_MAX;
    if (d == UINT32_MAX) {
      d = ndest++;
      tx->hgen[h] = gen;
      tx->hdest[h] = d;
      tx->head[d] = k;
    } else {
      tx->next[tx->tail[d]] = k;
    }
    tx->tail[d] = k;
  }
  uint32_t pos = 0, nmsg = 0;
  for (uint32_t d = 0; d < ndest; d++) {
    uint32_t k = tx->head[d];
    while (k != UINT32_MAX) {
      uint32_t first = pos, size = (uint32_t)tx->iov[k].iov_len, bytes = 0, segs = 0;
      while (k != UINT32_MAX && segs < GSO_MAX_SEGMENTS) {
        uint32_t len = (uint32_t)tx->iov[k].iov_len;
        if (len > size || bytes + len > GSO_MAX_BYTES || (segs > 0 && size == 0)) break;
        tx->giov[pos] = tx->iov[k];
        tx->gfrom[pos] = k;
        pos++;
        segs++;
        bytes += len;
        k = tx->next[k];
        if (len < size) break; /* a shorter one ends the run */
      }
      struct msghdr *h = &tx->gmsgs[nmsg].msg_hdr;
      memset(h, 0, sizeof(*h));
      h->msg_iov = &tx->giov[first];
      h->msg_iovlen = segs;
      h->msg_name = &tx->addr[tx->gfrom[first]];
      h->msg_namelen = sizeof(struct sockaddr_in);
      if (segs > 1) {
        uint8_t *ctrl = tx->gctrl + (size_t)nmsg * GSO_CMSG_SPACE;
        memset(ctrl, 0, GSO_CMSG_SPACE);
        h->msg_control = ctrl;
        h->msg_controllen = GSO_CMSG_SPACE;
        struct cmsghdr *cm = CMSG_FIRSTHDR(h);
        cm->cmsg_level = SOL_UDP;
        cm->cmsg_type = UDP_SEGMENT;
        cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t gso_size = (uint16_t)size;
        memcpy(CMSG_DATA(cm), &gso_size, sizeof(gso_size));
        count(p, C_GSO_SENDS, 1);
        count(p, C_GSO_DATAGRAMS, segs);
      }
      tx->gfirst[nmsg] = first;
      tx->gcount[nmsg] = segs;
      nmsg++;
    }
  }
  uint64_t before = __atomic_load_n(&p->counters[C_GSO_FALLBACKS], __ATOMIC_RELAXED);
  send_msgs(p, fd, tx, tx->gmsgs, nmsg, gso_failed);
  if (__atomic_load_n(&p->counters[C_GSO_FALLBACKS], __ATOMIC_RELAXED) == before) p->gso_failures = 0;
}

/* Sends a batch; a datagram the kernel refuses is counted and skipped. */
static void send_all(plane_t *p, int fd, tx_t *tx) {
  if (__atomic_load_n(&p->gso, __ATOMIC_RELAXED) && tx->n > 1) send_gso(p, fd, tx);
  else send_msgs(p, fd, tx, tx->msgs, tx->n, plain_failed);
  tx->n = 0;
}

/* Adds a drop from this source and reason to the pending notices (worker only). 0 when full. */
static int notice_add(plane_t *p, const struct sockaddr_in *from, uint32_t reason) {
  uint32_t ip = ntohl(from->sin_addr.s_addr);
  uint16_t port = ntohs(from->sin_port);
  for (uint32_t k = 0; k < p->nnotices; k++) {
    notice_t *e = &p->notices[k];
    if (e->ip == ip && e->port == port && e->reason == reason) {
      e->count++;
      return 1;
    }
  }
  if (p->nnotices == MAX_NOTICES) return 0;
  if (p->nnotices == 0) p->notices_since_ms = now_ms();
  p->notices[p->nnotices++] = (notice_t){.ip = ip, .port = port, .reason = reason, .count = 1};
  return 1;
}

/*
 * Copies what JavaScript handles out of a received batch (none: `rx` NULL) into one batch it
 * receives at once. Drop notices wait in the plane (`notices`, one per source and reason, with a
 * count) and go along with the next batch JavaScript gets anyway, or on their own once they are
 * NOTICE_MS old: a flood of junk costs JavaScript a call every NOTICE_MS, not one per datagram
 * or per batch.
 */
static void hand_to_js(plane_t *p, rx_t *rx, int n, int is_dtls) {
  uint32_t njs = 0; /* datagrams and records */
  uint32_t js_bytes = 0;
  for (int i = 0; rx != NULL && i < n; i++) {
    if (rx->disp[i] == DISP_JS) {
      njs++;
      js_bytes += rx->len[i];
    } else if (rx->disp[i] == DISP_JS_RECORD) {
      njs++;
      js_bytes += rx->js_len[i];
    } else if (rx->disp[i] == DISP_JS_DROP) {
      if (!notice_add(p, rx->peer[i], rx->js_assoc[i] < DROP_REASONS ? rx->js_assoc[i] : DROP_BAD_MAC)) {
        /* Notices from more sources than fit: hand them over now, then this one. */
        hand_to_js(p, NULL, 0, 0);
        notice_add(p, rx->peer[i], rx->js_assoc[i] < DROP_REASONS ? rx->js_assoc[i] : DROP_BAD_MAC);
      }
    }
  }
  uint32_t nnotices = 0;
  if (p->nnotices > 0 && (njs > 0 || rx == NULL || now_ms() - p->notices_since_ms >= NOTICE_MS))
    nnotices = p->nnotices;
  if (njs + nnotices == 0) return;
  uint32_t entries = njs + nnotices;
  int c_to_js = is_dtls ? C_DTLS_TO_JS : C_TO_JS;
  uint32_t cost = js_bytes + JS_DATAGRAM_COST * entries;
  if (__atomic_load_n(&p->js_pending, __ATOMIC_RELAXED) + cost > MAX_JS_PENDING) {
    /* JavaScript is this far behind: drop, as a full receive buffer would, and count (the notices
     * stay pending, and are tried again in NOTICE_MS). */
    count(p, C_DROP_BACKLOG, njs);
    if (nnotices > 0) p->notices_since_ms = now_ms();
    return;
  }
  js_batch_t *b = malloc(sizeof(js_batch_t));
  uint8_t *data = malloc(js_bytes == 0 ? 1 : js_bytes);
  int32_t *meta = malloc(sizeof(int32_t) * META_WIDTH * entries);
  if (b == NULL || data == NULL || meta == NULL) {
    free(b);
    free(data);
    free(meta);
    count(p, C_DROP_BACKLOG, njs);
    if (nnotices > 0) p->notices_since_ms = now_ms();
    return;
  }
  uint32_t off = 0;
  uint32_t k = 0;
  uint32_t raw = 0, records = 0;
  for (int i = 0; rx != NULL && i < n; i++) {
    uint8_t d = rx->disp[i];
    if (d != DISP_JS && d != DISP_JS_RECORD) continue;
    const uint8_t *src = rx->dat[i];
    uint32_t len = rx->len[i];
    int32_t kind = is_dtls ? KIND_DTLS_DATAGRAM : KIND_UDP;
    if (d == DISP_JS_RECORD) {
      src += rx->js_off[i];
      len = rx->js_len[i];
      kind = KIND_DTLS_RECORD;
      records++;
    } else {
      raw++;
    }
    if (len > 0) memcpy(data + off, src, len);
    int32_t *mm = meta + (size_t)k * META_WIDTH;
    mm[META_OFFSET] = (int32_t)off;
    mm[META_LENGTH] = (int32_t)len;
    mm[META_IPV4] = (int32_t)ntohl(rx->peer[i]->sin_addr.s_addr);
    mm[META_PORT] = (int32_t)ntohs(rx->peer[i]->sin_port);
    mm[META_KIND] = kind;
    mm[META_ASSOC] = is_dtls ? (int32_t)rx->js_assoc[i] : 0;
    off += len;
    k++;
  }
  for (uint32_t j = 0; j < nnotices; j++, k++) {
    const notice_t *e = &p->notices[j];
    int32_t *mm = meta + (size_t)k * META_WIDTH;
    mm[META_OFFSET] = (int32_t)e->count; /* how many drops this notice stands for */
    mm[META_LENGTH] = 0;
    mm[META_IPV4] = (int32_t)e->ip;
    mm[META_PORT] = (int32_t)e->port;
    mm[META_KIND] = KIND_DTLS_DROP;
    mm[META_ASSOC] = (int32_t)e->reason;
  }
  p->nnotices -= nnotices;
  b->count = k;
  b->bytes = js_bytes;
  b->cost = cost;
  b->datagrams = njs;
  b->data = data;
  b->meta = meta;
  __atomic_add_fetch(&p->js_pending, cost, __ATOMIC_RELAXED);
  napi_status st = napi_call_threadsafe_function(p->tsfn, b, napi_tsfn_nonblocking);
  if (st != napi_ok) {
    /* Closing: drop, count. */
    __atomic_sub_fetch(&p->js_pending, cost, __ATOMIC_RELAXED);
    count(p, C_DROP_BACKLOG, njs);
    free(data);
    free(meta);
    free(b);
  } else {
    if (raw > 0) count(p, c_to_js, raw);
    if (records > 0) count(p, C_DTLS_DECRYPTED_TO_JS, records);
  }
}

/*
 * Receives one batch on `rx` (the UDP or the DTLS socket), forwards what it can, hands over the
 * rest. The plane lock, which every JavaScript call takes, is held only for table look-ups, never
 * for crypto:
 *   1. (plane lock) route UDP datagrams; find the association each DTLS datagram comes from, and
 *      reference it;
 *   2. (each association's own lock) open, check and mark what came from it;
 *   3. (plane lock) route the opened RELAYs; reference the associations to seal for;
 *   4. (each target's own lock) seal and queue;
 *   5. (plane lock) count the sealed forwards per allocation;
 * then send, drop the references, and hand JavaScript its share.
 */
static void process_entries(plane_t *p, rx_t *rx, int n, int is_dtls) {
  int64_t now = now_ms();
  memset(&p->tally, 0, sizeof(p->tally));
  int opens = 0, routes = 0, seals = 0;
  /* 1. Under the plane lock: look-ups only. */
  pthread_mutex_lock(&p->lock);
  for (int i = 0; i < n; i++) {
    uint32_t len = rx->len[i];
    uint8_t *m = rx->dat[i];
    rx->disp[i] = DISP_JS;
    rx->js_assoc[i] = 0;
    rx->from[i] = NULL;
    rx->seal_to[i] = NULL;
    if ((rx->eflags[i] & ENTRY_BAD_SRC) != 0) {
      rx->disp[i] = DISP_DONE; /* cannot happen on an AF_INET socket */
      count(p, C_DROP_BAD_SOURCE, 1);
      continue;
    }
    if (!is_dtls) {
      /* Too large (cut to max + 1 bytes): JavaScript drops and counts it, as it does anyway. */
      if (len > p->max_datagram || (rx->eflags[i] & ENTRY_TRUNC) != 0) {
        if (len > p->max_datagram + 1) rx->len[i] = p->max_datagram + 1;
        continue;
      }
      int d = udp_route(p, rx, (uint32_t)i, m, len, now);
      if (d != 0) rx->disp[i] = (uint8_t)d;
      if (d == DISP_SEAL) seals++;
      continue;
    }
    assoc_t *a = assoc_by_addr(&p->assocs, rx->peer[i]->sin_addr.s_addr, rx->peer[i]->sin_port);
    if (a == NULL) continue; /* an unknown peer (handshakes): JavaScript, as it arrived */
    assoc_ref(a);
    rx->from[i] = a;
    rx->disp[i] = DISP_OPEN;
    opens++;
  }
  pthread_mutex_unlock(&p->lock);
  /* 2. Crypto under each association's own lock. A datagram larger than the slot from an
   * association's address is junk (no valid record is that large); from anyone else it reaches
   * JavaScript cut short, which drops it. */
  for (int i = 0; opens > 0 && i < n; i++) {
    if (rx->disp[i] != DISP_OPEN) continue;
    assoc_t *a = rx->from[i];
    int truncated = (rx->eflags[i] & ENTRY_TRUNC) != 0;
    pthread_mutex_lock(&a->mu);
    int d = dtls_open_from(p, a, rx, (uint32_t)i, rx->len[i], truncated, now);
    pthread_mutex_unlock(&a->mu);
    rx->disp[i] = (uint8_t)d;
    if (d == DISP_ROUTE) routes++;
  }
  /* 3. The opened RELAYs against the table. */
  if (routes > 0) {
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < n; i++) {
      if (rx->disp[i] != DISP_ROUTE) continue;
      int d = dtls_route(p, rx, (uint32_t)i, rx->from[i]->id, now);
      rx->disp[i] = (uint8_t)d;
      if (d == DISP_SEAL) seals++;
    }
    pthread_mutex_unlock(&p->lock);
  }
  /* 4. Seal for DTLS targets under each target's own lock. One that cannot be sealed for any more
   * goes to JavaScript, which decides (as it arrived from UDP, decrypted from DTLS). */
  int sealed = 0;
  for (int i = 0; seals > 0 && i < n; i++) {
    if (rx->disp[i] != DISP_SEAL) continue;
    uint8_t *m = rx->dat[i] + rx->js_off[i];
    if (seal_for(p, rx, (uint32_t)i, m, rx->js_len[i])) {
      rx->disp[i] = DISP_SEALED;
      sealed++;
    } else {
      rx->disp[i] = is_dtls ? DISP_JS_RECORD : DISP_JS;
    }
  }
  /* 5. Count the sealed forwards per allocation (the entries may have moved or gone meanwhile). */
  if (sealed > 0) {
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < n; i++) {
      if (rx->disp[i] != DISP_SEALED) continue;
      const uint8_t *m = rx->dat[i] + rx->js_off[i];
      count_forward(p, table_find(&p->table, m + 4), table_find(&p->table, m + 20), rx->js_len[i], now);
      p->tally.sealed++;
      if (is_dtls) p->tally.dtls_in++;
      rx->disp[i] = DISP_DONE;
    }
    pthread_mutex_unlock(&p->lock);
  }
  tally_t t = p->tally;
  if (t.forwarded > 0) {
    count(p, C_FORWARDED, t.forwarded);
    count(p, C_BYTES_FORWARDED, t.bytes);
  }
  if (t.sealed > 0) count(p, C_DTLS_SEALED_OUT, t.sealed);
  if (t.dtls_in > 0) count(p, C_DTLS_FORWARDED_IN, t.dtls_in);
  if (p->tx_udp.n > 0) send_all(p, p->udp.fd, &p->tx_udp);
  if (p->tx_dtls.n > 0) send_all(p, p->dtls.fd, &p->tx_dtls);
  for (int i = 0; i < n; i++) {
    assoc_unref(rx->from[i]);
    assoc_unref(rx->seal_to[i]);
    rx->from[i] = rx->seal_to[i] = NULL;
  }
  hand_to_js(p, rx, n, is_dtls);
}

/* The segment size of a coalesced receive (its UDP_GRO control message), or 0. */
static uint32_t gro_size(struct msghdr *h) {
  if (h->msg_controllen == 0 || (h->msg_flags & MSG_CTRUNC) != 0) return 0;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(h); cm != NULL; cm = CMSG_NXTHDR(h, cm)) {
    if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO && cm->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int v;
      memcpy(&v, CMSG_DATA(cm), sizeof(v));
      return v > 0 ? (uint32_t)v : 0;
    }
  }
  return 0;
}

/*
 * Fills up to `batch` entries from the received slots [*slot, n), resuming at byte *off of slot
 * *slot (a coalesced receive may span windows). Returns how many.
 */
static uint32_t fill_entries(plane_t *p, rx_t *rx, int n, int *slot, uint32_t *off) {
  uint32_t e = 0, coalesced = 0, in_coalesced = 0;
  while (*slot < n && e < p->batch) {
    int k = *slot;
    struct msghdr *h = &rx->msgs[k].msg_hdr;
    uint32_t total = rx->msgs[k].msg_len;
    uint8_t *base = rx->buf + (size_t)k * rx->slot;
    uint8_t flags = 0;
    if (h->msg_namelen != sizeof(struct sockaddr_in) || rx->addr[k].sin_family != AF_INET) flags |= ENTRY_BAD_SRC;
    uint32_t seg = rx->gro ? gro_size(h) : 0;
    uint32_t start = 0, len = total;
    if (seg > 0 && seg < total) {
      /* Coalesced: the next segment of it. */
      if (*off == 0) {
        coalesced++;
        in_coalesced += (total + seg - 1) / seg;
      }
      start = *off;
      len = total - start < seg ? total - start : seg;
      *off = start + len;
      if (*off >= total) {
        *off = 0;
        (*slot)++;
        if ((h->msg_flags & MSG_TRUNC) != 0) flags |= ENTRY_TRUNC;
      }
    } else {
      (*slot)++;
      *off = 0;
      if ((h->msg_flags & MSG_TRUNC) != 0) flags |= ENTRY_TRUNC;
    }
    if (len > rx->max_len) {
      len = rx->max_len;
      flags |= ENTRY_TRUNC;
    }
    rx->dat[e] = base + start;
    rx->len[e] = len;
    rx->peer[e] = &rx->addr[k];
    rx->eflags[e] = flags;
    e++;
  }
  if (coalesced > 0) {
    count(p, C_GRO_RECEIVED, coalesced);
    count(p, C_GRO_DATAGRAMS, in_coalesced);
  }
  return e;
}

/*
 * Receives one batch on `rx` (the UDP or the DTLS socket) and handles its datagrams, `batch` at a
 * time (more than `batch` when the kernel coalesced some). Returns the receives (slots) filled.
 */
/*
 * Points each receive header at its slot, address and control space, once, when the worker starts
 * (the slots are final by then: UDP_GRO is chosen at open).
 */
static void rx_prepare(rx_t *rx, uint32_t batch) {
  for (uint32_t i = 0; i < batch; i++) {
    rx->iov[i].iov_base = rx->buf + (size_t)i * rx->slot;
    rx->iov[i].iov_len = rx->slot;
    memset(&rx->msgs[i], 0, sizeof(struct mmsghdr));
    rx->msgs[i].msg_hdr.msg_iov = &rx->iov[i];
    rx->msgs[i].msg_hdr.msg_iovlen = 1;
    rx->msgs[i].msg_hdr.msg_name = &rx->addr[i];
    rx->msgs[i].msg_hdr.msg_namelen = sizeof(struct sockaddr_in);
    if (rx->gro) {
      rx->msgs[i].msg_hdr.msg_control = rx->ctrl + (size_t)i * GRO_CMSG_SPACE;
      rx->msgs[i].msg_hdr.msg_controllen = GRO_CMSG_SPACE;
    }
  }
  rx->dirty = 0;
}

static int receive_batch(plane_t *p, rx_t *rx, int is_dtls) {
  /* recvmmsg wrote the lengths of the headers it filled last time; nothing else of them. */
  for (uint32_t i = 0; i < rx->dirty; i++) {
    rx->msgs[i].msg_hdr.msg_namelen = sizeof(struct sockaddr_in);
    if (rx->gro) rx->msgs[i].msg_hdr.msg_controllen = GRO_CMSG_SPACE;
  }
  rx->dirty = 0;
  int n = recvmmsg(rx->fd, rx->msgs, p->batch, MSG_DONTWAIT, NULL);
  if (n <= 0) return 0;
  rx->dirty = (uint32_t)n;
  count(p, C_BATCHES, 1);
  int slot = 0;
  uint32_t off = 0;
  while (slot < n) {
    uint32_t e = fill_entries(p, rx, n, &slot, &off);
    count(p, is_dtls ? C_DTLS_RECEIVED : C_RECEIVED, e);
    process_entries(p, rx, (int)e, is_dtls);
  }
  return n;
}

/*
 * Receives on a readable socket. Draining (drain=1): a full batch means more may wait, so it
 * receives again before polling; drain=2: again after any batch, as datagrams may have arrived
 * while it was handled. At most 8 more, so the other socket and the wake-up are not starved.
 */
static int drain(plane_t *p, rx_t *rx, int is_dtls) {
  int total = 0;
  for (int k = 0; k < 9; k++) {
    int n = receive_batch(p, rx, is_dtls);
    if (n > 0) total += n;
    if (n <= 0 || p->drain == 0 || (p->drain == 1 && n < (int)p->batch)) break;
  }
  return total;
}

/* The arrival rate coalescing looks at: datagrams per second over windows of this length. */
#define COALESCE_WINDOW_US 2000
/* The rate from which it coalesces (COALESCE_MIN_PPS in native-dataplane.ts). */
#define COALESCE_MIN_PPS 40000

/*
 * Adaptive coalescing, as a NIC moderates its interrupts: while datagrams arrive at least
 * coalesce_min_pps fast (over the last window), the worker sleeps after handling a wake-up, long
 * enough for about a batch to gather but never longer than coalesce_us, so that one wake-up (and
 * one poll, recvmmsg and sendmmsg) serves many datagrams instead of three or four. Below that
 * rate it never sleeps: light traffic keeps its latency. Returns the rate it now believes, and
 * sets *slept when it slept.
 */
static uint64_t coalesce(plane_t *p, int got, int64_t *win_start, uint64_t *win_n, uint64_t rate, int *slept) {
  int64_t t = now_us();
  *win_n += (uint64_t)got;
  if (t - *win_start >= COALESCE_WINDOW_US) {
    rate = *win_n * 1000000u / (uint64_t)(t - *win_start);
    *win_start = t;
    *win_n = 0;
  }
  if (rate < p->coalesce_min_pps || rate == 0) return rate;
  uint64_t us = (uint64_t)p->batch * 1000000u / rate;
  if (us > (uint64_t)p->coalesce_us) us = (uint64_t)p->coalesce_us;
  if (us == 0) return rate;
  struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)us * 1000};
  nanosleep(&ts, NULL);
  count(p, C_COALESCED, 1);
  *slept = 1;
  return rate;
}

static void *worker(void *arg) {
  plane_t *p = arg;
  struct pollfd pfds[3];
  int nfds = 0, udp_i = -1, dtls_i = -1;
  if (p->udp.fd >= 0) {
    udp_i = nfds;
    pfds[nfds++] = (struct pollfd){.fd = p->udp.fd, .events = POLLIN};
  }
  if (p->dtls.fd >= 0) {
    dtls_i = nfds;
    pfds[nfds++] = (struct pollfd){.fd = p->dtls.fd, .events = POLLIN};
  }
  int wake_i = nfds;
  pfds[nfds++] = (struct pollfd){.fd = p->wake_fd, .events = POLLIN};
  if (p->udp.fd >= 0) rx_prepare(&p->udp, p->batch);
  if (p->dtls.fd >= 0) rx_prepare(&p->dtls, p->batch);
  /* Sleeps of a few tens of µs: the default 50 µs timer slack would double them. */
  if (p->coalesce_us > 0) prctl(PR_SET_TIMERSLACK, p->timer_slack_ns, 0, 0, 0);
  int64_t win_start = now_us();
  uint64_t win_n = 0, rate = 0;
  /*
   * Hot: the worker has just slept to coalesce, so datagrams are all but certainly waiting; it
   * receives on both sockets straight away instead of asking poll first (poll's set-up and
   * tear-down were most of what a wake-up still cost). The first receive that finds nothing
   * sends it back to poll.
   */
  int hot = 0;
  for (;;) {
    int got = 0;
    if (hot) {
      if (__atomic_load_n(&p->stopping, __ATOMIC_ACQUIRE)) break;
      if (udp_i >= 0) got += drain(p, &p->udp, 0);
      if (dtls_i >= 0) got += drain(p, &p->dtls, 1);
      hot = 0;
      if (got == 0) continue;
      count(p, C_DIRECT_RECEIVES, 1);
    } else {
      /* Pending drop notices: wake up to hand them over when they are NOTICE_MS old. */
      int timeout = -1;
      if (p->nnotices > 0) {
        int64_t left = p->notices_since_ms + NOTICE_MS - now_ms();
        timeout = left < 0 ? 0 : (int)left;
      }
      int pr = poll(pfds, (nfds_t)nfds, timeout);
      if (pr < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (pfds[wake_i].revents != 0) break;
      if (pr == 0) {
        hand_to_js(p, NULL, 0, 0);
        continue;
      }
      if (udp_i >= 0 && (pfds[udp_i].revents & POLLIN) != 0) got += drain(p, &p->udp, 0);
      if (dtls_i >= 0 && (pfds[dtls_i].revents & POLLIN) != 0) got += drain(p, &p->dtls, 1);
    }
    if (p->coalesce_us > 0) {
      int slept = 0;
      rate = coalesce(p, got, &win_start, &win_n, rate, &slept);
      hot = slept && p->direct;
    }
    if (p->linger_us > 0) {
      struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)p->linger_us * 1000};
      nanosleep(&ts, NULL);
    }
    /*
     * Spinning (spin=µs): receive without sleeping until nothing came for that long, so that a
     * datagram arriving right behind the last one is taken without a wake-up. At most 1 ms per
     * wake-up, so the stop signal and the notices are still seen under steady traffic.
     */
    if (p->spin_us > 0) {
      int64_t start = now_us(), last = start, t = start;
      while (t - last < p->spin_us && t - start < 1000) {
        int n = 0;
        if (udp_i >= 0) n += receive_batch(p, &p->udp, 0);
        if (dtls_i >= 0) n += receive_batch(p, &p->dtls, 1);
        t = now_us();
        if (n > 0) last = t;
      }
    }
  }
  return NULL;
}

static void finalize_batch_data(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  free(data);
}

/*
 * Runs on the JS thread: hands one batch to the JS callback as (Buffer data, Int32Array meta). Every
 * Node-API call is checked; when one fails, the batch is dropped (counted as C_DROP_JS_CALL) and
 * nothing is written through a pointer that call was to set.
 */
static void call_js(napi_env env, napi_value js_cb, void *context, void *data) {
  plane_t *p = context;
  js_batch_t *b = data;
  if (env == NULL || js_cb == NULL) {
    /* The function is going away (after its finalizer): the plane may be gone, touch only the batch. */
    free(b->data);
    free(b->meta);
    free(b);
    return;
  }
  /* Here the plane is alive: the thread-safe function holds a reference to it until finalized. */
  __atomic_sub_fetch(&p->js_pending, b->cost, __ATOMIC_RELAXED);
  napi_value buf = NULL, meta_ab = NULL, meta = NULL, undefined = NULL;
  uint8_t *bytes = b->data;
  b->data = NULL;
  napi_status st = napi_create_external_buffer(env, b->bytes, bytes, finalize_batch_data, NULL, &buf);
  if (st != napi_ok) {
    /* Some runtimes refuse external buffers (the bytes stay ours): fall back to a copy. */
    void *copy = NULL;
    st = napi_create_buffer_copy(env, b->bytes, bytes, &copy, &buf);
    free(bytes);
  }
  void *meta_data = NULL;
  size_t meta_bytes = sizeof(int32_t) * META_WIDTH * b->count;
  if (st == napi_ok) st = napi_create_arraybuffer(env, meta_bytes, &meta_data, &meta_ab);
  if (st == napi_ok && meta_data == NULL) st = napi_generic_failure;
  if (st == napi_ok) {
    memcpy(meta_data, b->meta, meta_bytes);
    st = napi_create_typedarray(env, napi_int32_array, META_WIDTH * b->count, meta_ab, 0, &meta);
  }
  if (st == napi_ok) st = napi_get_undefined(env, &undefined);
  uint32_t datagrams = b->datagrams;
  free(b->meta);
  free(b);
  if (st != napi_ok) {
    count(p, C_DROP_JS_CALL, datagrams);
    return;
  }
  napi_value argv[2] = {buf, meta};
  /* A throwing callback leaves its exception pending: Node reports it as uncaught, as for any callback. */
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

#define ARGS(n)                                                                                      \
  size_t argc = (n);                                                                               \
  napi_value argv[(n)];                                                                            \
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));                                     \
  if (argc < (n)) {                                                                                \
    napi_throw_type_error(env, "ERR_NATIVE_DATAPLANE", "missing arguments");                       \
    return NULL;                                                                                   \
  }

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

/* A Buffer argument of exactly `want` bytes (or any length when want is 0). */
static int bytes_arg(napi_env env, napi_value v, size_t want, const uint8_t **out, size_t *len) {
  void *data;
  size_t n;
  if (napi_get_buffer_info(env, v, &data, &n) != napi_ok || (want != 0 && n != want)) {
    napi_throw_type_error(env, "ERR_NATIVE_DATAPLANE", "a Buffer of the expected length");
    return -1;
  }
  *out = data;
  if (len != NULL) *len = n;
  return 0;
}

/* An IPv4 address string and a port, in network order. */
static int addr_args(napi_env env, napi_value host_v, napi_value port_v, uint32_t *addr, uint16_t *port) {
  char host[64];
  size_t host_len;
  uint32_t p;
  struct in_addr in;
  if (napi_get_value_string_utf8(env, host_v, host, sizeof(host), &host_len) != napi_ok ||
      napi_get_value_uint32(env, port_v, &p) != napi_ok || p > 65535 || inet_pton(AF_INET, host, &in) != 1) {
    napi_throw_range_error(env, "ERR_NATIVE_DATAPLANE", "an IPv4 address and a port");
    return -1;
  }
  *addr = in.s_addr;
  *port = htons((uint16_t)p);
  return 0;
}

static void plane_stop(plane_t *p) {
  if (p->running) {
    uint64_t one = 1;
    __atomic_store_n(&p->stopping, 1, __ATOMIC_RELEASE);
    ssize_t w = write(p->wake_fd, &one, sizeof(one));
    (void)w;
    pthread_join(p->thread, NULL);
    p->running = 0;
  }
  if (p->udp.fd >= 0) close(p->udp.fd);
  if (p->dtls.fd >= 0) close(p->dtls.fd);
  if (p->wake_fd >= 0) close(p->wake_fd);
  p->udp.fd = p->dtls.fd = p->wake_fd = -1;
}

static void rx_free(rx_t *rx) {
  free(rx->buf);
  free(rx->msgs);
  free(rx->iov);
  free(rx->addr);
  free(rx->ctrl);
  free(rx->dat);
  free(rx->len);
  free(rx->peer);
  free(rx->eflags);
  free(rx->disp);
  free(rx->js_off);
  free(rx->js_len);
  free(rx->js_assoc);
  free(rx->from);
  free(rx->seal_to);
}

static int rx_alloc(rx_t *rx, uint32_t batch, uint32_t slot) {
  rx->slot = slot;
  rx->max_len = slot;
  rx->buf = malloc((size_t)slot * batch);
  rx->msgs = calloc(batch, sizeof(struct mmsghdr));
  rx->iov = calloc(batch, sizeof(struct iovec));
  rx->addr = calloc(batch, sizeof(struct sockaddr_in));
  rx->dat = calloc(batch, sizeof(uint8_t *));
  rx->len = calloc(batch, sizeof(uint32_t));
  rx->peer = calloc(batch, sizeof(struct sockaddr_in *));
  rx->eflags = calloc(batch, 1);
  if (!rx->dat || !rx->len || !rx->peer || !rx->eflags) return -1;
  rx->disp = calloc(batch, 1);
  rx->js_off = calloc(batch, sizeof(uint32_t));
  rx->js_len = calloc(batch, sizeof(uint32_t));
  rx->js_assoc = calloc(batch, sizeof(uint32_t));
  rx->from = calloc(batch, sizeof(assoc_t *));
  rx->seal_to = calloc(batch, sizeof(assoc_t *));
  return rx->buf && rx->msgs && rx->iov && rx->addr && rx->disp && rx->js_off && rx->js_len && rx->js_assoc &&
                 rx->from && rx->seal_to
             ? 0
             : -1;
}

/*
 * UDP_GRO on an open socket, when the kernel takes it: slots become GRO_SLOT bytes (what a
 * coalesced receive may hold; only the pages written to are ever touched). Off, and the socket
 * as it was, when the kernel refuses it or memory runs out.
 */
static void rx_enable_gro(rx_t *rx, uint32_t batch) {
  int one = 1, zero = 0;
  if (rx->fd < 0 || setsockopt(rx->fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) != 0) return;
  uint8_t *buf = malloc((size_t)GRO_SLOT * batch);
  uint8_t *ctrl = calloc(batch, GRO_CMSG_SPACE);
  if (buf == NULL || ctrl == NULL) {
    free(buf);
    free(ctrl);
    setsockopt(rx->fd, SOL_UDP, UDP_GRO, &zero, sizeof(zero));
    return;
  }
  free(rx->buf);
  rx->buf = buf;
  rx->ctrl = ctrl;
  rx->slot = GRO_SLOT;
  rx->gro = 1;
}

static void tx_free(tx_t *tx) {
  free(tx->msgs);
  free(tx->iov);
  free(tx->addr);
  free(tx->relay_len);
  free(tx->gmsgs);
  free(tx->giov);
  free(tx->gfrom);
  free(tx->gfirst);
  free(tx->gcount);
  free(tx->gctrl);
  free(tx->next);
  free(tx->head);
  free(tx->tail);
  free(tx->hgen);
  free(tx->hdest);
}

static int tx_alloc(tx_t *tx, uint32_t batch) {
  tx->msgs = calloc(batch, sizeof(struct mmsghdr));
  tx->iov = calloc(batch, sizeof(struct iovec));
  tx->addr = calloc(batch, sizeof(struct sockaddr_in));
  tx->relay_len = calloc(batch, sizeof(uint32_t));
  tx->gmsgs = calloc(batch, sizeof(struct mmsghdr));
  tx->giov = calloc(batch, sizeof(struct iovec));
  tx->gfrom = calloc(batch, sizeof(uint32_t));
  tx->gfirst = calloc(batch, sizeof(uint32_t));
  tx->gcount = calloc(batch, sizeof(uint32_t));
  tx->gctrl = calloc(batch, GSO_CMSG_SPACE);
  tx->next = calloc(batch, sizeof(uint32_t));
  tx->head = calloc(batch, sizeof(uint32_t));
  tx->tail = calloc(batch, sizeof(uint32_t));
  tx->hgen = calloc(DEST_HASH, sizeof(uint32_t));
  tx->hdest = calloc(DEST_HASH, sizeof(uint32_t));
  tx->n = 0;
  tx->gen = 0;
  return tx->msgs && tx->iov && tx->addr && tx->relay_len && tx->gmsgs && tx->giov && tx->gfrom && tx->gfirst &&
                 tx->gcount && tx->gctrl && tx->next && tx->head && tx->tail && tx->hgen && tx->hdest
             ? 0
             : -1;
}

static void plane_free(plane_t *p) {
  plane_stop(p);
  pthread_mutex_lock(&p->lock);
  table_free(&p->table);
  assocs_free(&p->assocs);
  pthread_mutex_unlock(&p->lock);
  pthread_mutex_destroy(&p->lock);
  rx_free(&p->udp);
  rx_free(&p->dtls);
  tx_free(&p->tx_udp);
  tx_free(&p->tx_dtls);
  free(p->seal_buf);
  free(p->scratch);
  free(p->js_seal_buf);
  free(p);
}

/* JavaScript thread: drops one of the two references (handle, thread-safe function). */
static void plane_unref(plane_t *p) {
  if (--p->refs == 0) plane_free(p);
}

/* JavaScript thread: this side's reference to the thread-safe function, once (abort: drop what is queued). */
static void plane_release_tsfn(plane_t *p, napi_threadsafe_function_release_mode mode) {
  if (!p->tsfn_live || p->tsfn_released) return;
  p->tsfn_released = 1;
  napi_release_threadsafe_function(p->tsfn, mode);
}

/* The thread-safe function is finalized (after close, the handle's finalizer, or at environment teardown). */
static void finalize_tsfn(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  plane_t *p = data;
  /* The worker calls the function: it stops before the function goes. */
  plane_stop(p);
  p->tsfn_live = 0;
  plane_unref(p);
}

/* The handle was collected, with or without close(). */
static void finalize_plane(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  plane_t *p = data;
  plane_stop(p);
  plane_release_tsfn(p, napi_tsfn_abort);
  plane_unref(p);
}

/* A non-blocking UDP socket bound to addr:port (port in host order), or -errno. */
static int open_socket(uint32_t addr, uint32_t port, uint16_t *bound_port) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int buf = 4 * 1024 * 1024;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = addr;
  sa.sin_port = htons((uint16_t)port);
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    int err = errno;
    close(fd);
    return -err;
  }
  socklen_t sl = sizeof(sa);
  getsockname(fd, (struct sockaddr *)&sa, &sl);
  *bound_port = ntohs(sa.sin_port);
  return fd;
}

/*
 * GAMEWIRE_NATIVE_TUNING, for measuring one choice against another in the same run (bench/
 * unity-relay.ts) and for turning an offload off or on: comma-separated name=value, of
 *   gso=0|1     UDP_SEGMENT sends of runs to one destination (default 1);
 *   gro=0|1     UDP_GRO receives, split here (default 0: on loopback nothing arrives coalesced from
 *               ordinary clients, and the 64 KiB receive slots it needs cost a little);
 *   drain=0|1|2 receive again before polling: never, after a full batch (default), after any;
 *   busy=µs     SO_BUSY_POLL (default 0: off; raising it may need CAP_NET_ADMIN);
 *   linger=µs   sleep after each wake-up so that batches grow (default 0: off; adds latency);
 *   spin=µs     after each wake-up, receive without sleeping until nothing came for that long
 *               (default 0: off; at most 1 ms per wake-up);
 *   batch=n     datagrams per recvmmsg, 1..MAX_BATCH (default: what JavaScript asks);
 *   coalesce=µs the longest coalescing sleep (default: what JavaScript asks, see coalesce());
 *   coalesceMin=pps the arrival rate from which it coalesces (default COALESCE_MIN_PPS);
 *   slack=ns    the worker's timer slack while it coalesces (default 1000; Linux's is 50000);
 *   direct=0|1  after a coalescing sleep, receive without polling first (default 1).
 * Anything else is ignored. An offload the kernel refuses is off (see js_offloads).
 */
typedef struct {
  int gso, gro, drain, busy, linger, spin, coalesce, direct;
  uint32_t batch, coalesce_min, slack;
} tuning_t;

static void tuning_read(tuning_t *t) {
  const char *env = getenv("GAMEWIRE_NATIVE_TUNING");
  if (env == NULL) return;
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", env);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(tok, '=');
    if (eq == NULL) continue;
    *eq = 0;
    long v = strtol(eq + 1, NULL, 10);
    if (strcmp(tok, "gso") == 0) t->gso = v != 0;
    else if (strcmp(tok, "gro") == 0) t->gro = v != 0;
    else if (strcmp(tok, "drain") == 0 && v >= 0 && v <= 2) t->drain = (int)v;
    else if (strcmp(tok, "linger") == 0 && v >= 0 && v <= 1000) t->linger = (int)v;
    else if (strcmp(tok, "spin") == 0 && v >= 0 && v <= 1000) t->spin = (int)v;
    else if (strcmp(tok, "busy") == 0 && v >= 0 && v <= 1000000) t->busy = (int)v;
    else if (strcmp(tok, "batch") == 0 && v >= 1 && v <= MAX_BATCH) t->batch = (uint32_t)v;
    else if (strcmp(tok, "coalesce") == 0 && v >= 0 && v <= 1000) t->coalesce = (int)v;
    else if (strcmp(tok, "coalesceMin") == 0 && v >= 1 && v <= 100000000) t->coalesce_min = (uint32_t)v;
    else if (strcmp(tok, "slack") == 0 && v >= 1 && v <= 1000000) t->slack = (uint32_t)v;
    else if (strcmp(tok, "direct") == 0) t->direct = v != 0;
  }
}

/* Whether this kernel knows UDP_SEGMENT (asked without changing the socket). */
static int gso_supported(int fd) {
  int v = 0;
  socklen_t l = sizeof(v);
  return getsockopt(fd, SOL_UDP, UDP_SEGMENT, &v, &l) == 0;
}

/* SO_BUSY_POLL (may need CAP_NET_ADMIN): whether the kernel took it. */
static int busy_poll_set(int fd, int us) {
  if (setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &us, sizeof(us)) != 0) return 0;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_PREFER_BUSY_POLL, &one, sizeof(one)); /* kernels ≥ 5.11; optional */
  return 1;
}

/*
 * open(host, udpPort, dtlsPort, maxDatagram, batch, onBatch, maxToDtls[, coalesceUs]) →
 * [handle, udpPort, dtlsPort]. A port of -1 opens no such socket (and reports -1). coalesceUs: the
 * longest coalescing sleep (see coalesce()), 0 or absent: none.
 */
static napi_value js_open(napi_env env, napi_callback_info info) {
  size_t argc = 8;
  napi_value argv[8];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 7) {
    napi_throw_type_error(env, "ERR_NATIVE_DATAPLANE", "missing arguments");
    return NULL;
  }
  int32_t coalesce_us = 0;
  if (argc >= 8) {
    napi_valuetype t;
    CHECK(napi_typeof(env, argv[7], &t));
    if (t != napi_undefined) {
      if (napi_get_value_int32(env, argv[7], &coalesce_us) != napi_ok || coalesce_us < 0 || coalesce_us > 1000) {
        napi_throw_range_error(env, "ERR_NATIVE_DATAPLANE", "coalesceUs: 0 to 1000");
        return NULL;
      }
    }
  }
  char host[64];
  size_t host_len;
  CHECK(napi_get_value_string_utf8(env, argv[0], host, sizeof(host), &host_len));
  int32_t udp_port, dtls_port;
  uint32_t max_datagram, batch, max_to_dtls;
  CHECK(napi_get_value_int32(env, argv[1], &udp_port));
  CHECK(napi_get_value_int32(env, argv[2], &dtls_port));
  CHECK(napi_get_value_uint32(env, argv[3], &max_datagram));
  CHECK(napi_get_value_uint32(env, argv[4], &batch));
  CHECK(napi_get_value_uint32(env, argv[6], &max_to_dtls));
  if (udp_port > 65535 || dtls_port > 65535 || udp_port < -1 || dtls_port < -1 || (udp_port < 0 && dtls_port < 0) ||
      max_datagram < RELAY_HEADER_LEN || max_datagram > 65507 || batch == 0 || batch > MAX_BATCH) {
    napi_throw_range_error(env, "ERR_NATIVE_DATAPLANE", "port, maxDatagram or batch out of range");
    return NULL;
  }
  if (dtls_port >= 0 && !dtls_crypto_available()) {
    napi_throw_error(env, "ERR_NATIVE_DTLS_UNAVAILABLE",
                     "the OpenSSL functions of the DTLS record layer are not in this process");
    return NULL;
  }
  struct in_addr host_addr;
  if (inet_pton(AF_INET, host, &host_addr) != 1) {
    napi_throw_error(env, "ERR_NATIVE_DATAPLANE_ADDRESS", "the native data plane binds IPv4 addresses only");
    return NULL;
  }
  tuning_t tuning = {.gso = 1, .gro = 0, .drain = 1, .busy = 0, .linger = 0, .spin = 0, .batch = batch,
                     .coalesce = coalesce_us, .coalesce_min = COALESCE_MIN_PPS, .slack = 1000, .direct = 1};
  tuning_read(&tuning);
  batch = tuning.batch;
  plane_t *p = calloc(1, sizeof(plane_t));
  if (p == NULL) {
    napi_throw_error(env, "ERR_NATIVE_DATAPLANE", "out of memory");
    return NULL;
  }
  p->drain = tuning.drain;
  p->linger_us = tuning.linger;
  p->spin_us = tuning.spin;
  p->coalesce_us = tuning.coalesce;
  p->coalesce_min_pps = tuning.coalesce_min;
  p->timer_slack_ns = tuning.slack;
  p->direct = tuning.direct;
  p->udp.fd = p->dtls.fd = p->wake_fd = -1;
  p->max_datagram = max_datagram;
  p->max_to_dtls = max_to_dtls < max_datagram ? max_to_dtls : max_datagram;
  p->batch = batch;
  pthread_mutex_init(&p->lock, NULL);
  /* DTLS datagrams carry handshakes too, which may be larger than a relay message. */
  uint32_t dtls_slot = max_datagram + 64 + DTLS_MAX_OVERHEAD + 1;
  if (dtls_slot < 16384) dtls_slot = 16384;
  p->seal_slot = max_datagram + DTLS_MAX_OVERHEAD;
  p->js_seal_cap = 65535 + DTLS_MAX_OVERHEAD;
  int ok = tx_alloc(&p->tx_udp, batch) == 0 && tx_alloc(&p->tx_dtls, batch) == 0;
  if (ok && udp_port >= 0) ok = rx_alloc(&p->udp, batch, max_datagram + 1) == 0; /* + 1 tells "too large" */
  if (ok && dtls_port >= 0) {
    ok = rx_alloc(&p->dtls, batch, dtls_slot) == 0;
    p->seal_buf = malloc((size_t)p->seal_slot * batch);
    p->scratch = malloc(dtls_slot);
    p->js_seal_buf = malloc(p->js_seal_cap);
    ok = ok && p->seal_buf != NULL && p->scratch != NULL && p->js_seal_buf != NULL;
  }
  if (!ok) {
    plane_free(p);
    napi_throw_error(env, "ERR_NATIVE_DATAPLANE", "out of memory");
    return NULL;
  }
  uint16_t bound_udp = 0, bound_dtls = 0;
  int err = 0;
  const char *which = "";
  int32_t failed_port = 0;
  if (udp_port >= 0) {
    int fd = open_socket(host_addr.s_addr, (uint32_t)udp_port, &bound_udp);
    if (fd < 0) {
      err = -fd;
      failed_port = udp_port;
    } else {
      p->udp.fd = fd;
    }
  }
  if (err == 0 && dtls_port >= 0) {
    int fd = open_socket(host_addr.s_addr, (uint32_t)dtls_port, &bound_dtls);
    if (fd < 0) {
      err = -fd;
      failed_port = dtls_port;
      which = " (DTLS)";
    } else {
      p->dtls.fd = fd;
    }
  }
  if (err == 0) {
    int any = p->udp.fd >= 0 ? p->udp.fd : p->dtls.fd;
    p->gso = tuning.gso && gso_supported(any);
    if (tuning.gro) {
      rx_enable_gro(&p->udp, batch);
      rx_enable_gro(&p->dtls, batch);
      p->gro = p->udp.gro || p->dtls.gro;
    }
    if (tuning.busy > 0) {
      int ok_busy = 1;
      if (p->udp.fd >= 0) ok_busy = busy_poll_set(p->udp.fd, tuning.busy);
      if (ok_busy && p->dtls.fd >= 0) ok_busy = busy_poll_set(p->dtls.fd, tuning.busy);
      p->busy_poll_us = ok_busy ? tuning.busy : 0;
    }
  }
  p->wake_fd = eventfd(0, EFD_CLOEXEC);
  if (err == 0 && p->wake_fd < 0) err = errno;
  if (err != 0) {
    plane_free(p);
    char msg[160];
    snprintf(msg, sizeof(msg), "bind %s:%d%s failed: %s", host, failed_port, which, strerror(err));
    napi_throw_error(env, err == EADDRINUSE ? "EADDRINUSE" : "ERR_NATIVE_DATAPLANE", msg);
    return NULL;
  }
  napi_value resource_name;
  if (napi_create_string_utf8(env, "gamewire-relay-dataplane", NAPI_AUTO_LENGTH, &resource_name) != napi_ok ||
      napi_create_threadsafe_function(env, argv[5], NULL, resource_name, 0, 1, p, finalize_tsfn, p, call_js,
                                      &p->tsfn) != napi_ok) {
    plane_free(p);
    napi_throw_error(env, "ERR_NATIVE_DATAPLANE", "cannot create the thread-safe function");
    return NULL;
  }
  /* From here the plane has two owners: the handle below and the thread-safe function. */
  p->tsfn_live = 1;
  p->refs = 2;
  napi_value handle;
  if (napi_create_external(env, p, finalize_plane, NULL, &handle) != napi_ok) {
    /* No handle: drop its reference now; the function's finalizer frees the plane. */
    plane_release_tsfn(p, napi_tsfn_abort);
    plane_unref(p);
    napi_throw_error(env, "ERR_NATIVE_DATAPLANE", "cannot create the handle");
    return NULL;
  }
  /* Any failure from here: stop, release; the handle's finalizer frees the plane. */
  const char *failed = NULL;
  if (pthread_create(&p->thread, NULL, worker, p) != 0) failed = "cannot start the worker thread";
  else p->running = 1;
  napi_value udp_v, dtls_v, result;
  if (failed == NULL && (napi_create_int32(env, udp_port >= 0 ? bound_udp : -1, &udp_v) != napi_ok ||
                         napi_create_int32(env, dtls_port >= 0 ? bound_dtls : -1, &dtls_v) != napi_ok ||
                         napi_create_array_with_length(env, 3, &result) != napi_ok ||
                         napi_set_element(env, result, 0, handle) != napi_ok ||
                         napi_set_element(env, result, 1, udp_v) != napi_ok ||
                         napi_set_element(env, result, 2, dtls_v) != napi_ok))
    failed = "cannot build the result";
  if (failed != NULL) {
    plane_stop(p);
    plane_release_tsfn(p, napi_tsfn_abort);
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (!pending) napi_throw_error(env, "ERR_NATIVE_DATAPLANE", failed);
    return NULL;
  }
  return result;
}

/*
 * close(handle): stops the worker, closes the sockets, lets pending JS batches drain. The tables
 * stay readable (dtlsDetach still returns an association's state) until the handle is collected.
 */
static napi_value js_close(napi_env env, napi_callback_info info) {
  ARGS(1);
  plane_t *p = plane_arg(env, argv[0]);
  if (p == NULL) return NULL;
  plane_stop(p);
  /* Batches already queued still reach JavaScript; then the function is finalized. */
  plane_release_tsfn(p, napi_tsfn_release);
  return NULL;
}

static napi_value send_on(napi_env env, napi_callback_info info, int dtls) {
  ARGS(4);
  plane_t *p = plane_arg(env, argv[0]);
  if (p == NULL) return NULL;
  const uint8_t *data;
  size_t len;
  if (bytes_arg(env, argv[1], 0, &data, &len) != 0) return NULL;
  int rc = 0;
  uint32_t addr;
  uint16_t port;
  if (addr_args(env, argv[3], argv[2], &addr, &port) != 0) return NULL;
  int fd = dtls ? p->dtls.fd : p->udp.fd;
  struct sockaddr_in to;
  memset(&to, 0, sizeof(to));
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = addr;
  to.sin_port = port;
  if (fd < 0) rc = -EBADF;
  else if (sendto(fd, data, len, 0, (struct sockaddr *)&to, sizeof(to)) < 0) rc = -errno;
  napi_value out;
  CHECK(napi_create_int32(env, rc, &out));
  return out;
}

/* send(handle, buffer, port, ipv4 string) → 0 or -errno. Non-blocking. From the UDP socket. */
static napi_value js_send(napi_env env, napi_callback_info info) {
  return send_on(env, info, 0);
}

/* dtlsSend(handle, buffer, port, ipv4 string) → 0 or -errno: a datagram as is, from the DTLS socket. */
static napi_value js_dtls_send(napi_env env, napi_callback_info info) {
  return send_on(env, info, 1);
}

/* bind(handle, id, ipv4, port): the allocation is bound over UDP from ipv4:port. */
static napi_value js_bind(napi_env env, napi_callback_info info) {
  ARGS(4);
  plane_t *p = plane_arg(env, argv[0]);
  const uint8_t *id;
  if (p == NULL || id_arg(env, argv[1], &id) != 0) return NULL;
  uint32_t addr;
  uint16_t port;
  if (addr_args(env, argv[2], argv[3], &addr, &port) != 0) return NULL;
  pthread_mutex_lock(&p->lock);
  entry_t *e = table_insert(&p->table, id);
  if (e != NULL) {
    e->bound = BOUND_UDP;
    e->addr = addr;
    e->port = port;
    e->assoc_id = 0;
  }
  pthread_mutex_unlock(&p->lock);
  if (e == NULL) napi_throw_error(env, "ERR_NATIVE_DATAPLANE", "out of memory");
  return NULL;
}

/* bindDtls(handle, id, associationId): the allocation is bound through that DTLS association. */
static napi_value js_bind_dtls(napi_env env, napi_callback_info info) {
  ARGS(3);
  plane_t *p = plane_arg(env, argv[0]);
  const uint8_t *id;
  if (p == NULL || id_arg(env, argv[1], &id) != 0) return NULL;
  uint32_t assoc_id;
  CHECK(napi_get_value_uint32(env, argv[2], &assoc_id));
  pthread_mutex_lock(&p->lock);
  entry_t *e = table_insert(&p->table, id);
  if (e != NULL) {
    e->bound = BOUND_DTLS;
    e->addr = 0;
    e->port = 0;
    e->assoc_id = assoc_id;
  }
  pthread_mutex_unlock(&p->lock);
  if (e == NULL) napi_throw_error(env, "ERR_NATIVE_DATAPLANE", "out of memory");
  return NULL;
}

/* unbind(handle, id): no longer bound here (links stay). */
static napi_value js_unbind(napi_env env, napi_callback_info info) {
  ARGS(2);
  plane_t *p = plane_arg(env, argv[0]);
  const uint8_t *id;
  if (p == NULL || id_arg(env, argv[1], &id) != 0) return NULL;
  pthread_mutex_lock(&p->lock);
  entry_t *e = table_find(&p->table, id);
  if (e != NULL) e->bound = BOUND_NONE;
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

/* forget(handle, id): the allocation is gone (expired or deleted). */
static napi_value js_forget(napi_env env, napi_callback_info info) {
  ARGS(2);
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
  ARGS(4);
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
  ARGS(2);
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
  ARGS(2);
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

/* stats(handle) → the C_* counters in order, then tableSize and associations. */
static napi_value js_stats(napi_env env, napi_callback_info info) {
  ARGS(1);
  plane_t *p = plane_arg(env, argv[0]);
  if (p == NULL) return NULL;
  napi_value arr;
  CHECK(napi_create_array_with_length(env, C_COUNT + 2, &arr));
  for (int i = 0; i < C_COUNT; i++) {
    napi_value v;
    CHECK(napi_create_double(env, (double)__atomic_load_n(&p->counters[i], __ATOMIC_RELAXED), &v));
    CHECK(napi_set_element(env, arr, (uint32_t)i, v));
  }
  pthread_mutex_lock(&p->lock);
  uint32_t live = p->table.live;
  uint32_t assocs = p->assocs.count;
  pthread_mutex_unlock(&p->lock);
  napi_value v;
  CHECK(napi_create_uint32(env, live, &v));
  CHECK(napi_set_element(env, arr, C_COUNT, v));
  CHECK(napi_create_uint32(env, assocs, &v));
  CHECK(napi_set_element(env, arr, C_COUNT + 1, v));
  return arr;
}

/*
 * offloads(handle) → [gso, gro, busyPollUs, batch, drain, coalesceUs, coalesceMinPps] as chosen at
 * open (gso as it is now).
 */
static napi_value js_offloads(napi_env env, napi_callback_info info) {
  ARGS(1);
  plane_t *p = plane_arg(env, argv[0]);
  if (p == NULL) return NULL;
  double v[7] = {__atomic_load_n(&p->gso, __ATOMIC_RELAXED), p->gro, p->busy_poll_us, p->batch, p->drain,
                 p->coalesce_us, p->coalesce_min_pps};
  napi_value arr;
  CHECK(napi_create_array_with_length(env, 7, &arr));
  for (uint32_t i = 0; i < 7; i++) {
    napi_value x;
    CHECK(napi_create_double(env, v[i], &x));
    CHECK(napi_set_element(env, arr, i, x));
  }
  return arr;
}

/* A 48-bit sequence number (or -1 where allowed) from a JS number. */
static int seq_arg(napi_env env, napi_value v, int64_t *out) {
  double d;
  if (napi_get_value_double(env, v, &d) != napi_ok || d != d || d < -1 || d > (double)DTLS_MAX_SEQ + 1 ||
      d != (double)(int64_t)d) {
    napi_throw_range_error(env, "ERR_NATIVE_DATAPLANE", "a sequence number");
    return -1;
  }
  *out = (int64_t)d;
  return 0;
}

/*
 * dtlsAttach(handle, associationId, ipv4, port, suite, epoch, readKey, readIv, writeKey, writeIv,
 *            writeSeq, replayHighest, replayLow32, replayHigh32, maxPlaintext) → true, or false
 * when the suite is not implemented here or memory ran out (JavaScript then keeps the association).
 * From now on, application records from ipv4:port are opened here and their replay window kept
 * here, and records to it are sealed here with the next sequence number, until dtlsDetach. An
 * association already held for the same id or the same address and port is replaced.
 */
static napi_value js_dtls_attach(napi_env env, napi_callback_info info) {
  ARGS(15);
  plane_t *p = plane_arg(env, argv[0]);
  if (p == NULL) return NULL;
  uint32_t id, suite_id, epoch, lo, hi, max_plaintext;
  uint32_t addr;
  uint16_t port;
  CHECK(napi_get_value_uint32(env, argv[1], &id));
  if (addr_args(env, argv[2], argv[3], &addr, &port) != 0) return NULL;
  CHECK(napi_get_value_uint32(env, argv[4], &suite_id));
  CHECK(napi_get_value_uint32(env, argv[5], &epoch));
  const dtls_suite_t *s = suite_id <= 0xffff ? dtls_suite_find((uint16_t)suite_id) : NULL;
  napi_value result;
  if (s == NULL || epoch > 0xffff || p->dtls.fd < 0) {
    CHECK(napi_get_boolean(env, false, &result));
    return result;
  }
  const uint8_t *rk, *riv, *wk, *wiv;
  if (bytes_arg(env, argv[6], s->key_len, &rk, NULL) != 0 ||
      bytes_arg(env, argv[7], s->fixed_iv_len, &riv, NULL) != 0 ||
      bytes_arg(env, argv[8], s->key_len, &wk, NULL) != 0 ||
      bytes_arg(env, argv[9], s->fixed_iv_len, &wiv, NULL) != 0)
    return NULL;
  int64_t write_seq, highest;
  if (seq_arg(env, argv[10], &write_seq) != 0 || seq_arg(env, argv[11], &highest) != 0) return NULL;
  CHECK(napi_get_value_uint32(env, argv[12], &lo));
  CHECK(napi_get_value_uint32(env, argv[13], &hi));
  CHECK(napi_get_value_uint32(env, argv[14], &max_plaintext));
  assoc_t *a = assoc_new();
  int ok = a != NULL;
  if (ok) {
    a->id = id;
    a->addr = addr;
    a->port = port;
    a->epoch = (uint16_t)epoch;
    a->max_plaintext = max_plaintext;
    a->write_seq = write_seq < 0 ? 0 : (uint64_t)write_seq;
    a->replay.any = highest >= 0;
    a->replay.highest = highest >= 0 ? (uint64_t)highest : 0;
    a->replay.bits = highest >= 0 ? ((uint64_t)hi << 32) | lo : 0;
    a->last_rx_ms = -1;
    a->key_len = s->key_len;
    a->iv_len = s->fixed_iv_len;
    memcpy(a->read_key, rk, s->key_len);
    memcpy(a->read_iv, riv, s->fixed_iv_len);
    memcpy(a->write_key, wk, s->key_len);
    memcpy(a->write_iv, wiv, s->fixed_iv_len);
    ok = dtls_dir_init(&a->rd, s, rk, riv, 0) == 0 && dtls_dir_init(&a->wr, s, wk, wiv, 1) == 0;
  }
  if (ok) {
    /* Published by the plane lock: the worker finds it only after this. */
    pthread_mutex_lock(&p->lock);
    ok = assocs_put(&p->assocs, a) == 0;
    pthread_mutex_unlock(&p->lock);
  }
  if (!ok && a != NULL) assoc_free(a);
  if (ok) count(p, C_DTLS_ATTACHED, 1);
  CHECK(napi_get_boolean(env, ok, &result));
  return result;
}

/*
 * dtlsDetach(handle, associationId[, readKey, readIv, writeKey, writeIv]) → [writeSeq, replayHighest
 * (-1: none), replayLow32, replayHigh32, idleMs (-1: nothing received here), applicationDataSeen
 * (0/1)], or null when not held. The association is no longer handled here. With the four Buffers
 * (of the suite's key and IV lengths), its keys are written back into them first: JavaScript zeroes
 * its copies after dtlsAttach, so the keys live in one place at a time.
 */
static napi_value js_dtls_detach(napi_env env, napi_callback_info info) {
  size_t argc = 6;
  napi_value argv[6];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 2 || (argc > 2 && argc < 6)) {
    napi_throw_type_error(env, "ERR_NATIVE_DATAPLANE", "missing arguments");
    return NULL;
  }
  plane_t *p = plane_arg(env, argv[0]);
  if (p == NULL) return NULL;
  uint32_t id;
  CHECK(napi_get_value_uint32(env, argv[1], &id));
  uint8_t *keys[4] = {NULL, NULL, NULL, NULL};
  size_t key_lens[4] = {0, 0, 0, 0};
  if (argc >= 6) {
    for (int k = 0; k < 4; k++) {
      void *d;
      if (napi_get_buffer_info(env, argv[2 + k], &d, &key_lens[k]) != napi_ok) {
        napi_throw_type_error(env, "ERR_NATIVE_DATAPLANE", "keys are Buffers");
        return NULL;
      }
      keys[k] = d;
    }
  }
  double v[6];
  int found = 0;
  /* Out of the table first (the worker no longer finds it), then its final state under its own
   * lock: a batch that is opening or sealing with it finishes first, and sees `dead` after. */
  pthread_mutex_lock(&p->lock);
  assoc_t *a = assoc_by_id(&p->assocs, id);
  if (a != NULL) assocs_unlink(&p->assocs, a);
  pthread_mutex_unlock(&p->lock);
  if (a != NULL) {
    pthread_mutex_lock(&a->mu);
    __atomic_store_n(&a->dead, 1, __ATOMIC_RELEASE);
    int64_t now = now_ms();
    found = 1;
    if (keys[0] != NULL && key_lens[0] == a->key_len && key_lens[1] == a->iv_len && key_lens[2] == a->key_len &&
        key_lens[3] == a->iv_len) {
      memcpy(keys[0], a->read_key, a->key_len);
      memcpy(keys[1], a->read_iv, a->iv_len);
      memcpy(keys[2], a->write_key, a->key_len);
      memcpy(keys[3], a->write_iv, a->iv_len);
    }
    v[0] = (double)a->write_seq;
    v[1] = a->replay.any ? (double)a->replay.highest : -1;
    v[2] = (double)(uint32_t)(a->replay.bits & 0xffffffffu);
    v[3] = (double)(uint32_t)(a->replay.bits >> 32);
    v[4] = a->last_rx_ms < 0 ? -1 : (double)(now - a->last_rx_ms);
    v[5] = a->app_seen;
    pthread_mutex_unlock(&a->mu);
    assoc_unref(a); /* the table's reference */
  }
  napi_value out;
  if (!found) {
    CHECK(napi_get_null(env, &out));
    return out;
  }
  count(p, C_DTLS_DETACHED, 1);
  CHECK(napi_create_array_with_length(env, 6, &out));
  for (uint32_t i = 0; i < 6; i++) {
    napi_value x;
    CHECK(napi_create_double(env, v[i], &x));
    CHECK(napi_set_element(env, out, i, x));
  }
  return out;
}

/*
 * dtlsSeal(handle, associationId, contentType, plaintext) → 0 sent (or lost, as UDP may lose it),
 * -1 not held here, -2 the sequence numbers are spent, -3 too large. One record, one datagram.
 */
static napi_value js_dtls_seal(napi_env env, napi_callback_info info) {
  ARGS(4);
  plane_t *p = plane_arg(env, argv[0]);
  if (p == NULL) return NULL;
  uint32_t id, type;
  CHECK(napi_get_value_uint32(env, argv[1], &id));
  CHECK(napi_get_value_uint32(env, argv[2], &type));
  const uint8_t *pt;
  size_t len;
  if (bytes_arg(env, argv[3], 0, &pt, &len) != 0) return NULL;
  int rc = 0;
  long r = -1;
  struct sockaddr_in to;
  memset(&to, 0, sizeof(to));
  to.sin_family = AF_INET;
  pthread_mutex_lock(&p->lock);
  assoc_t *a = p->dtls.fd < 0 ? NULL : assoc_by_id(&p->assocs, id);
  if (a != NULL) assoc_ref(a);
  pthread_mutex_unlock(&p->lock);
  if (a == NULL) rc = -1;
  else {
    /* Its own lock: the worker may be sealing for it too (the sequence number is shared). */
    pthread_mutex_lock(&a->mu);
    if (assoc_dead(a)) rc = -1;
    else if (a->write_seq > DTLS_MAX_SEQ) rc = -2;
    else if (len > a->max_plaintext || len > 0xffff - 64) rc = -3;
    else {
      r = dtls_seal(&a->wr, (uint8_t)type, a->epoch, a->write_seq, pt, len, p->js_seal_buf, p->js_seal_cap);
      if (r < 0) rc = -3;
      else {
        a->write_seq++;
        to.sin_addr.s_addr = a->addr;
        to.sin_port = a->port;
      }
    }
    pthread_mutex_unlock(&a->mu);
    assoc_unref(a);
  }
  /* js_seal_buf belongs to this thread: sending outside the lock is safe. */
  if (rc == 0) {
    count(p, C_DTLS_SEALED_FOR_JS, 1);
    sendto(p->dtls.fd, p->js_seal_buf, (size_t)r, 0, (struct sockaddr *)&to, sizeof(to));
  }
  napi_value out;
  CHECK(napi_create_int32(env, rc, &out));
  return out;
}

/*
 * dtlsExpectHandshake(handle, associationId, expecting) → whether it is held here. While expecting,
 * the epoch-0 records and epoch-1 handshake records from its address that do not authenticate
 * under its keys (a new session's flight and Finished) go to JavaScript instead of being dropped.
 */
static napi_value js_dtls_expect_handshake(napi_env env, napi_callback_info info) {
  ARGS(3);
  plane_t *p = plane_arg(env, argv[0]);
  if (p == NULL) return NULL;
  uint32_t id;
  bool on;
  CHECK(napi_get_value_uint32(env, argv[1], &id));
  CHECK(napi_get_value_bool(env, argv[2], &on));
  pthread_mutex_lock(&p->lock);
  assoc_t *a = assoc_by_id(&p->assocs, id);
  if (a != NULL) assoc_ref(a);
  pthread_mutex_unlock(&p->lock);
  if (a != NULL) {
    pthread_mutex_lock(&a->mu);
    a->expect_hs = on ? 1 : 0;
    pthread_mutex_unlock(&a->mu);
    assoc_unref(a);
  }
  napi_value out;
  CHECK(napi_get_boolean(env, a != NULL, &out));
  return out;
}

/* dtlsIdle(handle, associationId) → ms since its last authentic record here, or -1. */
static napi_value js_dtls_idle(napi_env env, napi_callback_info info) {
  ARGS(2);
  plane_t *p = plane_arg(env, argv[0]);
  if (p == NULL) return NULL;
  uint32_t id;
  CHECK(napi_get_value_uint32(env, argv[1], &id));
  int64_t now = now_ms();
  pthread_mutex_lock(&p->lock);
  assoc_t *a = assoc_by_id(&p->assocs, id);
  if (a != NULL) assoc_ref(a);
  pthread_mutex_unlock(&p->lock);
  int64_t idle = -1;
  if (a != NULL) {
    pthread_mutex_lock(&a->mu);
    idle = a->last_rx_ms < 0 ? -1 : now - a->last_rx_ms;
    pthread_mutex_unlock(&a->mu);
    assoc_unref(a);
  }
  napi_value out;
  CHECK(napi_create_int64(env, idle, &out));
  return out;
}

/* dtlsAvailable() → whether the record layer's OpenSSL functions resolve in this process. */
static napi_value js_dtls_available(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value out;
  CHECK(napi_get_boolean(env, dtls_crypto_available(), &out));
  return out;
}

/* dtlsMissing() → the first OpenSSL function that did not resolve, or null when all did. */
static napi_value js_dtls_missing(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value out;
  const char *missing = dtls_crypto_missing();
  if (missing == NULL) CHECK(napi_get_null(env, &out));
  else CHECK(napi_create_string_utf8(env, missing, NAPI_AUTO_LENGTH, &out));
  return out;
}

/*
 * sealRecord(suite, key, iv, type, epoch, seq, plaintext) → Buffer (one whole record), and
 * openRecord(suite, key, iv, record) → Buffer (plaintext) or null: the record layer on its own,
 * for known-answer tests against other implementations and for load generators.
 */
static napi_value js_seal_record(napi_env env, napi_callback_info info) {
  ARGS(7);
  uint32_t suite_id, type, epoch;
  CHECK(napi_get_value_uint32(env, argv[0], &suite_id));
  const dtls_suite_t *s = suite_id <= 0xffff ? dtls_suite_find((uint16_t)suite_id) : NULL;
  if (s == NULL || !dtls_crypto_available()) {
    napi_throw_error(env, "ERR_NATIVE_DTLS_UNAVAILABLE", "suite not implemented or no OpenSSL");
    return NULL;
  }
  const uint8_t *key, *iv, *pt;
  size_t len;
  if (bytes_arg(env, argv[1], s->key_len, &key, NULL) != 0 || bytes_arg(env, argv[2], s->fixed_iv_len, &iv, NULL) != 0)
    return NULL;
  CHECK(napi_get_value_uint32(env, argv[3], &type));
  CHECK(napi_get_value_uint32(env, argv[4], &epoch));
  int64_t seq;
  if (seq_arg(env, argv[5], &seq) != 0) return NULL;
  if (bytes_arg(env, argv[6], 0, &pt, &len) != 0) return NULL;
  if (len > 0xffff - 64 || seq < 0 || epoch > 0xffff) {
    napi_throw_range_error(env, "ERR_NATIVE_DATAPLANE", "plaintext, epoch or sequence number out of range");
    return NULL;
  }
  dtls_dir_t d;
  if (dtls_dir_init(&d, s, key, iv, 1) != 0) {
    napi_throw_error(env, "ERR_NATIVE_DATAPLANE", "cipher setup failed");
    return NULL;
  }
  size_t cap = len + dtls_overhead(s);
  void *out_data;
  napi_value out;
  if (napi_create_buffer(env, cap, &out_data, &out) != napi_ok) {
    dtls_dir_free(&d);
    explicit_bzero(&d, sizeof(d));
    napi_throw_error(env, "ERR_NATIVE_DATAPLANE", "out of memory");
    return NULL;
  }
  long r = dtls_seal(&d, (uint8_t)type, (uint16_t)epoch, (uint64_t)seq, pt, len, out_data, cap);
  dtls_dir_free(&d);
  explicit_bzero(&d, sizeof(d));
  if (r < 0) {
    napi_throw_error(env, "ERR_NATIVE_DATAPLANE", "seal failed");
    return NULL;
  }
  return out;
}

static napi_value js_open_record(napi_env env, napi_callback_info info) {
  ARGS(4);
  uint32_t suite_id;
  CHECK(napi_get_value_uint32(env, argv[0], &suite_id));
  const dtls_suite_t *s = suite_id <= 0xffff ? dtls_suite_find((uint16_t)suite_id) : NULL;
  if (s == NULL || !dtls_crypto_available()) {
    napi_throw_error(env, "ERR_NATIVE_DTLS_UNAVAILABLE", "suite not implemented or no OpenSSL");
    return NULL;
  }
  const uint8_t *key, *iv, *rec;
  size_t len;
  if (bytes_arg(env, argv[1], s->key_len, &key, NULL) != 0 || bytes_arg(env, argv[2], s->fixed_iv_len, &iv, NULL) != 0 ||
      bytes_arg(env, argv[3], 0, &rec, &len) != 0)
    return NULL;
  napi_value out;
  if (len < DTLS_HEADER_LEN || (((size_t)rec[11] << 8) | rec[12]) != len - DTLS_HEADER_LEN) {
    CHECK(napi_get_null(env, &out));
    return out;
  }
  dtls_dir_t d;
  if (dtls_dir_init(&d, s, key, iv, 0) != 0) {
    napi_throw_error(env, "ERR_NATIVE_DATAPLANE", "cipher setup failed");
    return NULL;
  }
  uint8_t *pt = malloc(len);
  long r = pt == NULL ? -1 : dtls_open(&d, rec, len, pt);
  dtls_dir_free(&d);
  explicit_bzero(&d, sizeof(d));
  if (r < 0) {
    free(pt);
    CHECK(napi_get_null(env, &out));
    return out;
  }
  void *copy;
  napi_status st = napi_create_buffer_copy(env, (size_t)r, pt, &copy, &out);
  explicit_bzero(pt, (size_t)r);
  free(pt);
  CHECK(st);
  return out;
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
      {"offloads", NULL, js_offloads, NULL, NULL, NULL, napi_default, NULL},
      {"dtlsSend", NULL, js_dtls_send, NULL, NULL, NULL, napi_default, NULL},
      {"bindDtls", NULL, js_bind_dtls, NULL, NULL, NULL, napi_default, NULL},
      {"dtlsAttach", NULL, js_dtls_attach, NULL, NULL, NULL, napi_default, NULL},
      {"dtlsDetach", NULL, js_dtls_detach, NULL, NULL, NULL, napi_default, NULL},
      {"dtlsSeal", NULL, js_dtls_seal, NULL, NULL, NULL, napi_default, NULL},
      {"dtlsIdle", NULL, js_dtls_idle, NULL, NULL, NULL, napi_default, NULL},
      {"dtlsExpectHandshake", NULL, js_dtls_expect_handshake, NULL, NULL, NULL, napi_default, NULL},
      {"dtlsAvailable", NULL, js_dtls_available, NULL, NULL, NULL, napi_default, NULL},
      {"dtlsMissing", NULL, js_dtls_missing, NULL, NULL, NULL, napi_default, NULL},
      {"sealRecord", NULL, js_seal_record, NULL, NULL, NULL, napi_default, NULL},
      {"openRecord", NULL, js_open_record, NULL, NULL, NULL, napi_default, NULL},
  };
  if (napi_define_properties(env, exports, sizeof(props) / sizeof(props[0]), props) != napi_ok) return NULL;
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
