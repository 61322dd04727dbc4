/*
 * DTLS 1.2 record protection for the native data plane: the AEAD suites the project's DTLS server
 * negotiates (src/transports/dtls/suites.ts), over OpenSSL's EVP interface. OpenSSL is not linked
 * here: its symbols resolve from the Node binary that loads the addon (Node exports them for
 * addons), and the headers are those that ship with the pinned Node.
 *
 * Record layout (RFC 6347 §4.1, RFC 5246 §6.2.3.3): a 13-byte header (type, version, epoch,
 * 48-bit sequence number, length), then for AES-GCM/CCM an 8-byte explicit nonce (we write
 * epoch ‖ seq, RFC 5288 §3), the ciphertext and the tag. ChaCha20-Poly1305 has no explicit nonce:
 * the 12-byte IV is XORed with the 64-bit epoch ‖ seq (RFC 7905 §2). The additional data is
 * epoch ‖ seq ‖ type ‖ version ‖ plaintext length.
 */
#ifndef GAMEWIRE_DTLS_RECORD_H
#define GAMEWIRE_DTLS_RECORD_H

#include <stddef.h>
#include <stdint.h>

#define DTLS_HEADER_LEN 13
/* Largest expansion of a record by any suite: header, explicit nonce, tag. */
#define DTLS_MAX_OVERHEAD (DTLS_HEADER_LEN + 8 + 16)
#define DTLS_MAX_SEQ ((uint64_t)0xffffffffffffULL)

enum { DTLS_MODE_GCM = 1, DTLS_MODE_CCM = 2, DTLS_MODE_CHACHA = 3 };

typedef struct {
  uint16_t id;
  uint8_t mode;
  uint8_t key_len;
  uint8_t fixed_iv_len;
  uint8_t explicit_nonce_len;
  uint8_t tag_len;
} dtls_suite_t;

/* The suite with this IANA id, or NULL when the data plane does not implement it. */
const dtls_suite_t *dtls_suite_find(uint16_t id);

/* Whether every OpenSSL function used here resolves in the running process (checked once). */
int dtls_crypto_available(void);

/* The first OpenSSL function that did not resolve (NULL when every one did). */
const char *dtls_crypto_missing(void);

/* One direction of one association: a cipher context keyed once, and the implicit IV. */
typedef struct {
  const dtls_suite_t *suite;
  void *ctx; /* EVP_CIPHER_CTX */
  uint8_t iv[12];
  int encrypt;
} dtls_dir_t;

/* Keys the context (key_len and fixed_iv_len bytes from the suite). 0 on success. */
int dtls_dir_init(dtls_dir_t *d, const dtls_suite_t *s, const uint8_t *key, const uint8_t *iv, int encrypt);
void dtls_dir_free(dtls_dir_t *d);

/* Record expansion of a suite. */
static inline size_t dtls_overhead(const dtls_suite_t *s) {
  return DTLS_HEADER_LEN + s->explicit_nonce_len + s->tag_len;
}

/*
 * Seals `len` bytes of plaintext as one whole record into `out` (capacity `cap`). `pt` must not
 * overlap `out`. Returns the record's length, or -1 (no room, or a crypto failure).
 */
long dtls_seal(dtls_dir_t *d, uint8_t type, uint16_t epoch, uint64_t seq, const uint8_t *pt, size_t len,
               uint8_t *out, size_t cap);

/*
 * Opens one record: `rec` holds its header and fragment (`rec_len` bytes, the header's length field
 * already checked against it by the caller). The plaintext is written to `out`, which may be the
 * record's own ciphertext position (rec + 13 + explicit nonce) but must not overlap otherwise.
 * Returns the plaintext length, or -1 when the fragment is too short or does not authenticate.
 */
long dtls_open(dtls_dir_t *d, const uint8_t *rec, size_t rec_len, uint8_t *out);

/* The anti-replay window of RFC 6347 §4.1.2.6: bit i of `bits` = "highest − i was seen". */
typedef struct {
  uint64_t highest;
  uint64_t bits;
  int any; /* 0 until the first record is marked */
} dtls_replay_t;

static inline int dtls_replay_fresh(const dtls_replay_t *w, uint64_t seq) {
  if (!w->any || seq > w->highest) return 1;
  uint64_t back = w->highest - seq;
  if (back >= 64) return 0;
  return ((w->bits >> back) & 1) == 0;
}

static inline void dtls_replay_mark(dtls_replay_t *w, uint64_t seq) {
  if (!w->any) {
    w->any = 1;
    w->highest = seq;
    w->bits = 1;
    return;
  }
  if (seq > w->highest) {
    uint64_t shift = seq - w->highest;
    w->bits = shift >= 64 ? 0 : w->bits << shift;
    w->bits |= 1;
    w->highest = seq;
    return;
  }
  uint64_t back = w->highest - seq;
  if (back < 64) w->bits |= (uint64_t)1 << back;
}

#endif
